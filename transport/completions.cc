// Completions and the error state, shared by the requester, completer and
// responder (completions.h).
//
// Engine thread only.
#include "transport/completions.h"

#include "transport/work_request.h"

namespace uroce::transport {

bool Completions::TakeRecv(QueuePair* qp, RecvWqe* out) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // An XRC target takes its receives from the XRC SRQ of the request
  // (Responder::SelectXrcSrq), never from a queue of its own.
  SharedReceiveQueue* srq = qp->type == IBV_QPT_XRC_RECV ? qp->resp.xrc_srq : qp->srq;
  if (qp->type == IBV_QPT_XRC_RECV && srq == nullptr) return false;
  if (srq == nullptr) {
    if (!qp->recv_ring.TryPopSingleConsumer([out](const std::byte* w) { ReadRecvWqe(w, out); })) return false;
    qp->recv_credits_used.fetch_sub(1, std::memory_order_release);
    return true;
  }
  if (!srq->ring().TryPopSingleConsumer([out](const std::byte* w) { ReadRecvWqe(w, out); })) return false;
  const uint32_t left = srq->posted.fetch_sub(1, std::memory_order_acq_rel) - 1;
  const uint32_t limit = srq->limit.load(std::memory_order_relaxed);
  // ibv_modify_srq(3): the event fires once when fewer than `limit` requests
  // remain, and disarms the limit.
  uint32_t armed = limit;
  if (limit != 0 && left < limit && srq->limit.compare_exchange_strong(armed, 0)) {
    srq->limit_events.fetch_add(1, std::memory_order_relaxed);
    RaiseAsync(IBV_EVENT_SRQ_LIMIT_REACHED, 0, srq);
  }
  return true;
}

void Completions::RaiseAsync(ibv_event_type type, uint32_t qpn, const void* object) {
  AsyncEvent e;
  e.type = type;
  e.qpn = qpn;
  e.object = object;
  core_.async_events.TryPush(e);  // a full event ring loses the newest event only
}

void Completions::RetireOldestSend(QueuePair* qp, ibv_wc_status status) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  RequesterState& r = qp->req;
  const uint64_t position = r.head++;
  const SendSlot& slot = r.window[position & r.window_mask];
  // Unsignaled requests complete silently unless they failed (ibv_post_send(3)).
  const bool report = status != IBV_WC_SUCCESS || slot.signaled;
  ibv_wc wc{};
  if (report) {
    wc.wr_id = slot.wqe->wr_id;
    wc.status = status;
    wc.opcode = SendCompletionOpcode(slot.wqe->opcode);
    wc.qp_num = qp->qpn;
    wc.byte_len = status == IBV_WC_SUCCESS ? static_cast<uint32_t>(slot.wqe->total_length) : 0;
  }
  // The request is read: its slot goes back to the posters (the
  // send queue is the window), and only then its credit, so a poster that
  // gets the credit finds the slot free.
  qp->send_ring.Release(position);
  ReturnSendCredit(qp);
  if (report && !qp->send_cq->Push(wc)) RaiseAsync(IBV_EVENT_CQ_ERR, qp->qpn, qp->send_cq);
}

void Completions::CompleteRecv(QueuePair* qp, const RecvWqe& wqe, const RecvCompletion& done) {
  ibv_wc wc{};
  wc.sl = done.sl;
  wc.vendor_err = done.vendor_err;
  wc.wr_id = wqe.wr_id;
  wc.status = done.status;
  wc.opcode = done.opcode;
  wc.byte_len = done.byte_len;
  wc.imm_data = done.imm_or_rkey;
  wc.qp_num = qp->qpn;
  wc.src_qp = done.src_qp;
  wc.wc_flags = done.wc_flags;
  wc.pkey_index = 0;
  // An XRC target's receives complete on the CQ of the XRC SRQ they came
  // from, with the target QP's number (as mlx5 and rxe report them).
  CompletionQueue* cq = qp->recv_cq;
  if (qp->type == IBV_QPT_XRC_RECV) {
    if (qp->resp.xrc_srq == nullptr) return;  // the SRQ is gone, and its CQ's completions with it
    cq = qp->resp.xrc_srq->cq;
  }
  if (!cq->Push(wc)) RaiseAsync(IBV_EVENT_CQ_ERR, qp->qpn, cq);
}

void Completions::EnterError(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  if (qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR) return;
  qp->state.store(IBV_QPS_ERR, std::memory_order_release);
  core_.MarkBusy(qp);
  RaiseAsync(IBV_EVENT_QP_FATAL, qp->qpn, qp);
  FlushQueues(qp);
}

// IBTA 10.3.1.8 / o10-2.2: in the error state every outstanding and every
// newly posted request completes with a flush error.
void Completions::FlushQueues(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  RequesterState& req = qp->req;
  // Requests still in the send queue join the window first (credits leave
  // room for all of them), so that every request retires the same way.
  while (qp->TakePostedSend()) {}
  while (req.head != req.tail) {
    req.window[req.head & req.window_mask].signaled = true;  // flushed requests always complete (verbs)
    RetireOldestSend(qp, IBV_WC_WR_FLUSH_ERR);
  }
  req.next_send = req.head;
  req.reads_in_flight = 0;
  req.timer.Disarm();
  // Nothing is sent again from an errored QP: its chunks (and its READ
  // responses') go back to the link's area for the other QPs now, not at
  // its reset or destruction. A responder still copying one finds it
  // filled again (StagedIntact) if it is reused meanwhile, and fails that
  // request.
  req.staged.ReleaseAll(core_.config.peer_memory);
  core_.ReleaseHeldPackets(qp);
  ResponderState& resp = qp->resp;
  resp.read_staged.ReleaseAll(core_.config.peer_memory);
  if (resp.have_recv) {
    CompleteRecv(qp, resp.recv, {.status = IBV_WC_WR_FLUSH_ERR});
    resp.have_recv = false;
  }
  resp.reads_count = 0;
  resp.duplicate_jobs = 0;
  // A fatal NAK that put the QP in error still goes out (IBTA 9.9.3.1: the
  // requester learns why); an ACK, a sequence or an RNR NAK is moot now.
  if (resp.pending_rank() != 3) resp.ack_pending = false;
  if (qp->srq == nullptr && qp->type != IBV_QPT_XRC_RECV && qp->type != IBV_QPT_XRC_SEND) {
    RecvWqe r;
    while (qp->recv_ring.TryPopSingleConsumer([&r](const std::byte* w) { ReadRecvWqe(w, &r); })) {
      qp->recv_credits_used.fetch_sub(1, std::memory_order_release);
      CompleteRecv(qp, r, {.status = IBV_WC_WR_FLUSH_ERR});
    }
  }
}

}  // namespace uroce::transport
