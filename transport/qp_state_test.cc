#include "transport/qp_state.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

ibv_qp_attr Attr(ibv_qp_state to) {
  ibv_qp_attr a{};
  a.qp_state = to;
  a.port_num = 1;
  a.path_mtu = IBV_MTU_1024;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  return a;
}

constexpr int kRcInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRcRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRcRts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC;

TEST(QpStateTest, RcWalksResetInitRtrRts) {
  QpLimits limits;
  auto s = ValidateQpModify(IBV_QPT_RC, IBV_QPS_RESET, Attr(IBV_QPS_INIT), kRcInit, limits);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, IBV_QPS_INIT);
  s = ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, Attr(IBV_QPS_RTR), kRcRtr, limits);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  s = ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, Attr(IBV_QPS_RTS), kRcRts, limits);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, IBV_QPS_RTS);
}

TEST(QpStateTest, UdNeedsQkeyNotAccessFlags) {
  QpLimits limits;
  const int ud_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
  EXPECT_TRUE(ValidateQpModify(IBV_QPT_UD, IBV_QPS_RESET, Attr(IBV_QPS_INIT), ud_init, limits).ok());
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_UD, IBV_QPS_RESET, Attr(IBV_QPS_INIT), kRcInit, limits).ok());
  EXPECT_TRUE(ValidateQpModify(IBV_QPT_UD, IBV_QPS_INIT, Attr(IBV_QPS_RTR), IBV_QP_STATE, limits).ok());
  EXPECT_TRUE(
      ValidateQpModify(IBV_QPT_UD, IBV_QPS_RTR, Attr(IBV_QPS_RTS), IBV_QP_STATE | IBV_QP_SQ_PSN, limits).ok());
}

TEST(QpStateTest, SkippingAStateIsEinval) {
  QpLimits limits;
  auto s = ValidateQpModify(IBV_QPT_RC, IBV_QPS_RESET, Attr(IBV_QPS_RTS), kRcRts, limits);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().ToErrno(), EINVAL);
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, Attr(IBV_QPS_RTS), kRcRts, limits).ok());
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_ERR, Attr(IBV_QPS_RTS), kRcRts, limits).ok());
}

TEST(QpStateTest, MissingRequiredAttributeIsEinval) {
  QpLimits limits;
  auto s = ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, Attr(IBV_QPS_RTR), kRcRtr & ~IBV_QP_DEST_QPN, limits);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().ToErrno(), EINVAL);
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, Attr(IBV_QPS_RTR), kRcRtr & ~IBV_QP_STATE, limits).ok());
}

TEST(QpStateTest, ExtraAttributeIsEinval) {
  QpLimits limits;
  // SQ_PSN belongs to RTR -> RTS, not INIT -> RTR.
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, Attr(IBV_QPS_RTR), kRcRtr | IBV_QP_SQ_PSN, limits).ok());
}

TEST(QpStateTest, AnyStateToResetOrErr) {
  QpLimits limits;
  for (ibv_qp_state from : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR}) {
    EXPECT_TRUE(ValidateQpModify(IBV_QPT_RC, from, Attr(IBV_QPS_ERR), IBV_QP_STATE, limits).ok());
    EXPECT_TRUE(ValidateQpModify(IBV_QPT_RC, from, Attr(IBV_QPS_RESET), IBV_QP_STATE, limits).ok());
  }
}

TEST(QpStateTest, ValuesOutOfRangeAreEinval) {
  QpLimits limits;
  ibv_qp_attr a = Attr(IBV_QPS_RTS);
  a.retry_cnt = 8;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, a, kRcRts, limits).ok());
  a = Attr(IBV_QPS_RTS);
  a.sq_psn = 1u << 24;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, a, kRcRts, limits).ok());
  a = Attr(IBV_QPS_RTS);
  a.max_rd_atomic = 17;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, a, kRcRts, limits).ok());
  a = Attr(IBV_QPS_RTR);
  a.path_mtu = static_cast<ibv_mtu>(6);
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, a, kRcRtr, limits).ok());
  a = Attr(IBV_QPS_RTR);
  a.ah_attr.is_global = 0;  // RoCE needs a GRH
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_INIT, a, kRcRtr, limits).ok());
  a = Attr(IBV_QPS_INIT);
  a.port_num = 2;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RESET, a, kRcInit, limits).ok());
}

TEST(QpStateTest, CurStateMustMatch) {
  QpLimits limits;
  ibv_qp_attr a = Attr(IBV_QPS_RTS);
  a.cur_qp_state = IBV_QPS_INIT;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, a, kRcRts | IBV_QP_CUR_STATE, limits).ok());
  a.cur_qp_state = IBV_QPS_RTR;
  EXPECT_TRUE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_RTR, a, kRcRts | IBV_QP_CUR_STATE, limits).ok());
}

TEST(QpStateTest, SqeOnlyForUnreliable) {
  QpLimits limits;
  EXPECT_FALSE(ValidateQpModify(IBV_QPT_RC, IBV_QPS_SQE, Attr(IBV_QPS_RTS), IBV_QP_STATE, limits).ok());
  EXPECT_TRUE(ValidateQpModify(IBV_QPT_UD, IBV_QPS_SQE, Attr(IBV_QPS_RTS), IBV_QP_STATE, limits).ok());
}

TEST(QpStateTest, MtuBytes) {
  EXPECT_EQ(MtuBytes(IBV_MTU_256), 256u);
  EXPECT_EQ(MtuBytes(IBV_MTU_4096), 4096u);
  EXPECT_EQ(MtuBytes(static_cast<ibv_mtu>(0)), 0u);
}

}  // namespace
}  // namespace uroce::transport
