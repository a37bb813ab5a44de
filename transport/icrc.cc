#include "transport/icrc.h"

#include <array>
#include <cstring>

#include "transport/headers.h"
#include "transport/wire_types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define UROCE_HAVE_X86_CLMUL 1
#else
#define UROCE_HAVE_X86_CLMUL 0
#endif

namespace uroce::transport {
namespace {

// CRC-32 generator polynomial (IEEE 802.3), x^32 + x^26 + ... + 1, with its
// x^32 term implied; and the same 32 bits in reflected order, as the
// shift-right ("LSB first") register uses them.
constexpr uint32_t kPolynomial = 0x04C11DB7;
constexpr uint32_t kPolynomialReflected = 0xEDB88320;

// --- Portable: slice-by-8 tables --------------------------------------------
// Table k maps a byte to the register change it causes k bytes before the end
// of an 8-byte step, so eight lookups advance the register eight bytes.
using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SliceTables MakeSliceTables() {
  SliceTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1) ? kPolynomialReflected : 0);
    t[0][b] = r;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr SliceTables kSlice = MakeSliceTables();

constexpr uint32_t TableByte(uint32_t state, uint8_t byte) {
  return (state >> 8) ^ kSlice[0][(state ^ byte) & 0xFF];
}

// The ICRC seed is the register after eight 0xFF bytes from 0xFFFFFFFF.
constexpr uint32_t SeedFromOnes() {
  uint32_t s = 0xFFFFFFFF;
  for (int i = 0; i < 8; ++i) s = TableByte(s, 0xFF);
  return s;
}
static_assert(SeedFromOnes() == kIcrcSeed, "ICRC seed must be CRC-32 of eight 0xFF bytes, not inverted");

// --- Constants for carry-less folding -----------------------------------------
// Notation: a polynomial over GF(2) in normal form has bit k = coefficient of
// x^k. The reflected register keeps the highest power in bit 0, so a 64-bit
// lane q stands for sum q_i x^(63-i) and a 128-bit register r for
// sum r_i x^(127-i). A carry-less multiply of two reflected 64-bit lanes
// yields the reflected 128-bit product times x (the product has degree at most
// 126 and lands in bits 0..126), which every constant below accounts for.

// x^n mod P, normal form.
constexpr uint32_t XPowModP(unsigned n) {
  uint32_t r = 1;  // x^0
  for (unsigned i = 0; i < n; ++i) r = (r << 1) ^ ((r & 0x80000000u) ? kPolynomial : 0);
  return r;
}

// The 64-bit reflected lane for a normal-form polynomial of degree < 64.
constexpr uint64_t Reflect64(uint64_t normal) {
  uint64_t r = 0;
  for (int k = 0; k < 64; ++k) {
    if (normal & (uint64_t{1} << k)) r |= uint64_t{1} << (63 - k);
  }
  return r;
}

// Folding a 128-bit register A forward by `bits` (the distance to the next
// block) replaces A * x^bits by two multiplies: the low lane (A's top 64
// coefficients, A_hi) by x^(bits+63) mod P and the high lane (A_lo) by
// x^(bits-1) mod P; the extra -1 undoes the multiply's factor x.
struct FoldConstants {
  uint64_t for_low_lane;
  uint64_t for_high_lane;
};
constexpr FoldConstants FoldBy(unsigned bits) {
  return {Reflect64(XPowModP(bits + 63)), Reflect64(XPowModP(bits - 1))};
}

constexpr FoldConstants kFold512 = FoldBy(512);  // four registers, 64 bytes a step
constexpr FoldConstants kFold128 = FoldBy(128);  // one register, 16 bytes a step
// Final reduction of a 128-bit register A to (A * x^32) mod P:
// 128 -> 96 bits: the low lane times x^95 mod P (lands at x^(64+32)),
// 96 -> 64 bits: the top 32 coefficients times x^63 mod P (lands at x^64),
// then Barrett with mu * x^31 and P * x^31 (see Crc32UpdateClmul).
constexpr uint64_t kReduce96 = Reflect64(XPowModP(95));
constexpr uint64_t kReduce64 = Reflect64(XPowModP(63));

// floor(x^64 / P) by plain long division over a 96-bit dividend.
constexpr uint64_t ComputeMu() {
  // Dividend bits 0..95 in two words; only x^64 is set.
  uint64_t lo = 0, hi = 1;  // hi holds bits 64..95
  uint64_t q = 0;
  for (int d = 64; d >= 32; --d) {
    const bool set = d >= 64 ? ((hi >> (d - 64)) & 1) : ((lo >> d) & 1);
    if (!set) continue;
    q |= uint64_t{1} << (d - 32);
    // Subtract P * x^(d-32): P = x^32 + kPolynomial.
    const int s = d - 32;
    if (d >= 64) {
      hi ^= uint64_t{1} << (d - 64);  // x^32 * x^s = x^d
    } else {
      lo ^= uint64_t{1} << d;
    }
    // kPolynomial * x^s occupies bits s..s+31, all below 64 since s <= 32.
    lo ^= uint64_t{kPolynomial} << s;
  }
  return q;
}
constexpr uint64_t kMu = ComputeMu();
static_assert(kMu >> 32 == 1, "mu = floor(x^64 / P) has degree 32");
constexpr uint64_t kBarrettMu = Reflect64(kMu << 31);
constexpr uint64_t kBarrettPoly = Reflect64(((uint64_t{1} << 32) | kPolynomial) << 31);

}  // namespace

uint32_t Crc32UpdateTable(uint32_t state, const void* data, size_t length) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (length >= 8) {
    const uint32_t lo = state ^ LoadLe32(p);
    const uint32_t hi = LoadLe32(p + 4);
    state = kSlice[7][lo & 0xFF] ^ kSlice[6][(lo >> 8) & 0xFF] ^ kSlice[5][(lo >> 16) & 0xFF] ^
            kSlice[4][lo >> 24] ^ kSlice[3][hi & 0xFF] ^ kSlice[2][(hi >> 8) & 0xFF] ^
            kSlice[1][(hi >> 16) & 0xFF] ^ kSlice[0][hi >> 24];
    p += 8;
    length -= 8;
  }
  while (length-- > 0) state = TableByte(state, *p++);
  return state;
}

#if UROCE_HAVE_X86_CLMUL

#define UROCE_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

namespace {

UROCE_CLMUL_TARGET inline __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// r * x^distance + next, with `k` made by FoldBy(distance): low lane times
// k's low half, high lane times its high half.
UROCE_CLMUL_TARGET inline __m128i Fold(__m128i r, __m128i k, __m128i next) {
  const __m128i a = _mm_clmulepi64_si128(r, k, 0x00);
  const __m128i b = _mm_clmulepi64_si128(r, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(a, b), next);
}

// (A * x^32) mod P for the polynomial A held in `r`, as a reflected 32-bit
// CRC register.
UROCE_CLMUL_TARGET inline uint32_t Reduce(__m128i r) {
  const __m128i k = _mm_set_epi64x(static_cast<long long>(kReduce64), static_cast<long long>(kReduce96));
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  // 128 -> 96 bits: A = A_hi x^64 + A_lo; A x^32 = A_hi x^96 + A_lo x^32.
  // A_hi (low lane) times x^95 mod P lands in bits 32..127; A_lo x^32 is the
  // high lane moved down to bits 32..95.
  __m128i x = _mm_clmulepi64_si128(r, k, 0x00);
  x = _mm_xor_si128(x, _mm_slli_si128(_mm_srli_si128(r, 8), 4));
  // 96 -> 64 bits: the top 32 coefficients (bits 32..63) times x^63 mod P
  // land in the high lane, where the low 64 coefficients already are.
  __m128i y = _mm_clmulepi64_si128(x, k, 0x10);
  y = _mm_xor_si128(y, _mm_slli_si128(_mm_srli_si128(x, 8), 8));
  // Barrett on S = S_hi x^32 + S_lo (the high lane, moved to the low lane):
  // q = floor(S_hi mu / x^32), remainder = S_lo + (q P mod x^32).
  const __m128i barrett = _mm_set_epi64x(static_cast<long long>(kBarrettPoly), static_cast<long long>(kBarrettMu));
  const __m128i s = _mm_srli_si128(y, 8);
  __m128i q = _mm_clmulepi64_si128(_mm_and_si128(s, low32), barrett, 0x00);
  q = _mm_clmulepi64_si128(_mm_and_si128(q, low32), barrett, 0x10);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(s, q), 1));
}

}  // namespace

UROCE_CLMUL_TARGET uint32_t Crc32UpdateClmul(uint32_t state, const void* data, size_t length) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  // Below two blocks the table is as fast as setting up the fold.
  if (length < 32) return Crc32UpdateTable(state, p, length);

  const __m128i k128 = _mm_set_epi64x(static_cast<long long>(kFold128.for_high_lane),
                                      static_cast<long long>(kFold128.for_low_lane));
  // The register enters as the first 32 bits of the message, XORed in.
  __m128i r = _mm_xor_si128(Load128(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  p += 16;
  length -= 16;

  if (length >= 112) {
    // Four independent registers hide the multiplier's latency.
    const __m128i k512 = _mm_set_epi64x(static_cast<long long>(kFold512.for_high_lane),
                                        static_cast<long long>(kFold512.for_low_lane));
    __m128i r1 = Load128(p);
    __m128i r2 = Load128(p + 16);
    __m128i r3 = Load128(p + 32);
    p += 48;
    length -= 48;
    while (length >= 64) {
      r = Fold(r, k512, Load128(p));
      r1 = Fold(r1, k512, Load128(p + 16));
      r2 = Fold(r2, k512, Load128(p + 32));
      r3 = Fold(r3, k512, Load128(p + 48));
      p += 64;
      length -= 64;
    }
    r = Fold(r, k128, r1);
    r = Fold(r, k128, r2);
    r = Fold(r, k128, r3);
  }
  while (length >= 16) {
    r = Fold(r, k128, Load128(p));
    p += 16;
    length -= 16;
  }
  return Crc32UpdateTable(Reduce(r), p, length);
}

bool Crc32ClmulAvailable() {
  static const bool available = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return available;
}

#else  // !UROCE_HAVE_X86_CLMUL

uint32_t Crc32UpdateClmul(uint32_t state, const void* data, size_t length) {
  return Crc32UpdateTable(state, data, length);
}
bool Crc32ClmulAvailable() { return false; }

#endif

uint32_t Crc32Update(uint32_t state, const void* data, size_t length) {
  return Crc32ClmulAvailable() ? Crc32UpdateClmul(state, data, length) : Crc32UpdateTable(state, data, length);
}

const char* Crc32ImplementationName() { return Crc32ClmulAvailable() ? "pclmul" : "table"; }

void IcrcAccumulator::AddMaskedHeaders(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version) {
  uint8_t masked[kMaxMaskedHeaderBytes];
  const size_t n = ip_header_bytes + sizeof(UdpHeader) + sizeof(BthHeader);
  std::memcpy(masked, ip_header, n);
  if (version == IpVersion::kIpv4) {
    masked[offsetof(Ipv4Header, tos)] = 0xFF;
    masked[offsetof(Ipv4Header, ttl)] = 0xFF;
    masked[offsetof(Ipv4Header, header_checksum)] = 0xFF;
    masked[offsetof(Ipv4Header, header_checksum) + 1] = 0xFF;
  } else {
    // Keep the version nibble; traffic class and flow label become ones.
    masked[0] |= 0x0F;
    masked[1] = masked[2] = masked[3] = 0xFF;
    masked[offsetof(Ipv6Header, hop_limit)] = 0xFF;
  }
  uint8_t* udp = masked + ip_header_bytes;
  udp[offsetof(UdpHeader, checksum)] = 0xFF;
  udp[offsetof(UdpHeader, checksum) + 1] = 0xFF;
  udp[sizeof(UdpHeader) + offsetof(BthHeader, reserved_byte4)] = 0xFF;
  state_ = Crc32Update(state_, masked, n);
}

uint32_t ComputeIcrc(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version, size_t covered_bytes) {
  IcrcAccumulator icrc;
  const size_t masked = ip_header_bytes + sizeof(UdpHeader) + sizeof(BthHeader);
  icrc.AddMaskedHeaders(ip_header, ip_header_bytes, version);
  icrc.Add(ip_header + masked, covered_bytes - masked);
  return icrc.Finish();
}

}  // namespace uroce::transport
