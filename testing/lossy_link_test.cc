#include "testing/lossy_link.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "pmd/frame_test_util.h"
#include "pmd/mempool.h"

namespace uroce::transport {
namespace {

constexpr unsigned kPool = 2047;

class LossyLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    auto pool = pmd::CreatePktPool({.name = "ll_pool" + std::to_string(n++), .mbufs = kPool, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
  }
  void TearDown() override { EXPECT_EQ(pmd::AvailableMbufs(pool_.get()), kPool) << "mbufs leaked"; }

  rte_mbuf* Frame(uint32_t id) { return pmd::testing::NumberedFrame(pool_.get(), id); }
  static uint32_t Id(rte_mbuf* m) { return pmd::testing::FrameNumber(m); }

  // Sends `count` frames from A, then ticks B until the link is empty; returns
  // the ids B saw, in order.
  std::vector<uint32_t> Run(LossyLink& link, uint32_t count) {
    std::vector<uint32_t> seen;
    rte_mbuf* burst[32];
    for (uint32_t i = 0; i < count; ++i) {
      rte_mbuf* m = Frame(i);
      EXPECT_EQ(link.a().TxBurst(&m, 1), 1);
      uint16_t got = link.b().RxBurst(burst, 32);
      for (uint16_t k = 0; k < got; ++k) seen.push_back(Id(burst[k]));
      rte_pktmbuf_free_bulk(burst, got);
    }
    for (int tick = 0; tick < 1000 && link.in_flight() > 0; ++tick) {
      uint16_t got = link.b().RxBurst(burst, 32);
      for (uint16_t k = 0; k < got; ++k) seen.push_back(Id(burst[k]));
      rte_pktmbuf_free_bulk(burst, got);
    }
    return seen;
  }

  pmd::MempoolPtr pool_;
};

TEST_F(LossyLinkTest, PerfectLinkDeliversInOrder) {
  LossyLink link(pool_.get(), 1, {});
  std::vector<uint32_t> seen = Run(link, 500);
  ASSERT_EQ(seen.size(), 500u);
  for (uint32_t i = 0; i < 500; ++i) EXPECT_EQ(seen[i], i);
}

TEST_F(LossyLinkTest, ImpairmentsHappenAndReplayFromTheSeed) {
  LinkImpairments bad;
  bad.loss = 0.1;
  bad.duplicate = 0.1;
  bad.reorder = 0.1;
  bad.max_delay = 3;
  LossyLink first(pool_.get(), 42, bad);
  std::vector<uint32_t> a = Run(first, 1000);
  LossyLink second(pool_.get(), 42, bad);
  std::vector<uint32_t> b = Run(second, 1000);
  EXPECT_EQ(a, b) << "same seed, same outcome";
  EXPECT_GT(first.counters().dropped, 50u);
  EXPECT_GT(first.counters().duplicated, 50u);
  EXPECT_GT(first.counters().reordered, 50u);
  bool out_of_order = false;
  for (size_t i = 1; i < a.size(); ++i) out_of_order |= a[i] < a[i - 1];
  EXPECT_TRUE(out_of_order);
  LossyLink third(pool_.get(), 43, bad);
  EXPECT_NE(Run(third, 1000), a) << "another seed, another outcome";
}

TEST_F(LossyLinkTest, CorruptionChangesABytePastEthernet) {
  LinkImpairments bad;
  bad.corrupt = 1.0;
  LossyLink link(pool_.get(), 7, bad);
  rte_mbuf* m = Frame(5);
  ASSERT_EQ(link.a().TxBurst(&m, 1), 1);
  rte_mbuf* got = nullptr;
  ASSERT_EQ(link.b().RxBurst(&got, 1), 1);
  const uint8_t* d = rte_pktmbuf_mtod(got, const uint8_t*);
  int changed = 0;
  for (int i = 0; i < 64; ++i) {
    uint8_t want = 0;
    if (i >= 20 && i < 24) want = i == 20 ? 5 : 0;
    if (d[i] != want) {
      ++changed;
      EXPECT_GE(i, 14);
    }
  }
  EXPECT_EQ(changed, 1);
  rte_pktmbuf_free(got);
}

TEST_F(LossyLinkTest, FramesLeftOnTheWireAreFreed) {
  LinkImpairments slow;
  slow.max_delay = 1000;
  LossyLink link(pool_.get(), 3, slow);
  for (uint32_t i = 0; i < 100; ++i) {
    rte_mbuf* m = Frame(i);
    link.a().TxBurst(&m, 1);
  }
  // The destructor returns them; TearDown checks the pool is full.
}

}  // namespace
}  // namespace uroce::transport
