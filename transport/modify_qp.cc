// ModifyQp and QueryQp: the QP state machine's transitions (qp_state.h
// validates them, IBTA 10.3 / 11.2.5) applied to a QP between two polls.
//
// Control path (any thread).
#include <algorithm>
#include <cstring>
#include <string>

#include "congestion/algorithms.h"
#include "transport/device.h"

namespace uroce::transport {

Status Device::ModifyQp(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn) {
  return ModifyQpAs(qp, attr, mask, expected_qpn, /*fatal=*/false);
}

Status Device::FailQp(QueuePair* qp, uint32_t expected_qpn) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ModifyQpAs(qp, attr, IBV_QP_STATE, expected_qpn, /*fatal=*/true);
}

Status Device::ModifyQpAs(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn, bool fatal) {
  if (mask & IBV_QP_AV) UROCE_RETURN_IF_ERROR(ResolveNeighborIfMissing(attr.ah_attr, "ibv_modify_qp"));
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!OwnsQpLocked(qp) || (expected_qpn != kAnyQpn && qp->qpn != expected_qpn)) return InvalidArgument("no such QP");
  ProgressToken token(core_);
  const ibv_qp_state current = qp->state.load(std::memory_order_relaxed);
  auto next = ValidateQpModify(qp->type, current, attr, mask, core_.limits);
  if (!next.ok()) return next.status();

  PathInfo path = qp->path;
  if (mask & IBV_QP_AV) {
    std::string why;
    if (!ResolvePath(attr.ah_attr, &path, &why)) return InvalidArgument("ibv_modify_qp: " + why);
  }
  // Apply (IBTA 11.2.5.2): copy the given attributes.
  ibv_qp_attr& a = qp->attr;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) a.port_num = attr.port_num;
  if (mask & IBV_QP_QKEY) a.qkey = attr.qkey;
  if (mask & IBV_QP_AV) {
    a.ah_attr = attr.ah_attr;
    path.udp_source_port = qp->path.udp_source_port;
    qp->path = path;
  }
  if (mask & IBV_QP_PATH_MTU) {
    a.path_mtu = attr.path_mtu;
    qp->mtu_bytes = MtuBytes(attr.path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) {
    a.retry_cnt = attr.retry_cnt;
    qp->req.retries_left = attr.retry_cnt;
  }
  if (mask & IBV_QP_RNR_RETRY) {
    a.rnr_retry = attr.rnr_retry;
    qp->req.rnr_retries_left = attr.rnr_retry;
  }
  if (mask & IBV_QP_RQ_PSN) {
    a.rq_psn = attr.rq_psn;
    qp->resp.expected_psn = Psn(attr.rq_psn);
    qp->resp.ack_psn = Psn(attr.rq_psn) - 1;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN) {
    a.sq_psn = attr.sq_psn;
    qp->req.psn = Psn(attr.sq_psn);
    qp->req.unacked = Psn(attr.sq_psn);
    qp->req.sent_limit = Psn(attr.sq_psn);
    qp->req.sent_high = Psn(attr.sq_psn);
    qp->req.read_ahead.reset();  // nothing placed for the new sequence
    qp->req.read_ahead_from = Psn(attr.sq_psn);
    qp->req.executed_known = false;
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  }
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) a.en_sqd_async_notify = attr.en_sqd_async_notify;

  const ibv_qp_state target = *next;
  if (target == IBV_QPS_RTR && current == IBV_QPS_INIT) {
    qp->resp.reads.assign(2 * std::max<uint32_t>(a.max_dest_rd_atomic, 1), ReadResponseJob{});
    qp->resp.read_history.assign(2 * std::max<uint32_t>(a.max_dest_rd_atomic, 1), ReadRecord{});
    qp->resp.read_history_next = 0;
    qp->resp.reads_head = qp->resp.reads_count = qp->resp.duplicate_jobs = 0;
    // The requester's congestion control, chosen by the QP's service level
    // now that its path and MTU are known (docs/congestion.md).
    if (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_SEND) {
      const CongestionConfig& cc = core_.config.congestion;
      congestion::CongestionParams params = cc.params;
      params.mtu_bytes = qp->mtu_bytes;
      params.max_window_packets = core_.config.max_unacked_packets;
      qp->cc = congestion::MakeCongestionControl(cc.AlgorithmFor(a.ah_attr.sl), params);
      qp->pacer = congestion::Pacer{};
    }
  }
  // An algorithm that reads ECN has its QP's packets leave ECN-capable,
  // ECT(0) (RFC 3168 section 5; RoCEv2 annex A17.9.1); the DSCP stays the
  // application's.
  if (qp->cc != nullptr && qp->cc->ecn_capable()) {
    qp->path.traffic_class = static_cast<uint8_t>((qp->path.traffic_class & ~kEcnMask) | kEcnEct0);
  }
  if (target == IBV_QPS_RESET) {
    // Back to a clean QP (IBTA 10.3.1.1): queues emptied without completions.
    // The window's requests hold their send queue slots: free
    // them, then drain what was never taken.
    for (uint64_t p = qp->req.head; p != qp->req.tail; ++p) qp->send_ring.Release(p);
    while (qp->send_ring.TryPopSingleConsumer([](const std::byte*) {})) {}
    while (qp->recv_ring.TryPopSingleConsumer([](const std::byte*) {})) {}
    qp->req.staged.ReleaseAll(core_.config.peer_memory);
    qp->req = RequesterState{};
    qp->cc.reset();
    qp->next_cnp_ns = 0;
    qp->ResetWindow();  // at the send queue's position
    core_.ReleaseHeldPackets(qp);
    auto atomics = std::move(qp->resp.atomics);
    qp->resp.read_staged.ReleaseAll(core_.config.peer_memory);
    qp->resp = ResponderState{};
    qp->resp.atomics = std::move(atomics);
    std::fill(qp->resp.atomics.begin(), qp->resp.atomics.end(), AtomicReplay{});
    qp->send_credits_used.store(0, std::memory_order_release);
    qp->recv_credits_used.store(0, std::memory_order_release);
    qp->flush_pending = qp->flush_fatal = false;  // nothing left to flush
    // Completions of the QP's past life still waiting in its CQs go too, as
    // rdma-core's mlx5 provider cleans the CQs at reset (mlx5_cq_clean): a QP
    // brought back from ERR does not hand its next poller the flush errors
    // of before (rdma-core's tests restate QPs this way, then expect success).
    if (qp->send_cq != nullptr) qp->send_cq->RemoveCompletionsOf(qp->qpn);
    if (qp->recv_cq != nullptr && qp->recv_cq != qp->send_cq) qp->recv_cq->RemoveCompletionsOf(qp->qpn);
  }
  qp->state.store(target, std::memory_order_release);
  if (target == IBV_QPS_ERR && current != IBV_QPS_ERR) {
    qp->flush_pending = true;
    // A consumer that moves its QP to ERR asked for it: no affiliated
    // asynchronous error (ibv_get_async_event(3): IBV_EVENT_QP_FATAL is an
    // error the device detected; with one, UCX logs "local work queue
    // catastrophic error" at every teardown). FailQp's callers did not ask.
    qp->flush_fatal = fatal;
  }
  core_.MarkBusy(qp);  // the next poll looks at it in its new state (we hold the token)
  return Status::Ok();
}

Status Device::QueryQp(QueuePair* qp, ibv_qp_attr* attr, ibv_qp_init_attr* init) const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!OwnsQpLocked(qp)) return InvalidArgument("no such QP");
  ProgressToken token(core_);
  if (attr) {
    *attr = qp->attr;
    attr->qp_state = qp->state.load(std::memory_order_acquire);
    attr->cur_qp_state = attr->qp_state;
    attr->path_mtu = qp->attr.path_mtu;
    attr->cap.max_send_wr = qp->caps.max_send_wr;
    attr->cap.max_recv_wr = qp->caps.max_recv_wr;
    attr->cap.max_send_sge = qp->caps.max_send_sge;
    attr->cap.max_recv_sge = qp->caps.max_recv_sge;
    attr->cap.max_inline_data = qp->caps.max_inline_data;
    attr->sq_draining = 0;
  }
  if (init) {
    std::memset(init, 0, sizeof(*init));
    init->qp_type = qp->type;
    init->sq_sig_all = qp->sq_sig_all;
    init->cap = attr ? attr->cap : ibv_qp_cap{qp->caps.max_send_wr, qp->caps.max_recv_wr, qp->caps.max_send_sge,
                                              qp->caps.max_recv_sge, qp->caps.max_inline_data};
  }
  return Status::Ok();
}

}  // namespace uroce::transport
