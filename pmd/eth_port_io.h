// A DPDK ethdev queue pair as the engine's wire: rx_burst and tx_burst on one
// port's queue. Works for every port type (net_ring, net_memif,
// net_af_packet, net_tap, virtio_user, PCI NICs).
//
// Threads: the engine thread that owns the queue.
#pragma once

#include <rte_ethdev.h>

#include <atomic>

#include "pmd/memif_unmap_guard.h"
#include "transport/packet_io.h"

namespace uroce::pmd {

class EthPortIo final : public transport::PacketIo {
 public:
  // `ready`, when given, gates every burst: while it is false another thread
  // (Runtime's memif connector) starts and stops the port, and ethdev bursts
  // must not run meanwhile. It only ever goes from false to true.
  EthPortIo(uint16_t port_id, uint16_t queue_id, const std::atomic<bool>* ready = nullptr)
      : port_id_(port_id), queue_id_(queue_id), ready_(ready), unmap_fence_(MemifBurstFence(port_id)) {}

  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    if (!Ready()) return 0;
    BurstScope burst(unmap_fence_);
    return rte_eth_rx_burst(port_id_, queue_id_, pkts, n);
  }
  // A full TX ring takes fewer, a port not ready none; the engine keeps the
  // rest for its next poll.
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    if (!Ready()) return 0;
    BurstScope burst(unmap_fence_);
    return rte_eth_tx_burst(port_id_, queue_id_, pkts, n);
  }

  uint16_t port_id() const { return port_id_; }
  uint16_t queue_id() const { return queue_id_; }

 private:
  // Once true it stays true: after the first true, no more atomic loads.
  bool Ready() {
    if (ready_ == nullptr) return true;
    if (!ready_->load(std::memory_order_acquire)) return false;
    ready_ = nullptr;
    return true;
  }

  const uint16_t port_id_;
  const uint16_t queue_id_;
  const std::atomic<bool>* ready_;
  // A memif port's: its peer's disconnect unmaps the rings on another
  // thread, which waits for a burst marked here (pmd/memif_unmap_guard.h).
  BurstFence* const unmap_fence_;
};

}  // namespace uroce::pmd

namespace uroce::pmd {

// Every receive queue of a port, one transmit queue: a kernel interface's
// NIC spreads received frames over its queues (RSS), and an af_xdp port has
// a socket per queue, so one poller reads them all, each in turn. Transmit
// goes through queue 0 (one thread sends; the NIC's queues all reach the
// wire).
class MultiQueuePortIo final : public transport::PacketIo {
 public:
  MultiQueuePortIo(uint16_t port_id, uint16_t queues) : port_id_(port_id), queues_(queues == 0 ? 1 : queues) {}

  // Up to n frames, from the queues in turn (the next call starts after the
  // last queue that gave any, so a busy queue cannot starve the others).
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    uint16_t got = 0;
    for (uint16_t i = 0; i < queues_ && got < n; ++i) {
      const uint16_t q = next_;
      next_ = static_cast<uint16_t>(next_ + 1 == queues_ ? 0 : next_ + 1);
      got = static_cast<uint16_t>(got + rte_eth_rx_burst(port_id_, q, pkts + got, static_cast<uint16_t>(n - got)));
    }
    return got;
  }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override { return rte_eth_tx_burst(port_id_, 0, pkts, n); }

 private:
  const uint16_t port_id_;
  const uint16_t queues_;
  uint16_t next_ = 0;
};

}  // namespace uroce::pmd
