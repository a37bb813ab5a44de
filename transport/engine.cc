// Engine: construction, posting and the poll loop. The control calls are
// Device's (device.cc, modify_qp.cc); the pipeline stages
// are classes of their own: Transmitter (transmitter.cc), Requester
// (requester.cc), Completer (completer.cc), Responder (responder.cc),
// Receiver (receiver.cc), sharing an EngineCore (engine_core.h) and
// Completions (completions.cc).
#include "transport/engine.h"

#include <rte_cycles.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/raw_enum.h"
#include "transport/opcode.h"
#include "transport/work_queue.h"

namespace uroce::transport {

Engine::Engine(const EngineConfig& config)
    : core_(config),
      doorbells_(2 * size_t{config.max_qps}),
      completions_(core_),
      tx_(core_),
      responder_(core_, tx_, completions_),
      device_(core_, responder_, doorbells_),
      requester_(core_, tx_, completions_, device_.address_handles()),
      completer_(core_, completions_, requester_),
      rx_(core_, tx_, responder_, completer_) {}

Engine::~Engine() {
  ProgressToken token(core_);
  tx_.FreeAll();
}

// ---------------------------------------------------------------- queries

bool Engine::UdSourceMac(const QueuePair* qp, uint64_t wr_id, MacAddress* mac) const {
  if (qp->ud_sources.empty()) return false;
  const QueuePair::UdSource& source = qp->ud_sources[wr_id % qp->ud_sources.size()];
  if (source.wr_id != wr_id) return false;
  *mac = source.mac;
  return true;
}

EngineCounters Engine::counters() const {
  ProgressToken token(core_);
  return core_.counters;
}

// ---------------------------------------------------------------- posting
//
// A send request is posted in three steps, as a NIC's post routine does
// (rxe's post_one_send): check the operation against the QP
// (CheckSendRequest), build the engine's copy of the request (BuildSendWqe;
// the libfabric endpoint builds its own and calls PostSendWqe), and publish
// that: its limits (CheckSendWqe), then the send queue (PushWithCredit) and
// the doorbell.

namespace {

// ibv_post_send(3): EINVAL for an operation this QP cannot take in its state
// and type. `opcode` is the field's integer (RawEnum): any value may come
// from a C caller. Nothing of the request's memory is read.
int CheckSendRequest(const QueuePair& qp, std::underlying_type_t<ibv_wr_opcode> opcode) {
  const ibv_qp_state state = qp.state.load(std::memory_order_acquire);
  // The QP must be able to send; in ERR the request is accepted and
  // completes with IBV_WC_WR_FLUSH_ERR.
  if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
  // An XRC target has no send queue (IBTA annex A14, XRC).
  if (qp.type == IBV_QPT_XRC_RECV) return EINVAL;
  const bool rc = IsReliable(qp.type);
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return 0;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return qp.type == IBV_QPT_UD ? EINVAL : 0;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      // Memory windows serve RDMA, which UD QPs do not take.
      return qp.type == IBV_QPT_UD ? EINVAL : 0;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return rc ? 0 : EINVAL;
    case IBV_WR_ATOMIC_WRITE:
      // IBTA 1.5 ATOMIC WRITE: RC only (the XRC opcode is not offered).
      return qp.type == IBV_QPT_RC ? 0 : EINVAL;
    default:
      return EINVAL;
  }
}

// A bind or a local invalidate: no data, no packet. The requester carries
// them out in order, on the engine thread (Requester::RunLocalOperation).
int BuildLocalOperation(const ibv_send_wr& wr, SendWqe* wqe) {
  if (wr.opcode == IBV_WR_BIND_MW) {
    // The window (by its rkey's index), the new rkey, the region, the range
    // and the access (ibv_bind_mw(3)).
    const ibv_mw* mw = wr.bind_mw.mw;
    const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
    if (mw == nullptr) return EINVAL;
    wqe->rkey = mw->rkey;
    wqe->remote_addr = info.addr;
    wqe->bind.new_rkey = wr.bind_mw.rkey;
    wqe->bind.mr_lkey = info.mr != nullptr ? info.mr->lkey : 0;
    wqe->bind.length = info.length;
    wqe->bind.access_flags = info.mw_access_flags;
  } else {
    wqe->invalidate_rkey = wr.invalidate_rkey;
  }
  wqe->num_sge = 0;
  wqe->total_length = 0;
  return 0;
}

// Concatenates the request's SGEs into `dest` (inline data: the bytes are
// taken now, so the application may reuse its buffers at once).
void CopyGatherList(const ibv_send_wr& wr, uint8_t* dest) {
  uint64_t off = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    std::memcpy(dest + off, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
    off += wr.sg_list[i].length;
  }
}

// A request that moves data: its gather list or inline bytes, and the
// fields of its opcode and of the QP's type.
int BuildDataRequest(const QueuePair& qp, const ibv_send_wr& wr, SendWqe* wqe) {
  uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
  wqe->total_length = total;
  const bool is_atomic = wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const bool atomic_write = wr.opcode == IBV_WR_ATOMIC_WRITE;
  // The bytes are copied now, so their size is checked before the copy;
  // every other limit is CheckSendWqe's.
  if (atomic_write && (wr.send_flags & IBV_SEND_INLINE)) {
    // Inline (ibv_wr_atomic_write(3) passes its 8 bytes so): the value is
    // taken now, whole, into the request's fixed part, where the QP's
    // max_inline_data does not limit it.
    if (total != 8) return EINVAL;
    CopyGatherList(wr, wqe->atomic_write_value);
    wqe->num_sge = 0;  // and no inline bytes in the slot's tail (WriteSendWqe)
  } else if (wr.send_flags & IBV_SEND_INLINE) {
    if (total > qp.caps.max_inline_data) return EINVAL;
    CopyGatherList(wr, wqe->inline_data);
    wqe->num_sge = 0;
  } else {
    wqe->num_sge = static_cast<uint32_t>(wr.num_sge);
    for (int i = 0; i < wr.num_sge; ++i) {
      wqe->sge[i] = Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    }
  }
  if (wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wqe->imm_data_be = wr.imm_data;
  }
  if (wr.opcode == IBV_WR_SEND_WITH_INV) wqe->invalidate_rkey = wr.invalidate_rkey;
  if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr.opcode == IBV_WR_RDMA_READ ||
      atomic_write) {
    wqe->remote_addr = wr.wr.rdma.remote_addr;
    wqe->rkey = wr.wr.rdma.rkey;
  }
  if (is_atomic) {
    wqe->remote_addr = wr.wr.atomic.remote_addr;
    wqe->rkey = wr.wr.atomic.rkey;
    wqe->atomic.compare_add = wr.wr.atomic.compare_add;
    wqe->atomic.swap = wr.wr.atomic.swap;
  }
  if (qp.type == IBV_QPT_XRC_SEND) {
    // The XRCETH of every packet names this SRQ of the target's domain.
    wqe->remote_qpn = wr.qp_type.xrc.remote_srqn & 0xFFFFFF;
  }
  if (qp.type == IBV_QPT_UD) {
    if (wr.wr.ud.ah == nullptr) return EINVAL;
    // The AH handle travels in the ibv_ah's handle field (set by the API).
    wqe->ah_handle = wr.wr.ud.ah->handle;
    wqe->remote_qpn = wr.wr.ud.remote_qpn & 0xFFFFFF;
    wqe->remote_qkey = wr.wr.ud.remote_qkey;
  }
  return 0;
}

// The engine's copy of a request that CheckSendRequest accepted, or EINVAL.
int BuildSendWqe(const QueuePair& qp, const ibv_send_wr& wr, SendWqe* wqe) {
  const bool local_op = wr.opcode == IBV_WR_BIND_MW || wr.opcode == IBV_WR_LOCAL_INV;
  // Local operations move no data: their SGEs are not looked at.
  const int num_sge = local_op ? 0 : wr.num_sge;
  if (num_sge < 0 || static_cast<uint32_t>(num_sge) > qp.caps.max_send_sge) return EINVAL;
  if (num_sge > 0 && wr.sg_list == nullptr) return EINVAL;
  wqe->wr_id = wr.wr_id;
  wqe->opcode = wr.opcode;
  wqe->send_flags = wr.send_flags;
  return local_op ? BuildLocalOperation(wr, wqe) : BuildDataRequest(qp, wr, wqe);
}

// The limits of a built request, whoever built it (BuildSendWqe from an
// ibv_send_wr, or the libfabric endpoint from its iovecs), or EINVAL.
int CheckSendWqe(const QueuePair& qp, const SendWqe& wqe) {
  if (wqe.opcode == IBV_WR_BIND_MW || wqe.opcode == IBV_WR_LOCAL_INV) return wqe.num_sge == 0 ? 0 : EINVAL;
  if (wqe.num_sge > qp.caps.max_send_sge) return EINVAL;
  if (wqe.num_sge != 0) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < wqe.num_sge; ++i) total += wqe.sge[i].length;
    if (total != wqe.total_length) return EINVAL;
  }
  if (wqe.total_length > (1ull << 31)) return EINVAL;  // max_msg_sz
  const bool is_atomic = wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wqe.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  // An ATOMIC WRITE sends exactly 8 bytes (IBTA 1.5, 9.4.7); inline, they
  // sit in the request's fixed part.
  if (wqe.opcode == IBV_WR_ATOMIC_WRITE) return wqe.total_length == 8 ? 0 : EINVAL;
  if (wqe.num_sge == 0 && wqe.total_length != 0) {
    // Inline bytes: only what sends data from here.
    if (is_atomic || wqe.opcode == IBV_WR_RDMA_READ) return EINVAL;
    if (wqe.total_length > qp.caps.max_inline_data) return EINVAL;
  }
  // IBTA 9.4.5: an atomic operates on 8 bytes; the local buffer takes the
  // original value.
  if (is_atomic && (wqe.num_sge != 1 || wqe.sge[0].length != 8)) return EINVAL;
  if (qp.type == IBV_QPT_UD && wqe.total_length > qp.mtu_bytes) return EINVAL;  // one packet per UD message
  return 0;
}

}  // namespace

int Engine::PostSend(QueuePair* qp, const ibv_send_wr* wr, const ibv_send_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (const int error = CheckSendRequest(*qp, RawEnum(wr->opcode)); error != 0) return error;
    SendWqe wqe;
    if (const int error = BuildSendWqe(*qp, *wr, &wqe); error != 0) return error;
    if (const int error = PublishSendWqe(qp, &wqe); error != 0) return error;
  }
  *bad_wr = nullptr;
  return 0;
}

int Engine::PostSendWqe(QueuePair* qp, SendWqe* wqe) {
  if (const int error = CheckSendRequest(*qp, RawEnum(wqe->opcode)); error != 0) return error;
  return PublishSendWqe(qp, wqe);
}

int Engine::PublishSendWqe(QueuePair* qp, SendWqe* wqe) {
  if (const int error = CheckSendWqe(*qp, *wqe); error != 0) return error;
  if (qp->sq_sig_all) wqe->send_flags |= IBV_SEND_SIGNALED;
  if (!PushWithCredit(qp->send_credits_used, qp->caps.max_send_wr, qp->send_ring,
                      [wqe](std::byte* slot) { WriteSendWqe(*wqe, slot); })) {
    return ENOMEM;  // the send queue is full
  }
  RingDoorbell(qp);
  return 0;
}

void Engine::RingDoorbell(QueuePair* qp) {
  // seq_cst, against Retire's clear-then-look: either the engine sees our
  // request in the ring, or we see its clear and hand the QP over again.
  if (qp->doorbell.exchange(true, std::memory_order_seq_cst)) return;
  // Cannot fail: a QP is queued only when its doorbell goes from clear to
  // set, and it is cleared only by Retire, at most once per poll; every poll
  // first takes what is queued. So a QP has at most two entries (one queued
  // before its Retire in this poll, one after), and the ring holds 2 max_qps.
  (void)doorbells_.TryPush(qp);
}

void Engine::TakeDoorbells() { TakeRungDoorbells(doorbells_, core_); }

bool Engine::Retire(QueuePair* qp) {
  if (qp->flush_pending || qp->resp.reads_count != 0) return false;
  const RequesterState& r = qp->req;
  if (r.head != r.tail || r.rnr_resume_ns != 0) return false;
  const bool error = qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR;
  auto posted = [qp, error] {
    // In the error state new receives complete as flushed too (RunQp).
    return qp->send_ring.ApproxSize() != 0 || (error && qp->recv_ring.ApproxSize() != 0);
  };
  if (posted()) return false;
  // Both sides exchange (seq_cst): if a poster's exchange came first, ours
  // reads it and synchronizes with it, so its request is visible to the
  // look below; if ours came first, the poster reads false and queues it.
  (void)qp->doorbell.exchange(false, std::memory_order_seq_cst);
  if (posted()) {
    // A request came between the look and the clear: it stays, and so does
    // the doorbell (a poster that saw it clear queued the QP too; harmless).
    qp->doorbell.store(true, std::memory_order_relaxed);
    return false;
  }
  qp->busy = false;
  // Nothing in flight: its next request starts a new run (WatchLinkAcks).
  qp->req.link_ack_watched = false;
  return true;
}

namespace {

bool CopyRecv(const ibv_recv_wr* wr, uint32_t max_sge, RecvWqe* wqe) {
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge) return false;
  if (wr->num_sge > 0 && wr->sg_list == nullptr) return false;
  wqe->wr_id = wr->wr_id;
  wqe->num_sge = static_cast<uint32_t>(wr->num_sge);
  wqe->total_length = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    wqe->sge[i] = Sge{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    wqe->total_length += wr->sg_list[i].length;
  }
  return true;
}

}  // namespace

int Engine::PostRecv(QueuePair* qp, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (qp->srq != nullptr) return EINVAL;  // post to the SRQ instead
    // XRC QPs have no receive queue: a target's receives come from XRC SRQs.
    if (qp->type == IBV_QPT_XRC_SEND || qp->type == IBV_QPT_XRC_RECV) return EINVAL;
    if (qp->state.load(std::memory_order_acquire) == IBV_QPS_RESET) return EINVAL;
    RecvWqe wqe;
    if (!CopyRecv(wr, qp->caps.max_recv_sge, &wqe)) return EINVAL;
    if (!PushWithCredit(qp->recv_credits_used, qp->caps.max_recv_wr, qp->recv_ring,
                        [&wqe](std::byte* slot) { WriteRecvWqe(wqe, slot); })) {
      return ENOMEM;
    }
    // Only in the error state does a poll have to see a receive (to flush
    // it); otherwise the responder takes it when a message comes.
    if (qp->state.load(std::memory_order_acquire) == IBV_QPS_ERR) RingDoorbell(qp);
  }
  *bad_wr = nullptr;
  return 0;
}

int Engine::PostSrqRecv(SharedReceiveQueue* srq, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr) {
  // A resize (ResizeSrq) replaces the ring only while no poster is inside.
  SharedReceiveQueue::PostGate gate(*srq);
  const uint32_t max_wr = srq->max_wr.load(std::memory_order_relaxed);
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    RecvWqe wqe;
    if (!CopyRecv(wr, srq->max_sge, &wqe)) return EINVAL;
    if (!PushWithCredit(srq->posted, max_wr, srq->ring(), [&wqe](std::byte* slot) { WriteRecvWqe(wqe, slot); })) {
      return ENOMEM;
    }
  }
  *bad_wr = nullptr;
  return 0;
}

// ---------------------------------------------------------------- poll loop

unsigned Engine::Poll() {
  bool expected = false;
  if (!core_.progress_busy.compare_exchange_strong(expected, true, std::memory_order_acquire)) return 0;
  core_.RecordTokenOwner();
  core_.StartPoll(last_poll_moved_);
  const uint64_t before = core_.counters.rx_frames + core_.counters.tx_frames;

  tx_.BeginPoll();
  tx_.FlushTx();  // what a full queue left last time goes first
  rx_.ReceiveLoopback();
  completer_.SnapshotLinkAcks();
  rx_.ReceiveBurst();
  completer_.TakeLinkAcks();
  responder_.SendPendingAcks();
  TakeDoorbells();
  for (size_t i = 0; i < core_.busy_qps.size();) {
    QueuePair* qp = core_.busy_qps[i];
    RunQp(qp);
    if (Retire(qp)) {
      core_.busy_qps[i] = core_.busy_qps.back();
      core_.busy_qps.pop_back();
      continue;
    }
    ++i;
  }
  responder_.SendPendingAcks();
  tx_.StageRawFrames();
  tx_.FlushTx();
  for (CompletionQueue* cq : core_.forwarding_cqs) cq->ForwardToSinks();

  const unsigned moved = static_cast<unsigned>(core_.counters.rx_frames + core_.counters.tx_frames - before);
  last_poll_moved_ = moved != 0;
  core_.ClearTokenOwner();
  core_.progress_busy.store(false, std::memory_order_release);
  return moved;
}

void Engine::RunQp(QueuePair* qp) {
  if (qp->flush_pending) {
    qp->flush_pending = false;
    if (qp->flush_fatal) completions_.RaiseAsync(IBV_EVENT_QP_FATAL, qp->qpn, qp);
    qp->flush_fatal = false;
    completions_.FlushQueues(qp);
  }
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  if (state == IBV_QPS_ERR) {
    completions_.FlushQueues(qp);  // requests posted in ERR complete as flushed
    return;
  }
  // The responder works from RTR on (IBTA 10.3.1.2: a QP in RTR processes
  // incoming requests), and READ responses and atomic acknowledgements are
  // its answers: a passive side that never leaves RTR (perftest's
  // ib_read_bw and ib_atomic_bw servers) must still send them. Only the
  // requester and its timers wait for RTS.
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD) return;
  if (state != IBV_QPS_RTR) {
    completer_.RunTimers(qp);
    requester_.Run(qp);
  }
  responder_.RunReadResponses(qp);
}

}  // namespace uroce::transport
