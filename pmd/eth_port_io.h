// A DPDK ethdev queue pair as the engine's wire: rx_burst and tx_burst on one
// port's queue. Works for every port type (net_ring, net_memif,
// net_af_packet, net_tap, virtio_user, PCI NICs).
//
// Threads: the engine thread that owns the queue.
#pragma once

#include <rte_ethdev.h>

#include "transport/packet_io.h"

namespace uroce::pmd {

class EthPortIo final : public transport::PacketIo {
 public:
  EthPortIo(uint16_t port_id, uint16_t queue_id) : port_id_(port_id), queue_id_(queue_id) {}

  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override { return rte_eth_rx_burst(port_id_, queue_id_, pkts, n); }
  // A full TX ring takes fewer; the engine keeps the rest for its next poll.
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override { return rte_eth_tx_burst(port_id_, queue_id_, pkts, n); }

  uint16_t port_id() const { return port_id_; }
  uint16_t queue_id() const { return queue_id_; }

 private:
  const uint16_t port_id_;
  const uint16_t queue_id_;
};

}  // namespace uroce::pmd
