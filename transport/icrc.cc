#include "transport/icrc.h"

#include <array>
#include <cstring>

#include "transport/headers.h"
#include "transport/wire_types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define UROCE_HAVE_X86_CLMUL 1
#else
#define UROCE_HAVE_X86_CLMUL 0
#endif

namespace uroce::transport {
namespace {

// CRC-32 generator polynomial (IEEE 802.3), x^32 + x^26 + ... + 1, with its
// x^32 term implied; and the same 32 bits in reflected order, as the
// shift-right ("least significant bit first") register uses them.
constexpr uint32_t kPolynomial = 0x04C11DB7;
constexpr uint32_t kPolynomialReflected = 0xEDB88320;

// Masks are ORed into the data: a masked field reads as all ones whatever the
// packet holds. kMaskBufferBytes leaves room for a 16-byte load starting at
// any offset below kMaxMaskedHeaderBytes.
constexpr size_t kMaskBufferBytes = kMaxMaskedHeaderBytes + 16;
using OrMask = std::array<uint8_t, kMaskBufferBytes>;

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

uint32_t TableUpdate(uint32_t state, const uint8_t* p, size_t length) {
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

// The table path with the first mask_length bytes ORed with `mask`.
uint32_t TableUpdateMasked(uint32_t state, const uint8_t* p, size_t length, const uint8_t* mask,
                           size_t mask_length) {
  if (mask_length > 0) {
    uint8_t head[kMaxMaskedHeaderBytes];
    const size_t n = length < mask_length ? length : mask_length;
    for (size_t i = 0; i < n; ++i) head[i] = p[i] | mask[i];
    state = TableUpdate(state, head, n);
    p += n;
    length -= n;
  }
  return TableUpdate(state, p, length);
}

// --- Constants for carry-less folding -----------------------------------------
// Notation: a polynomial over GF(2) in normal form has bit k = coefficient of
// x^k. The reflected register keeps the highest power in bit 0, so a 64-bit
// lane q stands for sum q_i x^(63-i) and a 128-bit register r for
// sum r_i x^(127-i); bytes in memory order are exactly that register loaded
// little-endian. A carry-less multiply of two reflected 64-bit lanes yields
// the reflected 128-bit product times x (the product has degree at most 126
// and lands in bits 0..126), which every constant below accounts for.

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

// Moving a 128-bit register A forward by `bits` (A * x^bits, to be XORed
// with the block found that far on) takes two multiplies: the low lane (A's
// top 64 coefficients) by x^(bits+63) mod P and the high lane (the bottom 64)
// by x^(bits-1) mod P; the -1 undoes the multiply's factor x.
struct alignas(16) FoldConstants {
  uint64_t for_low_lane;   // first: it loads into the register's low lane
  uint64_t for_high_lane;
};
constexpr FoldConstants FoldBy(unsigned bits) {
  return {Reflect64(XPowModP(bits + 63)), Reflect64(XPowModP(bits - 1))};
}

// Folds forward by 1..7 blocks of 16 bytes (index 0 unused: no fold), so
// that up to eight blocks fold onto the last one at once, in parallel.
constexpr std::array<FoldConstants, 8> MakeBlockFolds() {
  std::array<FoldConstants, 8> k{};
  for (unsigned d = 1; d < 8; ++d) k[d] = FoldBy(128 * d);
  return k;
}
constexpr std::array<FoldConstants, 8> kFoldBlocks = MakeBlockFolds();
constexpr FoldConstants kFold4Blocks = FoldBy(512);  // four registers, 64 bytes a step
// The 512-bit variant (WideFold): four registers of four lanes, 256 bytes a
// step, and the folds that bring them together at the end.
constexpr FoldConstants kFold8Blocks = FoldBy(128 * 8);
constexpr FoldConstants kFold12Blocks = FoldBy(128 * 12);
constexpr FoldConstants kFold16Blocks = FoldBy(128 * 16);

// Final reduction of a 128-bit register A to (A * x^32) mod P:
// 128 -> 96 bits: the low lane times x^95 mod P (lands at x^(64+32)),
// 96 -> 64 bits: the top 32 coefficients times x^63 mod P (lands at x^64),
// then Barrett with mu * x^31 and P * x^31 (see Reduce).
constexpr uint64_t kReduce96 = Reflect64(XPowModP(95));
constexpr uint64_t kReduce64 = Reflect64(XPowModP(63));

// mu = floor(x^64 / P) by long division.
constexpr uint64_t ComputeMu() {
  uint64_t lo = 0;  // dividend bits 0..63
  bool x64 = true;  // dividend bit 64: the dividend is x^64
  uint64_t q = 0;
  for (int d = 64; d >= 32; --d) {
    const bool set = d == 64 ? x64 : ((lo >> d) & 1) != 0;
    if (!set) continue;
    const int s = d - 32;
    q |= uint64_t{1} << s;
    // Subtract P * x^s = x^d + kPolynomial * x^s (the latter below bit 64).
    if (d == 64) {
      x64 = false;
    } else {
      lo ^= uint64_t{1} << d;
    }
    lo ^= uint64_t{kPolynomial} << s;
  }
  return q;
}
constexpr uint64_t kMu = ComputeMu();
static_assert(kMu >> 32 == 1, "mu = floor(x^64 / P) has degree 32");
constexpr uint64_t kBarrettMu = Reflect64(kMu << 31);
constexpr uint64_t kBarrettPoly = Reflect64(((uint64_t{1} << 32) | kPolynomial) << 31);
// The same two numbers as the literature prints them for the bit-reflected
// CRC-32 (Intel's PCLMULQDQ paper): derived above, checked here.
static_assert(kBarrettMu == 0x1F7011641ull && kBarrettPoly == 0x1DB710641ull, "Barrett constants");

// pshufb controls: 16 bytes of 0x80 (which give zero), 0..15, 16 more of
// 0x80. Reading 16 bytes at kShiftTable + 16 - z shifts a register up by z
// bytes (toward the end of the message); at kShiftTable + 32 - z, down by
// 16 - z bytes. Zeros fill in.
constexpr std::array<uint8_t, 48> MakeShiftTable() {
  std::array<uint8_t, 48> t{};
  for (int i = 0; i < 16; ++i) {
    t[i] = 0x80;
    t[16 + i] = static_cast<uint8_t>(i);
    t[32 + i] = 0x80;
  }
  return t;
}
alignas(16) constexpr std::array<uint8_t, 48> kShiftTable = MakeShiftTable();

}  // namespace

uint32_t Crc32UpdateTable(uint32_t state, const void* data, size_t length) {
  return TableUpdate(state, static_cast<const uint8_t*>(data), length);
}

#if UROCE_HAVE_X86_CLMUL

#define UROCE_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

namespace {

UROCE_CLMUL_TARGET inline __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

UROCE_CLMUL_TARGET inline __m128i Constants(const FoldConstants& k) {
  return _mm_load_si128(reinterpret_cast<const __m128i*>(&k));
}

// Block i > 0 of a message that gets z zero bytes in front (see
// ClmulUpdate): the 16 bytes at message offset 16 i - z, ORed with the mask
// there if the mask reaches that far. Block 1 also takes `carry`, its share
// of the starting register.
template <bool kMasked>
struct Blocks {
  const uint8_t* p;
  const uint8_t* mask;
  size_t mask_length;
  size_t z;
  __m128i carry;

  UROCE_CLMUL_TARGET __m128i operator[](size_t i) const {
    const size_t offset = 16 * i - z;
    __m128i b = Load128(p + offset);
    if (kMasked && offset < mask_length) b = _mm_or_si128(b, Load128(mask + offset));
    if (i == 1) b = _mm_xor_si128(b, carry);
    return b;
  }
  // Blocks the mask and the carry no longer reach.
  UROCE_CLMUL_TARGET __m128i Plain(size_t i) const { return Load128(p + 16 * i - z); }
  bool IsPlain(size_t i) const { return i > 1 && (!kMasked || 16 * i - z >= mask_length); }
};

// r * x^distance, with `k` made by FoldBy(distance).
UROCE_CLMUL_TARGET inline __m128i Forward(__m128i r, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(r, k, 0x00), _mm_clmulepi64_si128(r, k, 0x11));
}

// (A * x^32) mod P for the polynomial A held in `r`, as a reflected 32-bit
// CRC register.
UROCE_CLMUL_TARGET inline uint32_t Reduce(__m128i r) {
  const __m128i k = _mm_set_epi64x(static_cast<long long>(kReduce64), static_cast<long long>(kReduce96));
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  // 128 -> 96 bits: A = A_hi x^64 + A_lo, so A x^32 = A_hi x^96 + A_lo x^32.
  // A_hi (low lane) times x^95 mod P lands in bits 32..127; A_lo x^32 is the
  // high lane moved down to bits 32..95.
  __m128i x = _mm_clmulepi64_si128(r, k, 0x00);
  x = _mm_xor_si128(x, _mm_slli_si128(_mm_srli_si128(r, 8), 4));
  // 96 -> 64 bits: the top 32 coefficients (bits 32..63) times x^63 mod P
  // land in the high lane, beside the 64 coefficients already there.
  __m128i y = _mm_clmulepi64_si128(x, k, 0x10);
  y = _mm_xor_si128(y, _mm_slli_si128(_mm_srli_si128(x, 8), 8));
  // Barrett on S = S_hi x^32 + S_lo (the high lane, moved to the low lane):
  // q = floor(S_hi mu / x^32) comes out in bits 0..31, and
  // S mod P = S_lo + (q P mod x^32) in bits 32..63.
  const __m128i barrett = _mm_set_epi64x(static_cast<long long>(kBarrettPoly), static_cast<long long>(kBarrettMu));
  const __m128i s = _mm_srli_si128(y, 8);
  __m128i q = _mm_clmulepi64_si128(_mm_and_si128(s, low32), barrett, 0x00);
  q = _mm_clmulepi64_si128(_mm_and_si128(q, low32), barrett, 0x10);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(s, q), 1));
}

// With ClmulUpdate alone, at 1 MiB the ICRC is a fifth of the receiver's time
// (a frame's payload is read once to place it and once more for its CRC). With
// VPCLMULQDQ (AVX-512) one instruction folds four 16-byte lanes: the four
// 128-bit registers of ClmulUpdate's bulk loop become the four lanes of one
// 512-bit register, and four of those take 256 bytes a step. The lanes keep
// ClmulUpdate's streams (lane j of register m: blocks i + 4m + j, mod 16),
// so after the loop the registers fold onto the last four blocks and hand
// ClmulUpdate back the four registers it would have had, at a later i.
#define UROCE_VPCLMUL_TARGET __attribute__((target("pclmul,sse4.1,avx512f,vpclmulqdq")))
// These helpers pass 512-bit vectors among themselves only (all compiled for
// the same target, internal to this file): the psABI note about callers
// without AVX-512 does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

UROCE_VPCLMUL_TARGET inline __m512i Broadcast(const FoldConstants& k) {
  return _mm512_maskz_broadcast_i32x4(0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(&k)));
}

UROCE_VPCLMUL_TARGET inline __m512i Forward512(__m512i r, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(r, k, 0x00), _mm512_clmulepi64_epi128(r, k, 0x11));
}

// Blocks `block`..`block` + 3 of a message with z zero bytes in front.
UROCE_VPCLMUL_TARGET inline __m512i Load4Blocks(const uint8_t* p, size_t z, size_t block) {
  return _mm512_loadu_si512(p + 16 * block - z);
}

// Blocks i.. of the message (z zero bytes in front, as in ClmulUpdate),
// while at least 16 are left; `r` holds the four registers (streams of
// blocks i - 4 + j folded so far) and gets them back for the new i, which
// it returns. blocks - i >= 16 on entry; no block before i is read.
UROCE_VPCLMUL_TARGET __attribute__((noinline)) size_t WideFold(const uint8_t* p, size_t z, size_t i, size_t blocks,
                                                               __m128i r[4]) {
  // The maskz forms: GCC 12's unmasked ones start from an "undefined"
  // register that -Werror=uninitialized rejects.
  __m512i state = _mm512_zextsi128_si512(r[0]);
  state = _mm512_maskz_inserti32x4(0xFFFF, state, r[1], 1);
  state = _mm512_maskz_inserti32x4(0xFFFF, state, r[2], 2);
  state = _mm512_maskz_inserti32x4(0xFFFF, state, r[3], 3);
  __m512i a0 = _mm512_xor_si512(Forward512(state, Broadcast(kFold4Blocks)), Load4Blocks(p, z, i));
  __m512i a1 = Load4Blocks(p, z, i + 4);
  __m512i a2 = Load4Blocks(p, z, i + 8);
  __m512i a3 = Load4Blocks(p, z, i + 12);
  i += 16;
  const __m512i k16 = Broadcast(kFold16Blocks);
  while (blocks - i >= 16) {
    a0 = _mm512_xor_si512(Forward512(a0, k16), Load4Blocks(p, z, i));
    a1 = _mm512_xor_si512(Forward512(a1, k16), Load4Blocks(p, z, i + 4));
    a2 = _mm512_xor_si512(Forward512(a2, k16), Load4Blocks(p, z, i + 8));
    a3 = _mm512_xor_si512(Forward512(a3, k16), Load4Blocks(p, z, i + 12));
    i += 16;
  }
  __m512i s = _mm512_xor_si512(Forward512(a0, Broadcast(kFold12Blocks)), Forward512(a1, Broadcast(kFold8Blocks)));
  s = _mm512_xor_si512(s, Forward512(a2, Broadcast(kFold4Blocks)));
  s = _mm512_xor_si512(s, a3);
  r[0] = _mm512_maskz_extracti32x4_epi32(0xF, s, 0);
  r[1] = _mm512_maskz_extracti32x4_epi32(0xF, s, 1);
  r[2] = _mm512_maskz_extracti32x4_epi32(0xF, s, 2);
  r[3] = _mm512_maskz_extracti32x4_epi32(0xF, s, 3);
  return i;
}
#pragma GCC diagnostic pop

// Below this many blocks the 128-bit loop finishes sooner than the switch
// to 512-bit registers and back pays for.
constexpr size_t kWideMinBlocks = 32;

// The folding CRC with (kMasked) an OR mask over the first mask_length
// bytes (at most kMaxMaskedHeaderBytes; `mask` holds kMaskBufferBytes bytes,
// zero past mask_length). length >= 16.
//
// The message is processed as whole 16-byte blocks ending exactly at its
// end: a length that is not a multiple of 16 gets z zero bytes in front.
// Leading zeros leave a CRC unchanged once the starting register is XORed
// into the message's first four bytes (which is what a CRC register is), so
// there is no tail to finish byte by byte. Those four bytes sit at padded
// offsets z..z+3, which reach into block 1 when z > 12: `carry` is that part.
// `wide`: WideFold takes the bulk (only where Crc32VpclmulAvailable()).
template <bool kMasked>
UROCE_CLMUL_TARGET uint32_t ClmulUpdate(uint32_t state, const uint8_t* p, size_t length, const uint8_t* mask,
                                        size_t mask_length, bool wide) {
  const size_t z = (16 - (length & 15)) & 15;
  const size_t blocks = (length + z) / 16;
  const __m128i start = _mm_cvtsi32_si128(static_cast<int>(state));
  __m128i first = Load128(p);
  if (kMasked) first = _mm_or_si128(first, Load128(mask));
  first = _mm_xor_si128(first, start);
  __m128i carry = _mm_setzero_si128();
  if (z != 0) {
    carry = _mm_shuffle_epi8(start, Load128(kShiftTable.data() + 32 - z));
    first = _mm_shuffle_epi8(first, Load128(kShiftTable.data() + 16 - z));
  }
  const Blocks<kMasked> block{p, mask, mask_length, z, carry};

  __m128i r;
  if (blocks < 4) {
    // Every block folds straight onto the last one: independent multiplies.
    r = first;
    if (blocks == 2) {
      r = _mm_xor_si128(Forward(r, Constants(kFoldBlocks[1])), block[1]);
    } else if (blocks == 3) {
      r = _mm_xor_si128(Forward(r, Constants(kFoldBlocks[2])), Forward(block[1], Constants(kFoldBlocks[1])));
      r = _mm_xor_si128(r, block[2]);
    }
  } else {
    // Four registers, 64 bytes a step, hide the multiplier's latency; then
    // the four registers and the 0..3 blocks left fold onto the last block,
    // all at once.
    const __m128i k4 = Constants(kFold4Blocks);
    __m128i r0 = first, r1 = block[1], r2 = block[2], r3 = block[3];
    size_t i = 4;
    while (blocks - i >= 4 && !block.IsPlain(i)) {
      r0 = _mm_xor_si128(Forward(r0, k4), block[i]);
      r1 = _mm_xor_si128(Forward(r1, k4), block[i + 1]);
      r2 = _mm_xor_si128(Forward(r2, k4), block[i + 2]);
      r3 = _mm_xor_si128(Forward(r3, k4), block[i + 3]);
      i += 4;
    }
    if (wide && blocks - i >= kWideMinBlocks) {
      __m128i regs[4] = {r0, r1, r2, r3};
      i = WideFold(p, z, i, blocks, regs);
      r0 = regs[0];
      r1 = regs[1];
      r2 = regs[2];
      r3 = regs[3];
    }
    while (blocks - i >= 4) {  // the hot loop: bulk payload
      r0 = _mm_xor_si128(Forward(r0, k4), block.Plain(i));
      r1 = _mm_xor_si128(Forward(r1, k4), block.Plain(i + 1));
      r2 = _mm_xor_si128(Forward(r2, k4), block.Plain(i + 2));
      r3 = _mm_xor_si128(Forward(r3, k4), block.Plain(i + 3));
      i += 4;
    }
    const size_t left = blocks - i;  // 0..3
    r = Forward(r0, Constants(kFoldBlocks[3 + left]));
    r = _mm_xor_si128(r, Forward(r1, Constants(kFoldBlocks[2 + left])));
    r = _mm_xor_si128(r, Forward(r2, Constants(kFoldBlocks[1 + left])));
    if (left == 0) {
      r = _mm_xor_si128(r, r3);
    } else {
      r = _mm_xor_si128(r, Forward(r3, Constants(kFoldBlocks[left])));
      for (size_t j = 0; j + 1 < left; ++j) {
        r = _mm_xor_si128(r, Forward(block[i + j], Constants(kFoldBlocks[left - 1 - j])));
      }
      r = _mm_xor_si128(r, block[blocks - 1]);
    }
  }
  return Reduce(r);
}

}  // namespace

UROCE_CLMUL_TARGET uint32_t Crc32UpdateClmul(uint32_t state, const void* data, size_t length) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  // Below one block there is nothing to fold; the table is quicker.
  if (length < 16) return TableUpdate(state, p, length);
  return ClmulUpdate<false>(state, p, length, nullptr, 0, false);
}

uint32_t Crc32UpdateVpclmul(uint32_t state, const void* data, size_t length) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (length < 16) return TableUpdate(state, p, length);
  return ClmulUpdate<false>(state, p, length, nullptr, 0, true);
}

bool Crc32ClmulAvailable() {
  static const bool available = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return available;
}

namespace {
// CPUID leaf 7: VPCLMULQDQ is ECX bit 10. __builtin_cpu_supports("avx512f")
// also says the OS saves the 512-bit registers (XGETBV).
bool DetectVpclmul() {
  if (!Crc32ClmulAvailable() || !__builtin_cpu_supports("avx512f")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 10)) != 0;
}
}  // namespace

bool Crc32VpclmulAvailable() {
  static const bool available = DetectVpclmul();
  return available;
}

#else  // !UROCE_HAVE_X86_CLMUL

uint32_t Crc32UpdateClmul(uint32_t state, const void* data, size_t length) {
  return Crc32UpdateTable(state, data, length);
}
uint32_t Crc32UpdateVpclmul(uint32_t state, const void* data, size_t length) {
  return Crc32UpdateTable(state, data, length);
}
bool Crc32ClmulAvailable() { return false; }
bool Crc32VpclmulAvailable() { return false; }

#endif

uint32_t Crc32Update(uint32_t state, const void* data, size_t length) {
  if (Crc32VpclmulAvailable()) return Crc32UpdateVpclmul(state, data, length);
  return Crc32ClmulAvailable() ? Crc32UpdateClmul(state, data, length) : Crc32UpdateTable(state, data, length);
}

const char* Crc32ImplementationName() {
  return Crc32VpclmulAvailable() ? "vpclmulqdq" : Crc32ClmulAvailable() ? "pclmul" : "table";
}

namespace {

// The OR mask that turns an IP header, UDP header and BTH into what the ICRC
// covers (see icrc.h). Returns the length to mask: through BTH byte 4.
constexpr size_t MakeIcrcMask(size_t ip_header_bytes, IpVersion version, OrMask& mask) {
  if (version == IpVersion::kIpv4) {
    mask[offsetof(Ipv4Header, tos)] = 0xFF;
    mask[offsetof(Ipv4Header, ttl)] = 0xFF;
    mask[offsetof(Ipv4Header, header_checksum)] = 0xFF;
    mask[offsetof(Ipv4Header, header_checksum) + 1] = 0xFF;
  } else {
    // Traffic class and flow label (all of the first word but the version).
    mask[0] = 0x0F;
    mask[1] = mask[2] = mask[3] = 0xFF;
    mask[offsetof(Ipv6Header, hop_limit)] = 0xFF;
  }
  const size_t udp = ip_header_bytes;
  mask[udp + offsetof(UdpHeader, checksum)] = 0xFF;
  mask[udp + offsetof(UdpHeader, checksum) + 1] = 0xFF;
  const size_t bth = udp + sizeof(UdpHeader);
  mask[bth + offsetof(BthHeader, reserved_byte4)] = 0xFF;
  return bth + offsetof(BthHeader, reserved_byte4) + 1;
}

struct IcrcMask {
  OrMask bytes{};
  size_t length = 0;
};

constexpr IcrcMask MakeIcrcMask(size_t ip_header_bytes, IpVersion version) {
  IcrcMask m;
  m.length = MakeIcrcMask(ip_header_bytes, version, m.bytes);
  return m;
}

// The two masks every packet without IPv4 options uses, made once.
constexpr IcrcMask kIpv4Mask = MakeIcrcMask(sizeof(Ipv4Header), IpVersion::kIpv4);
constexpr IcrcMask kIpv6Mask = MakeIcrcMask(sizeof(Ipv6Header), IpVersion::kIpv6);

uint32_t MaskedUpdateWith(uint32_t state, const uint8_t* ip_header, size_t length, const IcrcMask& mask,
                          bool allow_clmul) {
#if UROCE_HAVE_X86_CLMUL
  if (allow_clmul && length >= 16 && Crc32ClmulAvailable()) {
    return ClmulUpdate<true>(state, ip_header, length, mask.bytes.data(), mask.length, Crc32VpclmulAvailable());
  }
#endif
  return TableUpdateMasked(state, ip_header, length, mask.bytes.data(), mask.length);
}

// IPv4 with options is rare; it builds its mask here, off the common path.
__attribute__((noinline)) uint32_t MaskedUpdateWithOptions(uint32_t state, const uint8_t* ip_header,
                                                           size_t ip_header_bytes, size_t length, bool allow_clmul) {
  const IcrcMask mask = MakeIcrcMask(ip_header_bytes, IpVersion::kIpv4);
  return MaskedUpdateWith(state, ip_header, length, mask, allow_clmul);
}

uint32_t MaskedUpdate(uint32_t state, const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version,
                      size_t length, bool allow_clmul = true) {
  if (version == IpVersion::kIpv6) return MaskedUpdateWith(state, ip_header, length, kIpv6Mask, allow_clmul);
  if (ip_header_bytes == sizeof(Ipv4Header)) {
    return MaskedUpdateWith(state, ip_header, length, kIpv4Mask, allow_clmul);
  }
  return MaskedUpdateWithOptions(state, ip_header, ip_header_bytes, length, allow_clmul);
}

}  // namespace

void IcrcAccumulator::AddMaskedHeaders(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version) {
  state_ = MaskedUpdate(state_, ip_header, ip_header_bytes, version,
                        ip_header_bytes + sizeof(UdpHeader) + sizeof(BthHeader));
}

uint32_t ComputeIcrc(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version, size_t covered_bytes) {
  return ~MaskedUpdate(kIcrcSeed, ip_header, ip_header_bytes, version, covered_bytes);
}

uint32_t ComputeIcrcTable(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version,
                          size_t covered_bytes) {
  return ~MaskedUpdate(kIcrcSeed, ip_header, ip_header_bytes, version, covered_bytes, /*allow_clmul=*/false);
}

}  // namespace uroce::transport
