// Proves the DPDK pipeline end to end: EAL without hugepages, a net_ring pair,
// a burst of mbufs across it, and every mbuf back in its pool at teardown.
#include "pmd/ring_pair.h"

#include <gtest/gtest.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <array>
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

// RFC 4291 §2.7.1 / RFC 2464 §7: fe80::2aa:ff:fe28:9c5a solicits at
// ff02::1:ff28:9c5a, whose Ethernet group is 33:33:ff:28:9c:5a.
TEST(PortTest, SolicitedNodeMacOfAnAddress) {
  const std::array<uint8_t, 16> address = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0xaa, 0x00, 0xff, 0xfe, 0x28, 0x9c, 0x5a};
  const rte_ether_addr mac = SolicitedNodeMac(address);
  const uint8_t want[6] = {0x33, 0x33, 0xff, 0x28, 0x9c, 0x5a};
  EXPECT_EQ(std::memcmp(mac.addr_bytes, want, 6), 0);
}

// A port that filters no multicast (net_ring) joins without error, and a
// port that does not exist is refused.
TEST(PortTest, JoinSolicitedNodeGroups) {
  auto pool = CreatePktPool({.name = "rp_join_pool", .mbufs = 255, .per_core_cache = 0});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto pair = CreateRingPair("join");
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  PortConfig port_config;
  port_config.rx_pool = pool->get();
  ASSERT_TRUE(StartPort(pair->port_a, port_config).ok());
  std::array<uint8_t, 16> a{}, b{};
  a[0] = b[0] = 0xfd;
  a[15] = 1;
  b[15] = 2;
  EXPECT_TRUE(JoinSolicitedNodeGroups(pair->port_a, {a, b, a}).ok());
  EXPECT_TRUE(JoinSolicitedNodeGroups(pair->port_a, {}).ok());
  EXPECT_FALSE(JoinSolicitedNodeGroups(RTE_MAX_ETHPORTS - 1, {a}).ok());
  EXPECT_TRUE(DestroyRingPair(*pair).ok());
}

// PortConfig::mac: a port whose driver can change its address takes it
// (net_null can); a net_ring port (promiscuous from its creation) ends up
// with the address or promiscuous. A port that has the address already is
// left as it is.
TEST(PortTest, TakesTheConfiguredMac) {
  auto pool = CreatePktPool({.name = "rp_mac_pool", .mbufs = 255, .per_core_cache = 0});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const std::array<uint8_t, 6> wanted = {0x02, 0x75, 0x72, 0x6d, 0x61, 0x63};
  PortConfig port_config;
  port_config.rx_pool = pool->get();
  port_config.mac = wanted;

  ASSERT_EQ(rte_eal_hotplug_add("vdev", "net_null_mac0", "no-rx=1"), 0);
  auto null_port = PortByName("net_null_mac0");
  ASSERT_TRUE(null_port.ok()) << null_port.status().ToString();
  rte_ether_addr before;
  ASSERT_EQ(rte_eth_macaddr_get(*null_port, &before), 0);
  ASSERT_NE(std::memcmp(before.addr_bytes, wanted.data(), 6), 0);
  ASSERT_TRUE(StartPort(*null_port, port_config).ok());
  rte_ether_addr mac;
  ASSERT_EQ(rte_eth_macaddr_get(*null_port, &mac), 0);
  EXPECT_EQ(std::memcmp(mac.addr_bytes, wanted.data(), 6), 0) << "net_null did not take the MAC";
  EXPECT_TRUE(ClosePort(*null_port).ok());
  EXPECT_EQ(rte_eal_hotplug_remove("vdev", "net_null_mac0"), 0);

  auto pair = CreateRingPair("mac");
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  ASSERT_TRUE(StartPort(pair->port_a, port_config).ok());
  ASSERT_EQ(rte_eth_macaddr_get(pair->port_a, &mac), 0);
  EXPECT_TRUE(std::memcmp(mac.addr_bytes, wanted.data(), 6) == 0 || rte_eth_promiscuous_get(pair->port_a) == 1);
  ASSERT_EQ(rte_eth_macaddr_get(pair->port_b, &mac), 0);
  std::array<uint8_t, 6> own;
  std::memcpy(own.data(), mac.addr_bytes, 6);
  port_config.mac = own;
  ASSERT_TRUE(StartPort(pair->port_b, port_config).ok());
  ASSERT_EQ(rte_eth_macaddr_get(pair->port_b, &mac), 0);
  EXPECT_EQ(std::memcmp(mac.addr_bytes, own.data(), 6), 0);
  EXPECT_TRUE(DestroyRingPair(*pair).ok());
}

}  // namespace
}  // namespace uroce::pmd
