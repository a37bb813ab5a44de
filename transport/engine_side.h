// One side of a connection between engines, and the QPs that join two sides:
// what a test, `uroce demo` or the pmd runtime holds on one side (an engine, a
// PD, a CQ, its addresses), and ConnectQueuePairs, which takes an RC or UC QP on
// each side to RTS aimed at the other. Production code (runtime/runtime.h,
// tools/demo.cc) uses these, so they live here, not in the test harness
// (testing/engine_pair.h), which builds on them.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <utility>

#include "common/status.h"
#include "transport/engine.h"

namespace uroce::transport {

// One side: an engine and the objects a test needs on it.
struct EngineSide {
  std::unique_ptr<Engine> engine;
  PdHandle pd = 0;
  CompletionQueue* cq = nullptr;
  Gid gid{};   // 10.0.0.host, IPv4-mapped: GID index 0
  Gid gid6{};  // fd00::host: GID index 1
  MacAddress mac{};
};

struct RcConnectOptions {
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t psn_a = 0x100, psn_b = 0x200;
  uint8_t timeout = 10;  // ~4 ms of virtual time
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16;
  unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC;
  uint32_t max_send_wr = 256, max_recv_wr = 256;
  uint32_t max_send_sge = 4, max_recv_sge = 4, max_inline_data = 128;
  ibv_qp_type type = IBV_QPT_RC;
  SharedReceiveQueue* srq_a = nullptr;
  SharedReceiveQueue* srq_b = nullptr;
  // type IBV_QPT_XRC_SEND: a is the XRC initiator, b an XRC target QP in
  // this XRC domain of b's engine (Engine::CreateXrcd).
  uint32_t xrcd_b = 0;
  // b stops at RTR (a passive responder, as perftest's READ/atomic servers).
  bool b_stays_in_rtr = false;
  // Both QPs' service level (ibv_ah_attr.sl), which may choose their
  // congestion control (CongestionConfig::algorithm_by_sl).
  uint8_t sl = 0;
};

// Creates an RC (or UC, or XRC initiator and target) QP on each side and moves both to RTS, each
// aimed at the other. Works for any two engines that can reach each other.
StatusOr<std::pair<QueuePair*, QueuePair*>> ConnectQueuePairs(EngineSide& a, EngineSide& b,
                                                              const RcConnectOptions& options);

}  // namespace uroce::transport
