// Proves the DPDK pipeline end to end: EAL without hugepages, a net_ring pair,
// a burst of mbufs across it, and every mbuf back in its pool at teardown.
#include "pmd/ring_pair.h"

#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstring>

#include "pmd/eal.h"
#include "pmd/eal_test_environment.h"
#include "pmd/mempool.h"
#include "pmd/port.h"

namespace uroce::pmd {
namespace {

constexpr unsigned kPoolSize = 1023;
constexpr uint16_t kBurst = 32;

TEST(RingPairTest, BurstCrossesAndMempoolIsFullAgain) {
  ASSERT_TRUE(EalRunning());
  auto pool = CreatePktPool({.name = "rp_test_pool", .mbufs = kPoolSize, .per_core_cache = 32});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  rte_mempool* mp = pool->get();
  ASSERT_EQ(AvailableMbufs(mp), kPoolSize);

  auto pair = CreateRingPair("burst");
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  PortConfig port_config;
  port_config.rx_pool = mp;
  ASSERT_TRUE(StartPort(pair->port_a, port_config).ok());
  ASSERT_TRUE(StartPort(pair->port_b, port_config).ok());

  rte_mbuf* tx[kBurst];
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(mp, tx, kBurst), 0);
  for (uint16_t i = 0; i < kBurst; ++i) {
    char* data = rte_pktmbuf_append(tx[i], 64);
    ASSERT_NE(data, nullptr);
    std::memset(data, i, 64);
  }
  EXPECT_EQ(AvailableMbufs(mp), kPoolSize - kBurst);

  uint16_t sent = rte_eth_tx_burst(pair->port_a, 0, tx, kBurst);
  ASSERT_EQ(sent, kBurst);

  rte_mbuf* rx[kBurst * 2];
  uint16_t received = rte_eth_rx_burst(pair->port_b, 0, rx, kBurst * 2);
  ASSERT_EQ(received, kBurst);
  for (uint16_t i = 0; i < received; ++i) {
    ASSERT_EQ(rte_pktmbuf_pkt_len(rx[i]), 64u);
    const uint8_t* data = rte_pktmbuf_mtod(rx[i], const uint8_t*);
    EXPECT_EQ(data[0], i);
    EXPECT_EQ(data[63], i);
  }
  // Nothing went the other way.
  EXPECT_EQ(rte_eth_rx_burst(pair->port_a, 0, rx + kBurst, kBurst), 0);
  rte_pktmbuf_free_bulk(rx, received);

  // A few left in flight: DestroyRingPair must return them to the pool too.
  rte_mbuf* stranded[4];
  ASSERT_EQ(rte_pktmbuf_alloc_bulk(mp, stranded, 4), 0);
  for (auto* m : stranded) rte_pktmbuf_append(m, 60);
  ASSERT_EQ(rte_eth_tx_burst(pair->port_b, 0, stranded, 4), 4);

  EXPECT_TRUE(DestroyRingPair(*pair).ok());
  EXPECT_EQ(AvailableMbufs(mp), kPoolSize);
}

TEST(RingPairTest, RejectsBadRingSize) {
  auto pair = CreateRingPair("odd", 1000);
  EXPECT_FALSE(pair.ok());
  EXPECT_EQ(pair.status().code(), StatusCode::kInvalidArgument);
}

TEST(PortTest, UnknownPortIsNotFound) {
  EXPECT_EQ(PortByName("net_nothing_here").status().code(), StatusCode::kNotFound);
  PortConfig config;
  EXPECT_EQ(StartPort(RTE_MAX_ETHPORTS - 1, config).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace uroce::pmd
