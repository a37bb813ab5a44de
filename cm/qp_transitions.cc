// The caller's QP moved as the connection manager's protocol decides
// (cm/connection_manager_impl.h): INIT, RTR and RTS from the REQ/REP
// exchange (IBTA 12.9.7), ERR when a connection ends.
#include "cm/connection_manager_impl.h"

namespace uroce::cm {

Status ConnectionManager::Impl::ToInit(QueuePair* qp, int access_flags) {
  // A QP its owner moved to INIT already (to post receives before the
  // connection is up, as libfabric endpoints do) keeps its attributes.
  if (qp->state.load(std::memory_order_acquire) == IBV_QPS_INIT) return Status::Ok();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.pkey_index = 0;
  attr.qp_access_flags = static_cast<unsigned>(access_flags);
  return engine->ModifyQp(qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// IBTA 12.9.7 (and 11.2.5.2's RTR / RTS attributes): the path from the CM
// messages, the PSNs, the read/atomic depths both sides agreed.
Status ConnectionManager::Impl::ToRtrRts(const Connection& c, uint32_t rq_psn, uint32_t sq_psn,
                                         uint8_t max_dest_rd_atomic, uint8_t max_rd_atomic, uint8_t retry_count,
                                         uint8_t rnr_retry) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = c.mtu;
  attr.dest_qp_num = c.remote_qpn;
  attr.rq_psn = rq_psn;
  attr.max_dest_rd_atomic = max_dest_rd_atomic;
  attr.min_rnr_timer = c.params.min_rnr_timer;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  const int sgid_index = GidIndex(c.local.gid);
  if (sgid_index < 0) return Internal("connection's local GID left the engine's table");
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
  attr.ah_attr.grh.hop_limit = 64;
  std::memcpy(attr.ah_attr.grh.dgid.raw, c.peer.gid.data(), 16);
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(c.qp, attr,
                                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                                         c.qpn));
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn;
  attr.timeout = c.params.local_ack_timeout;
  attr.retry_cnt = retry_count;
  attr.rnr_retry = rnr_retry;
  attr.max_rd_atomic = max_rd_atomic;
  return engine->ModifyQp(c.qp, attr,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC,
                          c.qpn);
}

void ConnectionManager::Impl::ToError(Connection& c) {
  if (c.qp == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  // The engine flushes the QP's outstanding work (IBTA 10.3.1.8); a QP the
  // caller destroyed already is refused, untouched.
  (void)engine->ModifyQp(c.qp, attr, IBV_QP_STATE, c.qpn);
}

}  // namespace uroce::cm
