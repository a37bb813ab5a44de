// The RoCEv2 invariant CRC (ICRC), IBTA Vol. 1 7.8.1 and Annex A17.3.3.
//
// The ICRC is the ordinary reflected CRC-32 of Ethernet and zlib (polynomial
// 0x04C11DB7, bit-reflected 0xEDB88320; not CRC-32C) computed over:
//   - eight bytes of 0xFF, standing in for the InfiniBand LRH that RoCEv2
//     does not carry (A17.3.3),
//   - the IP header, the UDP header, the BTH and everything after it up to
//     the ICRC, with the fields that routers and switches may change taken as
//     all ones: IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow
//     label and hop limit; the UDP checksum; BTH byte 4 (FECN/BECN/reserved).
// The Ethernet header is not covered. The result is inverted and stored
// least-significant byte first. Linux's drivers/infiniband/sw/rxe/rxe_icrc.c
// is the reference implementation this agrees with.
//
// The CRC engine has two implementations with identical results: a folding
// one that multiplies carry-less (PCLMULQDQ; Intel, "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ Instruction", 2009), chosen at run time
// when the CPU has it, and a portable slice-by-8 table one.
//
// Fast path: no allocation, no lock, no system call. Thread-safety: pure
// functions and value types; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"  // IpVersion

namespace uroce::transport {

// --- CRC-32 engine -----------------------------------------------------------
// `state` is the raw shift register: no inversion on the way in or out. The
// Ethernet CRC of a buffer is ~Crc32Update(0xFFFFFFFF, buffer).
uint32_t Crc32Update(uint32_t state, const void* data, size_t length);

// The implementations, for tests and benchmarks. Crc32UpdateClmul (128-bit
// PCLMULQDQ) may be called only when Crc32ClmulAvailable(),
// Crc32UpdateVpclmul (the same with 512-bit VPCLMULQDQ for the bulk of
// long inputs) only when Crc32VpclmulAvailable().
uint32_t Crc32UpdateTable(uint32_t state, const void* data, size_t length);
uint32_t Crc32UpdateClmul(uint32_t state, const void* data, size_t length);
uint32_t Crc32UpdateVpclmul(uint32_t state, const void* data, size_t length);
bool Crc32ClmulAvailable();
bool Crc32VpclmulAvailable();
// "vpclmulqdq", "pclmul" or "table": what Crc32Update uses on this machine.
const char* Crc32ImplementationName();

// --- ICRC ----------------------------------------------------------------------

// The CRC register after eight bytes of 0xFF from the usual all-ones start
// (A17.3.3's stand-in for the LRH). icrc.cc checks this value as it compiles.
constexpr uint32_t kIcrcSeed = 0xDEBB20E3;

// The most bytes AddMaskedHeaders reads: an IPv4 header with the largest
// options (60 bytes), UDP (8) and BTH (12).
constexpr size_t kMaxMaskedHeaderBytes = 60 + 8 + 12;

// Computes an ICRC in pieces, in frame order, so that a packet can be
// checksummed while it is written (headers, then payload copied from
// registered memory, then the pad) without a staging buffer.
class IcrcAccumulator {
 public:
  // Adds the IP header (`ip_header_bytes`: 20 plus IPv4 options, or 40), the
  // UDP header and the BTH that follow it, with the variant fields taken as
  // all ones. Reads exactly ip_header_bytes + 20 bytes, never writes them.
  // ip_header_bytes must be at most 60.
  void AddMaskedHeaders(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version);

  // Adds bytes that are covered as they are (extension headers, payload, pad).
  void Add(const void* data, size_t length) { state_ = Crc32Update(state_, data, length); }

  // The ICRC of what was added: store it with StoreLe32 (wire_types.h).
  uint32_t Finish() const { return ~state_; }

 private:
  uint32_t state_ = kIcrcSeed;
};

// The ICRC of a packet whose IP header starts at `ip_header` and whose
// covered part (IP header through the last pad byte, the ICRC excluded) is
// `covered_bytes` long. Reads only those bytes.
uint32_t ComputeIcrc(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version, size_t covered_bytes);

// ComputeIcrc on the portable table implementation, whatever the CPU has
// (for tests and benchmarks).
uint32_t ComputeIcrcTable(const uint8_t* ip_header, size_t ip_header_bytes, IpVersion version,
                          size_t covered_bytes);

}  // namespace uroce::transport
