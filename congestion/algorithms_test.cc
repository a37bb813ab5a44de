#include "congestion/algorithms.h"

#include <gtest/gtest.h>

namespace uroce::congestion {
namespace {

TEST(AlgorithmsTest, NamesMakeTheirAlgorithms) {
  EXPECT_TRUE(IsKnownAlgorithm("none"));
  EXPECT_TRUE(IsKnownAlgorithm("dcqcn"));
  EXPECT_TRUE(IsKnownAlgorithm("swift"));
  EXPECT_FALSE(IsKnownAlgorithm("cubic"));
  EXPECT_TRUE(IsKnownAlgorithm("fixed_rate"));
  EXPECT_EQ(KnownAlgorithms(), "none, dcqcn, swift, fixed_rate");
  EXPECT_EQ(MakeCongestionControl("none", {}), nullptr);
  EXPECT_EQ(MakeCongestionControl("cubic", {}), nullptr);
  EXPECT_STREQ(MakeCongestionControl("dcqcn", {})->name(), "dcqcn");
  EXPECT_STREQ(MakeCongestionControl("swift", {})->name(), "swift");
  CongestionParams slow;
  slow.min_rate_mbps = 250;
  const auto fixed = MakeCongestionControl("fixed_rate", slow);
  EXPECT_STREQ(fixed->name(), "fixed_rate");
  EXPECT_EQ(fixed->allowance().rate_mbps, 250u);
  EXPECT_EQ(fixed->allowance().window_packets, 0u);
}

}  // namespace
}  // namespace uroce::congestion
