// `uroce demo`: the README's first command.
//
// Until the transport engine exists (issues 4 and 5), the demo runs the best
// end-to-end path there is: DPDK's EAL without hugepages, two ports joined by a
// net_ring pair, bursts of frames across in both directions with their
// contents checked, and every mbuf back in its pool at the end.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "pmd/eal.h"
#include "pmd/mempool.h"
#include "pmd/port.h"
#include "pmd/ring_pair.h"
#include "tools/command.h"

namespace uroce::tools {
namespace {

constexpr uint16_t kBurst = 32;
constexpr unsigned kRounds = 1000;
constexpr uint16_t kFrameBytes = 1024;

// Sends kRounds bursts from `from` to `to` and checks each frame's contents.
// Returns the frames that arrived intact.
unsigned Exchange(rte_mempool* pool, uint16_t from, uint16_t to, uint8_t tag) {
  unsigned intact = 0;
  rte_mbuf* burst[kBurst];
  for (unsigned round = 0; round < kRounds; ++round) {
    if (rte_pktmbuf_alloc_bulk(pool, burst, kBurst) != 0) return intact;
    for (uint16_t i = 0; i < kBurst; ++i) {
      char* data = rte_pktmbuf_append(burst[i], kFrameBytes);
      std::memset(data, tag ^ static_cast<uint8_t>(i + round), kFrameBytes);
    }
    uint16_t sent = rte_eth_tx_burst(from, 0, burst, kBurst);
    if (sent < kBurst) rte_pktmbuf_free_bulk(burst + sent, kBurst - sent);
    uint16_t got = rte_eth_rx_burst(to, 0, burst, kBurst);
    for (uint16_t i = 0; i < got; ++i) {
      const uint8_t* data = rte_pktmbuf_mtod(burst[i], const uint8_t*);
      const uint8_t want = tag ^ static_cast<uint8_t>(i + round);
      if (rte_pktmbuf_pkt_len(burst[i]) == kFrameBytes && data[0] == want && data[kFrameBytes - 1] == want) ++intact;
    }
    rte_pktmbuf_free_bulk(burst, got);
  }
  return intact;
}

}  // namespace

int DemoCommand(int argc, char** argv) {
  pmd::EalConfig eal;
  eal.program_name = "uroce-demo";
  eal.log_level = "*:warning";
  Status s = pmd::StartEal(eal);
  if (!s.ok()) {
    std::fprintf(stderr, "uroce demo: %s\n", s.ToString().c_str());
    return 1;
  }
  constexpr unsigned kPoolSize = 4095;
  auto pool = pmd::CreatePktPool({.name = "demo_pool", .mbufs = kPoolSize, .per_core_cache = 0});
  auto pair = pool.ok() ? pmd::CreateRingPair("demo") : StatusOr<pmd::RingPair>(pool.status());
  if (!pair.ok()) {
    std::fprintf(stderr, "uroce demo: %s\n", pair.status().ToString().c_str());
    return 1;
  }
  pmd::PortConfig port;
  port.rx_pool = pool->get();
  for (uint16_t id : {pair->port_a, pair->port_b}) {
    s = pmd::StartPort(id, port);
    if (!s.ok()) {
      std::fprintf(stderr, "uroce demo: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  std::printf("uroce demo: DPDK EAL up (no hugepages, file prefix %s), net_ring pair ports %u <-> %u\n",
              pmd::EalFilePrefix().c_str(), pair->port_a, pair->port_b);
  const uint64_t start = rte_get_tsc_cycles();
  unsigned ab = Exchange(pool->get(), pair->port_a, pair->port_b, 0xa5);
  unsigned ba = Exchange(pool->get(), pair->port_b, pair->port_a, 0x5a);
  const double seconds = double(rte_get_tsc_cycles() - start) / double(rte_get_tsc_hz());
  const unsigned expected = kRounds * kBurst;
  std::printf("  %-8s %10s %10s\n", "path", "frames", "intact");
  std::printf("  %-8s %10u %10u\n", "A -> B", expected, ab);
  std::printf("  %-8s %10u %10u\n", "B -> A", expected, ba);
  std::printf("  %.2f Mframes/s, %.2f GB/s of %u-byte frames (raw DPDK path, no RoCE yet)\n",
              2.0 * expected / seconds / 1e6, 2.0 * expected * kFrameBytes / seconds / 1e9, kFrameBytes);

  s = pmd::DestroyRingPair(*pair);
  const unsigned available = pmd::AvailableMbufs(pool->get());
  std::printf("  mbufs back in the pool: %u of %u\n", available, kPoolSize);
  pool->reset();
  Status stop = pmd::StopEal();
  const bool ok = s.ok() && stop.ok() && ab == expected && ba == expected && available == kPoolSize;
  std::printf("uroce demo: %s\n", ok ? "OK" : "FAILED");
  std::printf("(RoCEv2 endpoints, RDMA WRITE/READ/atomics arrive with the transport engine; see README)\n");
  return ok ? 0 : 1;
}

}  // namespace uroce::tools
