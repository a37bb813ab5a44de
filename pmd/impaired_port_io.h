// Network faults on a real port (`[impair]`, `uroce exec --impair`): a
// PacketIo between the engine and its port (any DPDK port, or a daemon's
// shared-memory port) that loses, duplicates, reorders, delays and corrupts
// frames where they leave the engine (TxBurst) and where they enter it
// (RxBurst), with the seeded decisions of transport/impairment.h, the same
// code that impairs `uroce soak`'s in-memory link. Each direction has its
// own generator, so the faults of a direction depend only on the seed and
// that direction's frame sequence, not on how sending and receiving
// interleave.
//
// Ownership: as PacketIo. Held frames (delayed, reordered, or waiting for
// a full TX queue) are this object's; FreeHeld (or the destructor) returns
// them to their pool. Duplicates are copies from the endpoint's pool.
//
// Fast path: no allocation (the hold queues are sized up front), no lock,
// no system call (time is the TSC).
//
// Threads: RxBurst, TxBurst and FreeHeld on the engine thread (or once the
// engine is gone); counters() from any thread.
#pragma once

#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "transport/impairment.h"
#include "transport/packet_io.h"

namespace uroce::pmd {

// The `[impair]` section (runtime/config.h), for one port.
struct PortImpairment {
  transport::Impairments faults;  // delays (max_delay, reorder_delay) in microseconds
  bool tx = true;                 // impair frames the engine sends
  bool rx = true;                 // impair frames the engine receives
  uint64_t seed = 1;              // the port's own seed (DeriveSeed of [impair] seed)
  uint32_t hold_frames = 1024;    // frames each direction holds at most
  // The port's word on which received frames came in link form, which has
  // no ICRC (ImpairmentStage::set_link_frames); null: none do.
  transport::PeerMemory* link_frames = nullptr;
};

// Seeds of independent streams from one seed (SplitMix64 of seed + stream):
// the ports of a process and their directions each draw their own sequence.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

struct ImpairedPortCounters {
  transport::ImpairmentCounters tx, rx;
};
// "tx: sent N dropped N ...; rx: ..." for messages.
std::string ImpairmentSummary(const ImpairedPortCounters& c);

class ImpairedPortIo final : public transport::PacketIo {
 public:
  // `port` (not owned) must outlive this object.
  ImpairedPortIo(transport::PacketIo* port, rte_mempool* copy_pool, const PortImpairment& config);
  ~ImpairedPortIo() override;
  ImpairedPortIo(const ImpairedPortIo&) = delete;
  ImpairedPortIo& operator=(const ImpairedPortIo&) = delete;

  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override;

  // Frees what the hold queues keep (teardown, after the engine is gone).
  void FreeHeld();
  size_t held() const { return tx_.held() + rx_.held(); }
  // Any thread: the counters as of the last burst that did something.
  ImpairedPortCounters counters() const;

 private:
  void Publish();

  transport::PacketIo* const port_;
  const transport::Impairments faults_;
  const bool impair_tx_, impair_rx_;
  const uint32_t hold_frames_;
  transport::FaultGenerator tx_generator_, rx_generator_;
  transport::ImpairmentCounters tx_counters_, rx_counters_;
  transport::ImpairmentStage tx_, rx_;
  // Published for counters(): relaxed stores by the engine thread (one
  // writer, so no read-modify-write), loads from anywhere.
  static constexpr int kFields = 10;
  std::atomic<uint64_t> published_[2][kFields] = {};
};

}  // namespace uroce::pmd
