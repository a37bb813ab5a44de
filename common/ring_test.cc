#include "common/ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace uroce {
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

TEST(MpmcRingTest, InPlacePushFillsOnlyWhenThereIsRoom) {
  MpmcRing<int> ring(2);
  EXPECT_TRUE(ring.TryPushWith([](int& slot) { slot = 7; }));
  EXPECT_TRUE(ring.TryPushWith([](int& slot) { slot = 8; }));
  bool called = false;
  EXPECT_FALSE(ring.TryPushWith([&](int&) { called = true; }));
  EXPECT_FALSE(called) << "a full ring does not call fill";
  int v = 0;
  ASSERT_TRUE(ring.TryPop(&v));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(ring.TryPop(&v));
  EXPECT_EQ(v, 8);
  EXPECT_EQ(ring.ApproxSize(), 0u);
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

// StridedRing: slots as large as asked, rounded to 8 bytes.
TEST(StridedRingTest, SlotsAreSizedFromThePayload) {
  StridedRing ring(200, 20);
  EXPECT_EQ(ring.capacity(), 256u);
  EXPECT_EQ(ring.payload_bytes(), 24u);
  EXPECT_EQ(ring.StorageBytes(), 256u * (8 + 24));
  StridedRing tiny(1, 0);
  EXPECT_EQ(tiny.capacity(), 2u);
}

// A taken slot stays the consumer's until released, in order: producers find
// the ring full meanwhile, and a released slot takes a new value.
TEST(StridedRingTest, TakenSlotsAreFreedOnlyByRelease) {
  StridedRing ring(4, sizeof(uint64_t));
  auto push = [&ring](uint64_t v) {
    return ring.TryPushWith([v](std::byte* p) { std::memcpy(p, &v, sizeof v); });
  };
  auto value = [](const std::byte* p) {
    uint64_t v = 0;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(push(i));
  EXPECT_FALSE(push(99));
  std::vector<const std::byte*> taken;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ring.head(), size_t(i));
    const std::byte* p = ring.TryTakeSingleConsumer();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(value(p), uint64_t(i));
    taken.push_back(p);
  }
  EXPECT_EQ(ring.TryTakeSingleConsumer(), nullptr);
  EXPECT_EQ(ring.ApproxSize(), 0u);
  EXPECT_FALSE(push(99)) << "every slot is still taken";
  ring.Release(0);
  EXPECT_EQ(value(taken[1]), 1u) << "a taken slot is read in place";
  ASSERT_TRUE(push(4));
  EXPECT_FALSE(push(99));
  ring.Release(1);
  ring.Release(2);
  ASSERT_TRUE(push(5));
  ASSERT_TRUE(push(6));
  uint64_t got = 0;
  ASSERT_TRUE(ring.TryPopSingleConsumer([&](const std::byte* p) { got = value(p); }));
  EXPECT_EQ(got, 4u);
  ring.Release(3);
  ASSERT_TRUE(push(7));
  for (uint64_t want = 5; want <= 7; ++want) {
    ASSERT_TRUE(ring.TryPopSingleConsumer([&](const std::byte* p) { got = value(p); }));
    EXPECT_EQ(got, want);
  }
  EXPECT_FALSE(ring.TryPopSingleConsumer([](const std::byte*) {}));
}

// Many producers against one consumer that takes, reads in place, then
// releases later (as the requester's window does): every value once, in
// order per producer. Run under --config=tsan too.
TEST(StridedRingTest, ProducersAgainstATakeThenReleaseConsumer) {
  constexpr int kProducers = 3, kEach = 20000;
  StridedRing ring(16, 2 * sizeof(uint64_t));
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&ring, p] {
      for (uint64_t i = 0; i < kEach; ++i) {
        const uint64_t v[2] = {uint64_t(p), i};
        while (!ring.TryPushWith([&v](std::byte* slot) { std::memcpy(slot, v, sizeof v); })) {
          std::this_thread::yield();
        }
      }
    });
  }
  std::vector<uint64_t> next(kProducers, 0);
  size_t released = 0;
  int got = 0;
  while (got < kProducers * kEach) {
    const std::byte* slot = ring.TryTakeSingleConsumer();
    if (slot == nullptr) {
      // Nothing new: release what was taken (lagging, like retirement).
      while (released != ring.head()) ring.Release(released++);
      std::this_thread::yield();
      continue;
    }
    uint64_t v[2];
    std::memcpy(v, slot, sizeof v);
    ASSERT_LT(v[0], uint64_t{kProducers});
    EXPECT_EQ(v[1], next[v[0]]) << "in order per producer";
    next[v[0]]++;
    got++;
    if (ring.head() - released > 8) ring.Release(released++);
  }
  for (auto& t : producers) t.join();
}

// Rings whose owner supplies the memory (a verbs parent domain's allocator):
// the slots live there, and it goes back through `release` exactly once.
TEST(RingStorageTest, GivenStorageHoldsTheSlotsAndIsReleasedOnce) {
  alignas(kCacheLine) static std::byte strided[4096];
  alignas(kCacheLine) static std::byte wcs[8192];
  int released = 0;
  const size_t strided_bytes = StridedRing::StorageBytesFor(8, 40);
  const size_t mpmc_bytes = MpmcRing<uint64_t>::StorageBytesFor(8);
  ASSERT_LE(strided_bytes, sizeof(strided));
  ASSERT_LE(mpmc_bytes, sizeof(wcs));
  {
    StridedRing ring(8, 40, RingStorage{strided, [&](void* p) { released += p == strided ? 1 : 100; }});
    EXPECT_EQ(ring.StorageBytes(), strided_bytes);
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(ring.TryPushWith([i](std::byte* p) { std::memset(p, i, 40); }));
    EXPECT_FALSE(ring.TryPushWith([](std::byte*) {}));
    // The payloads are in the given bytes.
    bool found = false;
    for (size_t i = 0; i < strided_bytes; ++i) found |= strided[i] == std::byte{7};
    EXPECT_TRUE(found);
    MpmcRing<uint64_t> mpmc(8, RingStorage{wcs, [&](void* p) { released += p == wcs ? 1 : 100; }});
    for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(mpmc.TryPush(i + 0x1234500));
    uint64_t v = 0;
    EXPECT_TRUE(mpmc.TryPop(&v));
    EXPECT_EQ(v, 0x1234500u);
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 2);
}

// SpscRing: the producer writes a burst in place and publishes it at once;
// the consumer reads slots without taking them and frees a prefix; a full
// ring takes only what fits, and room comes back only when the consumer
// frees.
TEST(SpscRingTest, BurstsPeeksAndPartialFrees) {
  SpscRing<int> ring(std::make_unique<int[]>(4), 4);
  ASSERT_EQ(ring.capacity(), 4u);
  EXPECT_TRUE(ring.LooksEmpty());
  ASSERT_EQ(ring.Writable(3), 3u);
  for (int i = 0; i < 3; ++i) ring.WriteSlot(i) = 10 + i;
  EXPECT_EQ(ring.Readable(), 0u) << "nothing is readable before Publish";
  ring.Publish(3);
  EXPECT_FALSE(ring.LooksEmpty());
  EXPECT_EQ(ring.SizeSeqCst(), 3u);
  ASSERT_EQ(ring.Readable(), 3u);
  EXPECT_EQ(ring.ReadSlot(0), 10);
  EXPECT_EQ(ring.ReadSlot(2), 12);
  EXPECT_EQ(ring.Writable(5), 1u) << "one free slot of four";
  ring.WriteSlot(0) = 13;
  ring.Publish(1);
  EXPECT_EQ(ring.Writable(1), 0u) << "full";
  ring.Consume(2);
  EXPECT_EQ(ring.Readable(), 2u);
  EXPECT_EQ(ring.ReadSlot(0), 12);
  EXPECT_EQ(ring.ReadSlot(1), 13);
  ASSERT_EQ(ring.Writable(4), 2u) << "the freed slots come back";
  ring.WriteSlot(0) = 14;
  ring.WriteSlot(1) = 15;
  ring.Publish(2, std::memory_order_seq_cst);
  for (int want = 12; want <= 15; ++want) {
    ASSERT_GE(ring.Readable(), 1u);
    EXPECT_EQ(ring.ReadSlot(0), want) << "wrapped in order";
    ring.Consume(1);
  }
  EXPECT_TRUE(ring.LooksEmpty());
}

// One producer thread against consumers that take turns under a mutex (a
// libfabric CQ's readers): every value arrives once, in order. Run under
// --config=tsan too.
TEST(SpscRingTest, ProducerAgainstConsumersTakingTurns) {
  constexpr uint64_t kValues = 200000;
  SpscRing<uint64_t> ring(std::make_unique<uint64_t[]>(64), 64);
  std::mutex turn;
  uint64_t next = 0;
  std::atomic<bool> done{false};
  std::vector<std::thread> consumers;
  for (int c = 0; c < 2; ++c) {
    consumers.emplace_back([&] {
      uint64_t buf[7];
      while (!done.load(std::memory_order_acquire)) {
        if (ring.LooksEmpty()) {
          std::this_thread::yield();
          continue;
        }
        std::lock_guard<std::mutex> lock(turn);
        const size_t n = std::min<size_t>(ring.Readable(), 7);
        for (size_t i = 0; i < n; ++i) buf[i] = ring.ReadSlot(i);
        ring.Consume(n);
        for (size_t i = 0; i < n; ++i) {
          if (buf[i] != next) ADD_FAILURE() << "got " << buf[i] << ", expected " << next;
          ++next;
        }
        if (next == kValues) done.store(true, std::memory_order_release);
      }
    });
  }
  uint64_t sent = 0;
  while (sent < kValues) {
    const size_t n = ring.Writable(std::min<uint64_t>(5, kValues - sent));
    for (size_t i = 0; i < n; ++i) ring.WriteSlot(i) = sent + i;
    ring.Publish(n);
    sent += n;
    if (n == 0) std::this_thread::yield();
  }
  for (auto& t : consumers) t.join();
  EXPECT_EQ(next, kValues);
}

}  // namespace
}  // namespace uroce
