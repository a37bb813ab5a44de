// The far end of an RC connection that a test or fuzz target plays by hand:
// it builds the peer's frames itself and reads what the engine sends (on a
// ScriptedPort, scripted_port.h, or a port of its own).
// ConnectToScriptedPeer takes a local QP through INIT, RTR and RTS (IBTA
// 10.3.1, the QP state machine) to that peer. Not for production code: the
// settings are a test's.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "common/status.h"
#include "transport/engine.h"

namespace uroce::transport {

struct ScriptedPeer {
  Gid gid{};
  uint32_t qpn = 0;
  uint32_t rq_psn = 0;  // the first PSN the peer sends (our expected PSN)
  uint32_t sq_psn = 0;  // our first PSN
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint8_t min_rnr_timer = 12;
  uint8_t timeout = 10;  // local ACK timeout, 4.096 us * 2^timeout
  uint8_t retry_cnt = 2;
  uint8_t rnr_retry = 1;
};

// 4 READs and atomics outstanding each way; `access` for the remote side's
// requests.
inline Status ConnectToScriptedPeer(Engine& engine, QueuePair* qp, const ScriptedPeer& peer, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = static_cast<unsigned>(access);
  Status s = engine.ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (!s.ok()) return s;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = peer.path_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.rq_psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = peer.min_rnr_timer;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
  s = engine.ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (!s.ok()) return s;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = peer.sq_psn;
  a.timeout = peer.timeout;
  a.retry_cnt = peer.retry_cnt;
  a.rnr_retry = peer.rnr_retry;
  a.max_rd_atomic = 4;
  return engine.ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

}  // namespace uroce::transport
