#include "transport/engine_side.h"

#include <cstring>

namespace uroce::transport {

StatusOr<std::pair<QueuePair*, QueuePair*>> ConnectQueuePairs(EngineSide& a, EngineSide& b, const RcConnectOptions& o) {
  QueuePair* qps[2] = {nullptr, nullptr};
  EngineSide* sides[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    QpInitAttr init;
    init.type = o.type;
    init.pd = sides[i]->pd;
    init.send_cq = sides[i]->cq;
    init.recv_cq = sides[i]->cq;
    init.srq = i == 0 ? o.srq_a : o.srq_b;
    init.cap.max_send_wr = o.max_send_wr;
    init.cap.max_recv_wr = o.type == IBV_QPT_XRC_SEND ? 0 : o.max_recv_wr;
    if (o.type == IBV_QPT_XRC_SEND && i == 1) {
      init.type = IBV_QPT_XRC_RECV;
      init.pd = 0;
      init.send_cq = init.recv_cq = nullptr;
      init.srq = nullptr;
      init.xrcd = o.xrcd_b;
    }
    init.cap.max_send_sge = o.max_send_sge;
    init.cap.max_recv_sge = o.max_recv_sge;
    init.cap.max_inline_data = o.max_inline_data;
    auto qp = sides[i]->engine->CreateQp(init);
    if (!qp.ok()) return qp.status();
    qps[i] = *qp;
  }
  const bool rc = IsReliable(o.type);
  for (int i = 0; i < 2; ++i) {
    Engine& e = *sides[i]->engine;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = o.access;
    UROCE_RETURN_IF_ERROR(
        e.ModifyQp(qps[i], attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = o.mtu;
    attr.dest_qp_num = qps[1 - i]->qpn;
    attr.rq_psn = i == 0 ? o.psn_b : o.psn_a;
    attr.max_dest_rd_atomic = o.max_rd_atomic;
    attr.min_rnr_timer = o.min_rnr_timer;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.sl = o.sl;
    std::memcpy(attr.ah_attr.grh.dgid.raw, sides[1 - i]->gid.data(), 16);
    attr.ah_attr.grh.hop_limit = 64;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    UROCE_RETURN_IF_ERROR(e.ModifyQp(qps[i], attr, mask));
    if (i == 1 && o.b_stays_in_rtr) break;
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = i == 0 ? o.psn_a : o.psn_b;
    attr.timeout = o.timeout;
    attr.retry_cnt = o.retry_cnt;
    attr.rnr_retry = o.rnr_retry;
    attr.max_rd_atomic = o.max_rd_atomic;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    UROCE_RETURN_IF_ERROR(e.ModifyQp(qps[i], attr, mask));
  }
  return std::make_pair(qps[0], qps[1]);
}

}  // namespace uroce::transport
