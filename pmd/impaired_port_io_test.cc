// The impairment of real ports ([impair]): decisions that replay from the
// seed, rates that follow the probabilities, back-pressure from a full port,
// and every mbuf back in its pool at teardown.
#include "pmd/impaired_port_io.h"

#include <gtest/gtest.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "pmd/eal_test_environment.h"
#include "pmd/frame_test_util.h"
#include "pmd/mempool.h"

namespace uroce::pmd {
namespace {

constexpr unsigned kPool = 8191;

using testing::FrameNumber;
using testing::NumberedFrame;
using testing::QueuePort;

class ImpairedPortIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(TestEalStarted());
    static int n = 0;
    auto pool = CreatePktPool({.name = "ipio_pool" + std::to_string(n++), .mbufs = kPool, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
  }
  void TearDown() override {
    port_.Clear();
    EXPECT_EQ(AvailableMbufs(pool_.get()), kPool) << "mbufs leaked or freed twice";
  }

  rte_mbuf* Frame(uint32_t id) { return NumberedFrame(pool_.get(), id); }
  static uint32_t Id(const rte_mbuf* m) { return FrameNumber(m); }

  // Sends `count` frames through `io` in bursts of 8 and returns the ids
  // the port got, counted (order depends on time when delays are on).
  std::map<uint32_t, int> SendAll(ImpairedPortIo& io, uint32_t count) {
    std::map<uint32_t, int> got;
    auto harvest = [&] {
      for (rte_mbuf* m : port_.out) got[Id(m)]++;
      port_.Clear();
    };
    for (uint32_t i = 0; i < count; i += 8) {
      rte_mbuf* burst[8];
      const uint16_t k = static_cast<uint16_t>(std::min<uint32_t>(8, count - i));
      for (uint16_t j = 0; j < k; ++j) burst[j] = Frame(i + j);
      EXPECT_EQ(io.TxBurst(burst, k), k);
      harvest();
    }
    // The held ones leave once due: polls, as the engine polls.
    rte_mbuf* none[1];
    for (int spin = 0; spin < 1000000 && io.held() > 0; ++spin) EXPECT_EQ(io.RxBurst(none, 1), 0);
    harvest();
    return got;
  }

  MempoolPtr pool_;
  QueuePort port_;
};

PortImpairment Faults(double loss, double dup, double reorder, uint32_t delay_us, uint64_t seed) {
  PortImpairment p;
  p.faults.loss = loss;
  p.faults.duplicate = dup;
  p.faults.reorder = reorder;
  p.faults.max_delay = delay_us;
  p.faults.reorder_delay = 20;
  p.seed = seed;
  p.rx = false;
  return p;
}

TEST_F(ImpairedPortIoTest, SameSeedSameFaultsAnotherSeedOthers) {
  const PortImpairment f = Faults(0.1, 0.05, 0.05, 10, 7);
  std::map<uint32_t, int> first, second, third;
  ImpairedPortCounters c1, c2;
  {
    ImpairedPortIo io(&port_, pool_.get(), f);
    first = SendAll(io, 4000);
    c1 = io.counters();
  }
  {
    ImpairedPortIo io(&port_, pool_.get(), f);
    second = SendAll(io, 4000);
    c2 = io.counters();
  }
  EXPECT_EQ(first, second) << "the same seed and frames must give the same faults";
  EXPECT_EQ(c1.tx.dropped, c2.tx.dropped);
  EXPECT_EQ(c1.tx.duplicated, c2.tx.duplicated);
  EXPECT_EQ(c1.tx.reordered, c2.tx.reordered);
  EXPECT_EQ(c1.tx.delayed, c2.tx.delayed);
  PortImpairment other = f;
  other.seed = 8;
  {
    ImpairedPortIo io(&port_, pool_.get(), other);
    third = SendAll(io, 4000);
  }
  EXPECT_NE(first, third);
}

// A bottleneck on a real port: a burst faster than the rate fills the queue,
// what finds it full is dropped and counted, and the rest leave in order.
TEST_F(ImpairedPortIoTest, ABottleneckQueuesAndDropsWhatFindsItFull) {
  PortImpairment f = Faults(0, 0, 0, 0, 1);
  f.faults.rate = 0.064;  // bytes per microsecond: a 64-byte frame each millisecond
  f.faults.queue_frames = 4;
  ImpairedPortIo io(&port_, pool_.get(), f);
  rte_mbuf* burst[8];
  for (uint32_t j = 0; j < 8; ++j) burst[j] = Frame(j);
  ASSERT_EQ(io.TxBurst(burst, 8), 8);
  EXPECT_TRUE(port_.out.empty()) << "nothing leaves before its time at the rate";
  EXPECT_EQ(io.counters().tx.queue_dropped, 4u);
  rte_mbuf* none[1];
  for (int spin = 0; spin < 100000000 && io.held() > 0; ++spin) EXPECT_EQ(io.RxBurst(none, 1), 0);
  ASSERT_EQ(port_.out.size(), 4u);
  for (uint32_t j = 0; j < 4; ++j) EXPECT_EQ(Id(port_.out[j]), j);
}

TEST_F(ImpairedPortIoTest, RatesFollowTheProbabilities) {
  ImpairedPortIo io(&port_, pool_.get(), Faults(0.1, 0.05, 0.02, 0, 1));
  const std::map<uint32_t, int> got = SendAll(io, 20000);
  const ImpairedPortCounters c = io.counters();
  EXPECT_EQ(c.tx.sent, 20000u);
  // Binomial: mean 2000, sd ~42; mean 900 (5 % of the 18000 kept), sd ~29.
  EXPECT_NEAR(static_cast<double>(c.tx.dropped), 2000, 250);
  EXPECT_NEAR(static_cast<double>(c.tx.duplicated), 900, 150);
  EXPECT_NEAR(static_cast<double>(c.tx.reordered), 0.02 * 18900, 120);
  EXPECT_EQ(c.tx.delivered, c.tx.sent - c.tx.dropped + c.tx.duplicated);
  uint64_t frames = 0, twice = 0;
  for (const auto& [id, n] : got) {
    frames += static_cast<uint64_t>(n);
    twice += n == 2;
  }
  EXPECT_EQ(frames, c.tx.delivered);
  EXPECT_EQ(twice, c.tx.duplicated);
  EXPECT_EQ(got.size(), 20000u - c.tx.dropped);
}

TEST_F(ImpairedPortIoTest, ReorderedFramesArriveAfterLaterOnes) {
  PortImpairment f = Faults(0, 0, 0.2, 0, 3);
  f.faults.reorder_delay = 200;  // microseconds
  ImpairedPortIo io(&port_, pool_.get(), f);
  for (uint32_t i = 0; i < 200; ++i) {
    rte_mbuf* m = Frame(i);
    ASSERT_EQ(io.TxBurst(&m, 1), 1);
  }
  rte_mbuf* none[1];
  const uint64_t until = rte_get_tsc_cycles() + rte_get_tsc_hz();  // a second at most
  while (io.held() > 0 && rte_get_tsc_cycles() < until) io.RxBurst(none, 1);
  ASSERT_EQ(io.held(), 0u);
  ASSERT_EQ(port_.out.size(), 200u);
  bool out_of_order = false;
  for (size_t i = 1; i < port_.out.size(); ++i) out_of_order |= Id(port_.out[i]) < Id(port_.out[i - 1]);
  EXPECT_TRUE(out_of_order);
  EXPECT_GT(io.counters().tx.reordered, 10u);
}

TEST_F(ImpairedPortIoTest, CorruptionFlipsOneBitPastEthernet) {
  PortImpairment f = Faults(0, 0, 0, 0, 5);
  f.faults.corrupt = 1.0;
  ImpairedPortIo io(&port_, pool_.get(), f);
  rte_mbuf* m = Frame(9);
  ASSERT_EQ(io.TxBurst(&m, 1), 1);
  ASSERT_EQ(port_.out.size(), 1u);
  const uint8_t* d = rte_pktmbuf_mtod(port_.out[0], const uint8_t*);
  int bits = 0;
  for (int i = 0; i < 64; ++i) {
    const uint8_t want = i == 20 ? 9 : 0;
    if (d[i] != want) {
      EXPECT_GE(i, 14);
      bits += __builtin_popcount(d[i] ^ want);
    }
  }
  EXPECT_EQ(bits, 1);
  EXPECT_EQ(io.counters().tx.corrupted, 1u);
}

TEST_F(ImpairedPortIoTest, AFullPortKeepsFramesInOrderAndPushesBack) {
  PortImpairment f = Faults(0, 0, 0, 0, 1);
  f.faults.loss = 0.0;
  f.faults.corrupt = 1e-12;  // impaired, but nothing happens
  f.hold_frames = 32;
  ImpairedPortIo io(&port_, pool_.get(), f);
  port_.tx_room = 0;  // TX queue full
  rte_mbuf* burst[64];
  for (uint32_t i = 0; i < 64; ++i) burst[i] = Frame(i);
  const uint16_t taken = io.TxBurst(burst, 64);
  EXPECT_EQ(taken, 32) << "the hold queue takes what fits, the rest stay the caller's";
  for (uint32_t i = taken; i < 64; ++i) rte_pktmbuf_free(burst[i]);
  port_.tx_room = 5;
  rte_mbuf* none[1];
  for (int i = 0; i < 20 && io.held() > 0; ++i) io.RxBurst(none, 1);
  ASSERT_EQ(port_.out.size(), 32u);
  for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(Id(port_.out[i]), i);
}

TEST_F(ImpairedPortIoTest, ReceivedFramesAreImpairedToo) {
  PortImpairment f = Faults(0.2, 0.1, 0, 0, 11);
  f.tx = false;
  f.rx = true;
  ImpairedPortIo io(&port_, pool_.get(), f);
  for (uint32_t i = 0; i < 2000; ++i) port_.in.push_back(Frame(i));
  std::map<uint32_t, int> got;
  rte_mbuf* burst[32];
  for (int spin = 0; spin < 10000 && (!port_.in.empty() || io.held() > 0); ++spin) {
    const uint16_t n = io.RxBurst(burst, 32);
    for (uint16_t k = 0; k < n; ++k) got[Id(burst[k])]++;
    rte_pktmbuf_free_bulk(burst, n);
  }
  const ImpairedPortCounters c = io.counters();
  EXPECT_EQ(c.rx.sent, 2000u);
  EXPECT_EQ(c.tx.sent, 0u);
  EXPECT_GT(c.rx.dropped, 250u);
  EXPECT_GT(c.rx.duplicated, 100u);
  EXPECT_EQ(got.size(), 2000u - c.rx.dropped);
}

TEST_F(ImpairedPortIoTest, HeldFramesGoBackToThePoolAtTeardown) {
  PortImpairment f = Faults(0, 0.5, 0.5, 1000000, 2);  // up to a second's delay: all held
  f.rx = true;
  {
    ImpairedPortIo io(&port_, pool_.get(), f);
    for (uint32_t i = 0; i < 300; ++i) {
      rte_mbuf* m = Frame(i);
      ASSERT_EQ(io.TxBurst(&m, 1), 1);
      port_.in.push_back(Frame(1000 + i));
    }
    rte_mbuf* burst[32];
    for (int i = 0; i < 20; ++i) rte_pktmbuf_free_bulk(burst, io.RxBurst(burst, 32));
    EXPECT_GT(io.held(), 300u);
    EXPECT_LT(AvailableMbufs(pool_.get()), kPool - 300);
    io.FreeHeld();
    EXPECT_EQ(io.held(), 0u);
  }
  // TearDown: the pool is full again (FreeHeld, then the destructor, free each once).
}

TEST(DeriveSeedTest, StreamsDiffer) {
  EXPECT_NE(DeriveSeed(7, 0), DeriveSeed(7, 1));
  EXPECT_NE(DeriveSeed(7, 0), DeriveSeed(8, 0));
  EXPECT_EQ(DeriveSeed(7, 3), DeriveSeed(7, 3));
}

}  // namespace
}  // namespace uroce::pmd
