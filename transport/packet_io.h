// The engine's view of a wire: bursts of mbufs in and out, in DPDK's burst
// style (caller's array in, count out). A DPDK ethdev queue, an in-memory
// lossy link and test fixtures all implement it.
//
// Ownership: RxBurst hands the returned mbufs to the caller. TxBurst takes
// ownership of the first k mbufs it reports as sent; the rest stay the
// caller's (the engine keeps them for the next poll, it never drops them).
//
// Threads: engine thread only.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

namespace uroce::transport {

class PacketIo {
 public:
  virtual ~PacketIo() = default;
  virtual uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) = 0;
  virtual uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) = 0;
};

}  // namespace uroce::transport
