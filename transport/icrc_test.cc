#include "transport/icrc.h"

#include <gtest/gtest.h>
#include <rte_net_crc.h>

#include <cstring>
#include <random>
#include <vector>

#include "pmd/eal_test_environment.h"

namespace uroce::transport {
namespace {

// A bit-at-a-time CRC-32 straight from the definition, sharing nothing with
// icrc.cc: the reference the fast implementations are held to.
uint32_t BitwiseCrc32(uint32_t state, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    state ^= p[i];
    for (int b = 0; b < 8; ++b) state = (state >> 1) ^ ((state & 1) ? 0xEDB88320u : 0u);
  }
  return state;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Lengths that cross every branch of the folding code: below one block, one
// to a few blocks, around the four-register threshold, odd tails.
std::vector<size_t> InterestingLengths() {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {511, 512, 513, 1023, 1024, 1025, 1500, 2048, 4095, 4096, 4097, 9000, 65536, 65537}) {
    lengths.push_back(n);
  }
  return lengths;
}

TEST(Crc32Test, StandardCheckValue) {
  // The catalogued check value of CRC-32/ISO-HDLC (Ethernet, zlib).
  const char* digits = "123456789";
  EXPECT_EQ(~Crc32UpdateTable(0xFFFFFFFF, digits, 9), 0xCBF43926u);
  EXPECT_EQ(~Crc32Update(0xFFFFFFFF, digits, 9), 0xCBF43926u);
  EXPECT_EQ(~BitwiseCrc32(0xFFFFFFFF, reinterpret_cast<const uint8_t*>(digits), 9), 0xCBF43926u);
}

TEST(Crc32Test, IcrcSeedIsEightOnesBytes) {
  const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(BitwiseCrc32(0xFFFFFFFF, ones, 8), kIcrcSeed);
}

TEST(Crc32Test, TableMatchesBitwiseReference) {
  const std::vector<uint8_t> data = RandomBytes(70000, 1);
  for (size_t n : InterestingLengths()) {
    for (size_t offset : {0, 1, 3}) {
      const uint32_t seed = static_cast<uint32_t>(n * 2654435761u);
      ASSERT_EQ(Crc32UpdateTable(seed, data.data() + offset, n), BitwiseCrc32(seed, data.data() + offset, n))
          << "length " << n << " offset " << offset;
    }
  }
}

TEST(Crc32Test, ClmulMatchesBitwiseReference) {
  if (!Crc32ClmulAvailable()) GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  const std::vector<uint8_t> data = RandomBytes(70000, 2);
  for (size_t n : InterestingLengths()) {
    for (size_t offset : {0, 1, 7, 8}) {
      const uint32_t seed = static_cast<uint32_t>(~n * 40503u);
      ASSERT_EQ(Crc32UpdateClmul(seed, data.data() + offset, n), BitwiseCrc32(seed, data.data() + offset, n))
          << "length " << n << " offset " << offset;
    }
  }
}

// The 512-bit path takes over from 32 blocks (512 bytes) on: every length
// from there to a few of its 256-byte steps, and long ones.
TEST(Crc32Test, VpclmulMatchesBitwiseReference) {
  if (!Crc32VpclmulAvailable()) GTEST_SKIP() << "no VPCLMULQDQ / AVX-512 on this CPU";
  const std::vector<uint8_t> data = RandomBytes(70000, 5);
  std::vector<size_t> lengths = InterestingLengths();
  for (size_t n = 480; n <= 1600; ++n) lengths.push_back(n);
  for (size_t n : {4096, 9000, 65536, 69990}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t offset : {0, 1, 7}) {
      const uint32_t seed = static_cast<uint32_t>(~n * 40503u);
      ASSERT_EQ(Crc32UpdateVpclmul(seed, data.data() + offset, n), BitwiseCrc32(seed, data.data() + offset, n))
          << "length " << n << " offset " << offset;
    }
  }
}

TEST(Crc32Test, DispatchUsesClmulWhereAvailable) {
  EXPECT_STREQ(Crc32ImplementationName(),
               Crc32VpclmulAvailable() ? "vpclmulqdq" : Crc32ClmulAvailable() ? "pclmul" : "table");
#if defined(__x86_64__)
  EXPECT_EQ(Crc32ClmulAvailable(), __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"));
#endif
}

TEST(Crc32Test, SplittingTheInputAnywhereGivesTheSameCrc) {
  const std::vector<uint8_t> data = RandomBytes(777, 3);
  const uint32_t whole = Crc32Update(kIcrcSeed, data.data(), data.size());
  for (size_t cut = 0; cut <= data.size(); ++cut) {
    uint32_t s = Crc32Update(kIcrcSeed, data.data(), cut);
    s = Crc32Update(s, data.data() + cut, data.size() - cut);
    ASSERT_EQ(s, whole) << "cut at " << cut;
  }
}

// DPDK's own CRC-32 (Ethernet) as an outside oracle, with its SIMD path: it
// is selectable only once EAL runs (the test environment starts it).
TEST(Crc32Test, AgreesWithDpdkNetCrc) {
  ASSERT_TRUE(pmd::TestEalStarted());
  const std::vector<uint8_t> data = RandomBytes(70000, 4);
  for (rte_net_crc_alg alg : {RTE_NET_CRC_SCALAR, RTE_NET_CRC_SSE42}) {
    rte_net_crc_set_alg(alg);
    for (size_t n : InterestingLengths()) {
      const uint32_t dpdk = rte_net_crc_calc(data.data() + 5, static_cast<uint32_t>(n), RTE_NET_CRC32_ETH);
      ASSERT_EQ(~Crc32Update(0xFFFFFFFF, data.data() + 5, n), dpdk) << "length " << n << " alg " << alg;
    }
  }
}

// ICRC masking, checked against a hand-masked copy: the variant fields must
// not matter, the rest must.
TEST(IcrcTest, Ipv4MaskTakesVariantFieldsAsOnes) {
  std::vector<uint8_t> pkt = RandomBytes(20 + 8 + 12 + 64, 5);
  pkt[0] = 0x45;
  const uint32_t icrc = ComputeIcrc(pkt.data(), 20, IpVersion::kIpv4, pkt.size());

  std::vector<uint8_t> masked(8, 0xFF);
  masked.insert(masked.end(), pkt.begin(), pkt.end());
  uint8_t* ip = masked.data() + 8;
  ip[1] = 0xFF;                 // TOS
  ip[8] = 0xFF;                 // TTL
  ip[10] = ip[11] = 0xFF;       // header checksum
  ip[20 + 6] = ip[20 + 7] = 0xFF;  // UDP checksum
  ip[28 + 4] = 0xFF;            // BTH byte 4
  EXPECT_EQ(icrc, ~BitwiseCrc32(0xFFFFFFFF, masked.data(), masked.size()));

  for (size_t variant : {1, 8, 10, 11, 26, 27, 32}) {
    std::vector<uint8_t> changed = pkt;
    changed[variant] ^= 0x5A;
    EXPECT_EQ(ComputeIcrc(changed.data(), 20, IpVersion::kIpv4, changed.size()), icrc) << "byte " << variant;
  }
  for (size_t covered = 0; covered < pkt.size(); ++covered) {
    if (covered == 1 || covered == 8 || covered == 10 || covered == 11 || covered == 26 || covered == 27 ||
        covered == 32) {
      continue;
    }
    std::vector<uint8_t> changed = pkt;
    changed[covered] ^= 0x01;
    EXPECT_NE(ComputeIcrc(changed.data(), 20, IpVersion::kIpv4, changed.size()), icrc) << "byte " << covered;
  }
}

TEST(IcrcTest, Ipv6MaskKeepsVersionAndTakesClassFlowHopAsOnes) {
  std::vector<uint8_t> pkt = RandomBytes(40 + 8 + 12 + 33, 6);
  pkt[0] = 0x60 | (pkt[0] & 0x0F);
  const uint32_t icrc = ComputeIcrc(pkt.data(), 40, IpVersion::kIpv6, pkt.size());

  std::vector<uint8_t> masked(8, 0xFF);
  masked.insert(masked.end(), pkt.begin(), pkt.end());
  uint8_t* ip = masked.data() + 8;
  ip[0] |= 0x0F;
  ip[1] = ip[2] = ip[3] = 0xFF;
  ip[7] = 0xFF;  // hop limit
  ip[40 + 6] = ip[40 + 7] = 0xFF;
  ip[48 + 4] = 0xFF;
  EXPECT_EQ(icrc, ~BitwiseCrc32(0xFFFFFFFF, masked.data(), masked.size()));

  std::vector<uint8_t> changed = pkt;
  changed[0] ^= 0x10;  // the version nibble is covered
  EXPECT_NE(ComputeIcrc(changed.data(), 40, IpVersion::kIpv6, changed.size()), icrc);
  changed = pkt;
  changed[0] ^= 0x0F;  // traffic class, top half
  changed[2] ^= 0xFF;  // flow label
  changed[7] ^= 0x3C;  // hop limit
  EXPECT_EQ(ComputeIcrc(changed.data(), 40, IpVersion::kIpv6, changed.size()), icrc);
}

// The hand-masked reference for any IP header length and packet length: the
// folding code's mask handling crosses block boundaries differently for each.
uint32_t ReferenceIcrc(std::vector<uint8_t> pkt, size_t ip_bytes, bool ipv6) {
  uint8_t* ip = pkt.data();
  if (ipv6) {
    ip[0] |= 0x0F;
    ip[1] = ip[2] = ip[3] = 0xFF;
    ip[7] = 0xFF;
  } else {
    ip[1] = ip[8] = ip[10] = ip[11] = 0xFF;
  }
  ip[ip_bytes + 6] = ip[ip_bytes + 7] = 0xFF;
  ip[ip_bytes + 8 + 4] = 0xFF;
  const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  return ~BitwiseCrc32(BitwiseCrc32(0xFFFFFFFF, ones, 8), pkt.data(), pkt.size());
}

TEST(IcrcTest, EveryLengthAndHeaderSizeMatchesTheReference) {
  const std::vector<uint8_t> random = RandomBytes(5000, 8);
  for (size_t ip_bytes : {20, 24, 40, 60}) {
    const bool ipv6 = ip_bytes == 40;
    for (size_t covered = ip_bytes + 20; covered < ip_bytes + 20 + 600; ++covered) {
      std::vector<uint8_t> pkt(random.begin(), random.begin() + covered);
      const IpVersion version = ipv6 ? IpVersion::kIpv6 : IpVersion::kIpv4;
      const uint32_t want = ReferenceIcrc(pkt, ip_bytes, ipv6);
      ASSERT_EQ(ComputeIcrc(pkt.data(), ip_bytes, version, covered), want)
          << "ip header " << ip_bytes << " covered " << covered;
      ASSERT_EQ(ComputeIcrcTable(pkt.data(), ip_bytes, version, covered), want)
          << "table, ip header " << ip_bytes << " covered " << covered;
    }
  }
}

TEST(IcrcTest, AccumulatorEqualsOneShot) {
  std::vector<uint8_t> pkt = RandomBytes(20 + 8 + 12 + 16 + 1024, 7);
  const uint32_t one_shot = ComputeIcrc(pkt.data(), 20, IpVersion::kIpv4, pkt.size());
  IcrcAccumulator acc;
  acc.AddMaskedHeaders(pkt.data(), 20, IpVersion::kIpv4);
  acc.Add(pkt.data() + 40, 16);
  acc.Add(pkt.data() + 56, 1000);
  acc.Add(pkt.data() + 1056, pkt.size() - 1056);
  EXPECT_EQ(acc.Finish(), one_shot);
}

}  // namespace
}  // namespace uroce::transport
