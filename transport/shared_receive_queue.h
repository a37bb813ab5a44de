// A shared receive queue (IBTA 10.2.9): receive work requests that any QP
// attached to it may consume. When the number of posted requests falls below
// the armed limit the engine raises IBV_EVENT_SRQ_LIMIT_REACHED once and
// disarms the limit (ibv_modify_srq(3)).
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/memory_region.h"
#include "transport/mpmc_ring.h"
#include "transport/work_request.h"

namespace uroce::transport {

class CompletionQueue;

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(PdHandle pd_handle, uint32_t max_wr_in, uint32_t max_sge_in, uint32_t limit_in,
                     RingStorage storage = {})
      : pd(pd_handle),
        max_wr(max_wr_in),
        max_sge(max_sge_in),
        ring(max_wr_in, RecvWqePayloadBytes(max_sge_in), std::move(storage)),
        limit(limit_in) {}
  static size_t RingBytes(uint32_t max_wr, uint32_t max_sge) {
    return StridedRing::StorageBytesFor(max_wr, RecvWqePayloadBytes(max_sge));
  }

  const PdHandle pd;
  const uint32_t max_wr;
  const uint32_t max_sge;
  StridedRing ring;  // slots sized from max_sge (issue 16)
  std::atomic<uint32_t> posted{0};  // requests in the ring
  std::atomic<uint32_t> limit;      // 0: disarmed
  std::atomic<uint64_t> limit_events{0};
  // XRC SRQs (IBTA annex A14, XRC, ibv_create_srq_ex(3) IBV_SRQT_XRC): their XRC
  // domain (0: a basic SRQ), the number an XRCETH names them by, and the CQ
  // their receives complete on (XRC target QPs have none). Set before the SRQ
  // is published to the engine thread, never changed after.
  uint32_t xrcd = 0;
  uint32_t srqn = 0;
  CompletionQueue* cq = nullptr;
};

}  // namespace uroce::transport
