#include "common/check.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

TEST(CheckTest, AHoldingConditionPasses) {
  int evaluated = 0;
  UROCE_DCHECK(++evaluated == 1);
  // Evaluated exactly once where checks are on, never where they are off.
  EXPECT_EQ(evaluated, kDchecksEnabled ? 1 : 0);
}

TEST(CheckDeathTest, AFailedConditionAbortsWithItsTextWhereChecksAreOn) {
  if (!kDchecksEnabled) GTEST_SKIP() << "built without UROCE_DCHECKS";
  const int queue_depth = 3;
  EXPECT_DEATH(UROCE_DCHECK(queue_depth == 4), "UROCE_DCHECK\\(queue_depth == 4\\) failed");
}

}  // namespace
}  // namespace uroce
