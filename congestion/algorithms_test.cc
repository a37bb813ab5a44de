#include "congestion/algorithms.h"

#include <gtest/gtest.h>

namespace uroce::congestion {
namespace {

TEST(AlgorithmsTest, NamesMakeTheirAlgorithms) {
  EXPECT_TRUE(IsKnownAlgorithm("none"));
  EXPECT_TRUE(IsKnownAlgorithm("dcqcn"));
  EXPECT_TRUE(IsKnownAlgorithm("swift"));
  EXPECT_FALSE(IsKnownAlgorithm("cubic"));
  EXPECT_EQ(KnownAlgorithms(), "none, dcqcn, swift");
  EXPECT_EQ(MakeCongestionControl("none", {}), nullptr);
  EXPECT_EQ(MakeCongestionControl("cubic", {}), nullptr);
  EXPECT_STREQ(MakeCongestionControl("dcqcn", {})->name(), "dcqcn");
  EXPECT_STREQ(MakeCongestionControl("swift", {})->name(), "swift");
}

}  // namespace
}  // namespace uroce::congestion
