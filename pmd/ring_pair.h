// Two DPDK ports joined back to back by two rte_rings, in one process: what
// port A transmits, port B receives, and the other way round. The simplest
// "wire" for tests and the single-process demo.
#pragma once

#include <rte_ring.h>

#include <string>

#include "common/status.h"

namespace uroce::pmd {

struct RingPair {
  uint16_t port_a = 0;
  uint16_t port_b = 0;
  rte_ring* a_to_b = nullptr;
  rte_ring* b_to_a = nullptr;
};

// Creates ports "net_ring_<name>_a" and "net_ring_<name>_b" (not started;
// use StartPort). `ring_size` is a power of two.
StatusOr<RingPair> CreateRingPair(const std::string& name, unsigned ring_size = 1024);

// Closes both ports and frees the rings. Mbufs still in the rings go back to
// their pools.
Status DestroyRingPair(RingPair& pair);

}  // namespace uroce::pmd
