#include "congestion/dcqcn.h"

#include <gtest/gtest.h>

namespace uroce::congestion {
namespace {

CongestionParams Params() {
  CongestionParams p;
  p.line_rate_mbps = 10'000;
  p.min_rate_mbps = 10;
  return p;
}

TEST(DcqcnTest, StartsAtTheLineRateUnpacedAndEcnCapable) {
  Dcqcn cc(Params());
  EXPECT_TRUE(cc.ecn_capable());
  EXPECT_EQ(cc.allowance().rate_mbps, 0u);
  EXPECT_EQ(cc.allowance().window_packets, 0u);
  // Sending without notifications changes nothing.
  for (uint64_t t = 0; t < 10'000'000; t += 1000) cc.OnSent(t, 4096);
  EXPECT_EQ(cc.allowance().rate_mbps, 0u);
}

TEST(DcqcnTest, ACnpHalvesTheRateFirstThenCutsByAlpha) {
  Dcqcn cc(Params());
  cc.OnSent(1000, 1000);
  cc.OnCongestionNotified(2000);
  // alpha starts at 1: Rc = Rc (1 - 1/2).
  EXPECT_DOUBLE_EQ(cc.current_rate_mbps(), 5000);
  EXPECT_DOUBLE_EQ(cc.target_rate_mbps(), 10'000);
  EXPECT_EQ(cc.allowance().rate_mbps, 5000u);
  const double alpha = cc.alpha();
  EXPECT_NEAR(alpha, 1.0, 1e-12);  // (1 - g) 1 + g
  cc.OnCongestionNotified(3000);
  EXPECT_NEAR(cc.current_rate_mbps(), 5000 * (1 - alpha / 2), 1e-9);
  EXPECT_DOUBLE_EQ(cc.target_rate_mbps(), 5000);
}

TEST(DcqcnTest, TheRateRecoversToTheLineRateWithoutNotifications) {
  Dcqcn cc(Params());
  cc.OnSent(0, 1000);
  for (int i = 0; i < 5; ++i) cc.OnCongestionNotified(1000 + i);
  const double cut = cc.current_rate_mbps();
  ASSERT_LT(cut, 1000);
  // Fast recovery: five timer periods halve the distance to the target five
  // times.
  cc.OnSent(1004 + 5 * 55'000, 1000);
  EXPECT_GT(cc.current_rate_mbps(), cut);
  const double target = cc.target_rate_mbps();
  EXPECT_NEAR(cc.current_rate_mbps(), target - (target - cut) / 32, 1e-6);
  // Then additive and hyper increase: back at the line rate, unpaced.
  uint64_t t = 1004 + 5 * 55'000;
  for (int i = 0; i < 20'000 && cc.allowance().rate_mbps != 0; ++i) {
    t += 10'000;
    cc.OnSent(t, 4096);
  }
  EXPECT_EQ(cc.allowance().rate_mbps, 0u) << cc.current_rate_mbps();
  EXPECT_LT(t, 1'000'000'000u);
}

TEST(DcqcnTest, AlphaDecaysWhileNoCnpComes) {
  Dcqcn cc(Params());
  cc.OnSent(0, 1000);
  cc.OnCongestionNotified(1);
  const double before = cc.alpha();
  cc.OnAcked(1 + 10 * 55'000, 1, 0);
  EXPECT_LT(cc.alpha(), before);
}

TEST(DcqcnTest, AFloodOfNotificationsStopsAtTheFloor) {
  Dcqcn cc(Params());
  for (uint64_t t = 0; t < 1'000'000; ++t) cc.OnCongestionNotified(t);
  EXPECT_EQ(cc.allowance().rate_mbps, 10u);
  EXPECT_GE(cc.current_rate_mbps(), 10);
}

}  // namespace
}  // namespace uroce::congestion
