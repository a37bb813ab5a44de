// ICRC and CRC-32 throughput, uroce's folding implementation next to DPDK's
// rte_net_crc (its SSE4.2 PCLMULQDQ path) in the same binary.
//
//   flock /tmp/uroce-bazel.lock bazel run //transport:icrc_benchmark
//
// bytes_per_second is the figure to read. DPDK selects its SIMD path only
// after rte_eal_init, so the DPDK benchmarks start EAL first (no hugepages).
#include <benchmark/benchmark.h>
#include <rte_net_crc.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "pmd/eal.h"
#include "transport/headers.h"
#include "transport/icrc.h"

namespace uroce::transport {
namespace {

std::vector<uint8_t> RandomBytes(size_t n) {
  std::mt19937 rng(42);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void EnsureDpdkSse42Crc() {
  static const bool started = [] {
    pmd::EalConfig config;
    config.program_name = "icrc_benchmark";
    config.log_level = "*:error";
    Status s = pmd::StartEal(config);
    if (!s.ok()) {
      std::fprintf(stderr, "icrc_benchmark: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    rte_net_crc_set_alg(RTE_NET_CRC_SSE42);
    return true;
  }();
  (void)started;
}

void BM_Crc32_Uroce(benchmark::State& state) {
  const std::vector<uint8_t> data = RandomBytes(state.range(0));
  for (auto _ : state) {
    uint32_t crc = ~Crc32Update(0xFFFFFFFF, data.data(), data.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
  state.SetLabel(Crc32ImplementationName());
}

void BM_Crc32_UroceTable(benchmark::State& state) {
  const std::vector<uint8_t> data = RandomBytes(state.range(0));
  for (auto _ : state) {
    uint32_t crc = ~Crc32UpdateTable(0xFFFFFFFF, data.data(), data.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Crc32_DpdkRteNetCrcSse42(benchmark::State& state) {
  EnsureDpdkSse42Crc();
  const std::vector<uint8_t> data = RandomBytes(state.range(0));
  for (auto _ : state) {
    uint32_t crc = rte_net_crc_calc(data.data(), static_cast<uint32_t>(data.size()), RTE_NET_CRC32_ETH);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// A whole IPv4 RoCEv2 packet's ICRC (masked headers + payload); the size
// argument is the payload. Bytes counted: everything the ICRC covers.
void BM_Icrc_Ipv4Packet(benchmark::State& state) {
  const size_t covered = sizeof(Ipv4Header) + sizeof(UdpHeader) + sizeof(BthHeader) + state.range(0);
  std::vector<uint8_t> pkt = RandomBytes(covered);
  pkt[0] = 0x45;
  for (auto _ : state) {
    uint32_t icrc = ComputeIcrc(pkt.data(), sizeof(Ipv4Header), IpVersion::kIpv4, covered);
    benchmark::DoNotOptimize(icrc);
  }
  state.SetBytesProcessed(state.iterations() * covered);
}

void BM_Icrc_Ipv4PacketTable(benchmark::State& state) {
  const size_t covered = sizeof(Ipv4Header) + sizeof(UdpHeader) + sizeof(BthHeader) + state.range(0);
  std::vector<uint8_t> pkt = RandomBytes(covered);
  pkt[0] = 0x45;
  for (auto _ : state) {
    uint32_t icrc = ComputeIcrcTable(pkt.data(), sizeof(Ipv4Header), IpVersion::kIpv4, covered);
    benchmark::DoNotOptimize(icrc);
  }
  state.SetBytesProcessed(state.iterations() * covered);
}

#define UROCE_SIZES Arg(64)->Arg(1024)->Arg(4096)
BENCHMARK(BM_Crc32_Uroce)->UROCE_SIZES->Arg(104)->Arg(128)->Arg(144);
BENCHMARK(BM_Crc32_DpdkRteNetCrcSse42)->UROCE_SIZES;
BENCHMARK(BM_Crc32_UroceTable)->UROCE_SIZES;
BENCHMARK(BM_Icrc_Ipv4Packet)->UROCE_SIZES;
BENCHMARK(BM_Icrc_Ipv4PacketTable)->UROCE_SIZES;

}  // namespace
}  // namespace uroce::transport
