// Two ends of one local link in one process, as the daemon makes them for
// two processes (host/local_links.h): each a LocalLinks with its own slot,
// both mapping one ShmChannel file, each told the other is this process
// (so each may read the other's memory for large messages,
// transport/peer_memory.h). Frames for anywhere else go to a port that
// drops and counts them. For `uroce soak --port link` and the tests that run
// engines over a real local link without a daemon.
#pragma once

#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "host/local_links.h"
#include "host/shm_channel.h"

namespace uroce::host {

class LocalLinkPair {
 public:
  static constexpr uint32_t kSlotA = 3, kSlotB = 7;

  // Receive buffers from `pool`; frames of up to `max_frame` bytes.
  // `stage_chunks`: the link's payload area each way (ShmChannel::Create;
  // 0: none, so large messages are read from the other's memory).
  static StatusOr<std::unique_ptr<LocalLinkPair>> Create(rte_mempool* pool, uint32_t max_frame,
                                                         uint32_t stage_chunks = kLinkStageChunks);

  LocalLinks& a() { return *a_; }
  LocalLinks& b() { return *b_; }
  // Frames that would have gone to the daemon (none, when all is well).
  uint64_t to_daemon() const { return nowhere_a_.frames.load() + nowhere_b_.frames.load(); }

 private:
  // The daemon's port: nobody is there.
  struct Nowhere final : transport::PacketIo {
    std::atomic<uint64_t> frames{0};
    uint16_t RxBurst(rte_mbuf**, uint16_t) override { return 0; }
    uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
      rte_pktmbuf_free_bulk(pkts, n);
      frames += n;
      return n;
    }
  };
  LocalLinkPair() = default;

  Nowhere nowhere_a_, nowhere_b_;
  std::unique_ptr<ShmChannel> file_;
  std::unique_ptr<LocalLinks> a_, b_;
};

}  // namespace uroce::host
