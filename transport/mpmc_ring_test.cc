#include "transport/mpmc_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace uroce::transport {
namespace {

TEST(MpmcRingTest, FifoUntilFullThenRefuses) {
  MpmcRing<int> ring(3);
  ASSERT_EQ(ring.capacity(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ring.TryPush(i));
  EXPECT_FALSE(ring.TryPush(99));
  int v = -1;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.TryPop(&v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(ring.TryPop(&v));
}

TEST(MpmcRingTest, WrapsAroundManyTimes) {
  MpmcRing<uint64_t> ring(8);
  uint64_t next_in = 0, next_out = 0, out[5];
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ring.TryPush(next_in++));
    ASSERT_EQ(ring.PopBurst(out, 5), 5u);
    for (uint64_t x : out) EXPECT_EQ(x, next_out++);
  }
}

// Several producers, one consumer: every value arrives exactly once and each
// producer's values arrive in its order. Run under --config=tsan too.
TEST(MpmcRingTest, ProducersAgainstOneConsumer) {
  constexpr int kProducers = 3, kPerProducer = 20000;
  MpmcRing<uint64_t> ring(64);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&ring, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        while (!ring.TryPush((uint64_t(p) << 32) | i)) std::this_thread::yield();
      }
    });
  }
  std::vector<uint64_t> next(kProducers, 0);
  int received = 0;
  while (received < kProducers * kPerProducer) {
    uint64_t v;
    if (!ring.TryPop(&v)) {
      std::this_thread::yield();
      continue;
    }
    const int p = int(v >> 32);
    ASSERT_LT(p, kProducers);
    EXPECT_EQ(v & 0xffffffff, next[p]);
    next[p] = (v & 0xffffffff) + 1;
    ++received;
  }
  for (auto& t : producers) t.join();
  uint64_t v;
  EXPECT_FALSE(ring.TryPop(&v));
}

}  // namespace
}  // namespace uroce::transport
