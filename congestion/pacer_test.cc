#include "congestion/pacer.h"

#include <gtest/gtest.h>

namespace uroce::congestion {
namespace {

TEST(PacerTest, PacketsLeaveAtTheRate) {
  Pacer pacer;
  // 1000 bytes at 8000 Mbit/s: one packet per microsecond.
  uint64_t now = 1'000'000;
  uint32_t sent = 0;
  for (; now < 1'100'000; now += 100) {
    if (!pacer.Ready(now)) continue;
    pacer.Spend(now, 1000, 8000);
    ++sent;
  }
  // 100 us at one per us, plus the one burst a fresh sender may catch up.
  EXPECT_GE(sent, 100u);
  EXPECT_LE(sent, 100u + static_cast<uint32_t>(Pacer::kBurstNs / 1000) + 1);
}

TEST(PacerTest, AnIdleSenderCatchesUpOneBurstOnly) {
  Pacer pacer;
  pacer.Spend(0, 1000, 8000);
  // A millisecond idle, then as fast as it may: the packet due now and one
  // burst's worth before it, no more.
  const uint64_t now = 1'000'000;
  uint32_t burst = 0;
  while (pacer.Ready(now)) {
    pacer.Spend(now, 1000, 8000);
    ++burst;
  }
  EXPECT_EQ(burst, static_cast<uint32_t>(Pacer::kBurstNs / 1000) + 1);
}

}  // namespace
}  // namespace uroce::congestion
