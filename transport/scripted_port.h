// A wire a test holds both ends of (testonly): frames the test queues in
// `inbound` arrive at the engine, frames the engine sends wait in `outbound`
// for the test to inspect and free. `blocked` makes the transmit side refuse
// everything, as a NIC whose TX queue is full.
#pragma once

#include <rte_mbuf.h>

#include <deque>
#include <vector>

#include "transport/packet_io.h"

namespace uroce::transport {

class ScriptedPort : public PacketIo {
 public:
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && !inbound.empty()) {
      pkts[k++] = inbound.front();
      inbound.pop_front();
    }
    return k;
  }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    if (blocked) return 0;
    for (uint16_t i = 0; i < n; ++i) outbound.push_back(pkts[i]);
    if (n > 0) bursts.push_back(n);
    return n;
  }
  // Frees whatever is still queued either way.
  void FreeAll() {
    for (rte_mbuf* m : inbound) rte_pktmbuf_free(m);
    for (rte_mbuf* m : outbound) rte_pktmbuf_free(m);
    inbound.clear();
    outbound.clear();
  }

  bool blocked = false;
  std::deque<rte_mbuf*> inbound, outbound;
  std::vector<uint16_t> bursts;  // frames taken by each TxBurst that took any
};

}  // namespace uroce::transport
