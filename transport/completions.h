// Completions, the error state and receive requests: what the requester,
// completer and responder all need at the end of a request (a work
// completion on a CQ, a QP moved to ERR and flushed, an async event, the next
// receive request of a QP or its SRQ).
//
// Engine thread only.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "transport/engine_core.h"
#include "transport/queue_pair.h"

namespace uroce::transport {

// What a receive completes with: the ibv_wc fields a receive sets
// (ibv_poll_cq(3)); wr_id and qp_num come from the request and the QP.
struct RecvCompletion {
  ibv_wc_status status = IBV_WC_SUCCESS;
  uint32_t byte_len = 0;
  ibv_wc_opcode opcode = IBV_WC_RECV;
  unsigned wc_flags = 0;
  uint32_t imm_or_rkey = 0;  // imm_data (network order), or the rkey a SEND with Invalidate named
  uint32_t src_qp = 0;       // UD: the sender's QPN (DETH)
  // IBV_WC_LOC_LEN_ERR: the bytes that did not fit (the cq layer reports them
  // as olen, fi_cq(3)).
  uint32_t vendor_err = 0;
  uint8_t sl = 0;  // UD: the frame's network type (UdNetworkTypeSl)
};

class Completions {
 public:
  explicit Completions(EngineCore& core) : core_(core) {}
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  // Completes the window's oldest request (qp->req.head) with `status` (a
  // work completion if it is signaled or failed), frees its send queue slot,
  // returns its credit and moves head on. Nothing may read the request after.
  void RetireOldestSend(QueuePair* qp, ibv_wc_status status);
  // Completes receive `wqe` of `qp` on its receive CQ (an XRC target's: its
  // SRQ's) with the fields of `done`.
  void CompleteRecv(QueuePair* qp, const RecvWqe& wqe, const RecvCompletion& done);
  // Moves the QP to ERR and flushes everything outstanding (IBTA 10.3.1.8).
  void EnterError(QueuePair* qp);
  void FlushQueues(QueuePair* qp);
  void RaiseAsync(ibv_event_type type, uint32_t qpn, const void* object);
  // Takes the next receive request for `qp` (its RQ or its SRQ).
  bool TakeRecv(QueuePair* qp, RecvWqe* out);
  void ReturnSendCredit(QueuePair* qp) { qp->send_credits_used.fetch_sub(1, std::memory_order_release); }

 private:
  EngineCore& core_;
};

}  // namespace uroce::transport
