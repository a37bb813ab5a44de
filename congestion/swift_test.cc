#include "congestion/swift.h"

#include <gtest/gtest.h>

namespace uroce::congestion {
namespace {

CongestionParams Params() {
  CongestionParams p;
  p.max_window_packets = 128;
  p.target_delay_ns = 50'000;
  p.mtu_bytes = 4096;
  p.min_rate_mbps = 10;
  return p;
}

TEST(SwiftTest, StartsAtTheQpWindowAndStaysThereBelowTheTarget) {
  Swift cc(Params());
  EXPECT_FALSE(cc.ecn_capable());
  EXPECT_EQ(cc.allowance().window_packets, 128u);
  for (uint64_t t = 0; t < 1'000'000; t += 10'000) cc.OnAcked(t, 64, 20'000);
  EXPECT_EQ(cc.allowance().window_packets, 128u);
  EXPECT_EQ(cc.allowance().rate_mbps, 0u);
}

TEST(SwiftTest, ADelayAboveTheTargetCutsOncePerRoundTrip) {
  Swift cc(Params());
  cc.OnAcked(1'000'000, 64, 100'000);  // twice the target: cut by beta / 2
  EXPECT_NEAR(cc.window(), 128 * (1 - 0.8 * 0.5), 1e-9);
  const double once = cc.window();
  cc.OnAcked(1'010'000, 64, 100'000);  // within the same round trip: no cut
  EXPECT_DOUBLE_EQ(cc.window(), once);
  cc.OnAcked(1'100'000, 64, 100'000);  // a round trip later
  EXPECT_LT(cc.window(), once);
}

TEST(SwiftTest, TheDeepestCutIsMaxDecrease) {
  Swift cc(Params());
  cc.OnAcked(1'000'000, 1, 10'000'000);  // 200 times the target
  EXPECT_NEAR(cc.window(), 64, 1e-9);
}

TEST(SwiftTest, TheWindowGrowsBackBelowTheTarget) {
  Swift cc(Params());
  cc.OnAcked(1'000'000, 1, 10'000'000);
  cc.OnLoss(20'000'000);
  const double low = cc.window();
  uint64_t t = 30'000'000;
  for (int i = 0; i < 100; ++i) cc.OnAcked(t += 20'000, 16, 20'000);
  EXPECT_GT(cc.window(), low);
}

TEST(SwiftTest, ForgedDelaysSlowItToAPaceNeverToAStop) {
  Swift cc(Params());
  uint64_t t = 0;
  for (int i = 0; i < 10'000; ++i) cc.OnAcked(t += 1'000'000, 1, 900'000);
  EXPECT_EQ(cc.allowance().window_packets, 1u);
  EXPECT_GE(cc.allowance().rate_mbps, 10u);  // below one packet: paced, at least the floor
  for (int i = 0; i < 10'000; ++i) cc.OnLoss(t += 1'000'000);
  EXPECT_EQ(cc.allowance().window_packets, 1u);
  EXPECT_GE(cc.allowance().rate_mbps, 10u);
}

}  // namespace
}  // namespace uroce::congestion
