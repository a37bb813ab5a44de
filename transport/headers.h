// RoCEv2 wire headers (IBTA Vol. 1 Release 1.4 chapter 9 and Annex A17
// "RoCEv2"), and their decoded host-order forms.
//
// A *Header struct is the exact wire layout: byte-typed big-endian fields,
// alignment 1, a static_assert'ed size. Read one from a frame with
// ReadHeader<H>(p) and write one with WriteHeader(p, h); both go through
// memcpy, so a header may sit at any offset and no pointer into the frame is
// ever cast to a struct type.
//
// A *Fields struct is the same header decoded to host-order integers: what the
// builder takes and what the parser gives back, so that building the fields a
// parse returned reproduces the frame.
//
// Thread-safety: plain values; any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "transport/wire_types.h"

namespace uroce::transport {

// UDP destination port of RoCEv2, assigned by IANA (IBTA Annex A17.2.2).
constexpr uint16_t kRoceV2UdpPort = 4791;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr uint16_t kEtherTypeVlan = 0x8100;  // IEEE 802.1Q tag protocol identifier
constexpr uint8_t kIpProtocolUdp = 17;
// The default partition key: full member of the default partition (IBTA 10.9.1.2).
constexpr uint16_t kDefaultPkey = 0xFFFF;
// IPv4 "don't fragment" flag, in the flags / fragment offset field (RFC 791).
constexpr uint16_t kIpv4DontFragment = 0x4000;
constexpr uint16_t kIpv4MoreFragments = 0x2000;
constexpr uint16_t kIpv4FragmentOffsetMask = 0x1FFF;

enum class IpVersion : uint8_t { kIpv4 = 4, kIpv6 = 6 };

using MacAddress = std::array<uint8_t, 6>;
// A RoCEv2 GID is an IPv6 address; an IPv4 endpoint's GID is the IPv4-mapped
// address ::ffff:a.b.c.d (RFC 4291 2.5.5.2, IBTA A17.4.5.1).
using Gid = std::array<uint8_t, 16>;

// ::ffff:a.b.c.d for the IPv4 address in the four bytes at `ipv4` (wire order).
inline Gid Ipv4MappedGid(const uint8_t ipv4[4]) {
  Gid gid{};
  gid[10] = 0xFF;
  gid[11] = 0xFF;
  std::memcpy(gid.data() + 12, ipv4, 4);
  return gid;
}
// ::ffff:a.b.c.d for an IPv4 address in host order (a is the top byte).
inline Gid Ipv4MappedGid(uint32_t ipv4_host_order) {
  uint8_t b[4];
  StoreBe32(b, ipv4_host_order);
  return Ipv4MappedGid(b);
}
// Equal addresses, compared as words. std::array's == calls memcmp, which
// showed in per-frame profiles (the header template's check, a local link's
// routing and checks).
inline bool SameGid(const Gid& a, const Gid& b) {
  uint64_t x[2], y[2];
  std::memcpy(x, a.data(), sizeof(x));
  std::memcpy(y, b.data(), sizeof(y));
  return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}
// The six bytes at `a` and at `b` (a MAC address in a frame or a MacAddress).
inline bool SameMac(const uint8_t* a, const uint8_t* b) {
  uint32_t x4, y4;
  uint16_t x2, y2;
  std::memcpy(&x4, a, 4);
  std::memcpy(&y4, b, 4);
  std::memcpy(&x2, a + 4, 2);
  std::memcpy(&y2, b + 4, 2);
  return ((x4 ^ y4) | static_cast<uint32_t>(x2 ^ y2)) == 0;
}
inline bool IsIpv4MappedGid(const Gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(gid.data(), kPrefix, sizeof(kPrefix)) == 0;
}

// The index of the first GID in `gids` of the IP version of `peer`, or
// nullopt if there is none. A RoCEv2 packet's source and destination are of
// one IP version (IBTA A17.4.5.1): IPv4 goes out from an IPv4-mapped GID.
inline std::optional<size_t> SourceGidFor(const std::vector<Gid>& gids, const Gid& peer) {
  const bool v4 = IsIpv4MappedGid(peer);
  for (size_t i = 0; i < gids.size(); ++i) {
    if (IsIpv4MappedGid(gids[i]) == v4) return i;
  }
  return std::nullopt;
}

// --- Wire layouts ---------------------------------------------------------

struct EthernetHeader {
  uint8_t dst[6];
  uint8_t src[6];
  Be16 ether_type;
};

// An IEEE 802.1Q tag as it follows an EthernetHeader whose ether_type is
// kEtherTypeVlan: the tag control information (PCP 3 bits, DEI 1, VID 12) and
// the ether_type of what comes next.
struct VlanTag {
  Be16 tci;
  Be16 ether_type;
};

// RFC 791. uroce writes no options; the parser accepts them (the ICRC covers
// them like the rest of the IP header).
struct Ipv4Header {
  uint8_t version_ihl;  // version 4 in the top nibble, header length in 32-bit words below
  uint8_t tos;          // DSCP + ECN; taken as all ones by the ICRC
  Be16 total_length;
  Be16 identification;
  Be16 flags_fragment_offset;
  uint8_t ttl;  // taken as all ones by the ICRC
  uint8_t protocol;
  Be16 header_checksum;  // taken as all ones by the ICRC
  uint8_t src[4];
  uint8_t dst[4];
};

// RFC 8200. No extension headers: RoCEv2's UDP header follows directly.
struct Ipv6Header {
  Be32 version_class_flow;  // version 4 bits, traffic class 8, flow label 20; the last two are all ones for the ICRC
  Be16 payload_length;
  uint8_t next_header;
  uint8_t hop_limit;  // taken as all ones by the ICRC
  uint8_t src[16];
  uint8_t dst[16];
};

// A UD receive starts with the 40-byte Global Route Header, which RoCEv2
// fills with the IPv6 header, or with 20 zero bytes and the IPv4 header
// (IBTA A17.4.5.2; ibv_post_recv(3)).
inline constexpr uint32_t kGrhBytes = 40;
static_assert(sizeof(Ipv6Header) == kGrhBytes, "the GRH is an IPv6 header's size");

// RFC 768. RoCEv2 senders write checksum 0 (IBTA A17.4.2; rxe never fills it
// in); the ICRC takes it as all ones.
struct UdpHeader {
  Be16 src_port;
  Be16 dst_port;
  Be16 length;
  Be16 checksum;
};

// Base Transport Header, IBTA 9.2, figure 89.
struct BthHeader {
  uint8_t opcode;
  uint8_t se_m_pad_tver;  // SE bit 7, MigReq bit 6, PadCnt bits 5-4, TVer bits 3-0
  Be16 pkey;
  // Byte 4: reserved in IBTA 1.2; 1.3 puts the FECN and BECN congestion bits
  // here. Switches may rewrite it, so the ICRC takes it as all ones.
  uint8_t reserved_byte4;
  Be24 dest_qp;
  uint8_t ack_req_reserved7;  // AckReq bit 7, 7 reserved bits
  Be24 psn;
};

// RDMA Extended Transport Header, IBTA 9.3.3: RDMA WRITE First/Only and READ requests.
struct RethHeader {
  Be64 virtual_address;
  Be32 rkey;
  Be32 dma_length;
};

// ACK Extended Transport Header, IBTA 9.3.5: acknowledgements and READ responses.
struct AethHeader {
  uint8_t syndrome;  // IBTA 9.7.5.2.1, table 42
  Be24 msn;
};

// Atomic Extended Transport Header, IBTA 9.3.4: CmpSwap and FetchAdd requests.
struct AtomicEthHeader {
  Be64 virtual_address;
  Be32 rkey;
  Be64 swap_or_add_data;
  Be64 compare_data;
};

// Atomic Acknowledge Extended Transport Header, IBTA 9.3.6.
struct AtomicAckEthHeader {
  Be64 original_remote_data;
};

// Immediate Data Extended Transport Header, IBTA 9.3.7 (opaque 4 bytes,
// delivered to the receiver as they are).
struct ImmDtHeader {
  Be32 immediate_data;
};

// Invalidate Extended Transport Header, IBTA 9.3.8: SEND with Invalidate.
struct IethHeader {
  Be32 rkey;
};

// Datagram Extended Transport Header, IBTA 9.3.2: UD.
struct DethHeader {
  Be32 qkey;
  uint8_t reserved;
  Be24 src_qp;
};

// XRC Extended Transport Header (IBTA annex A14, XRC): 8 reserved bits,
// then the 24-bit number of the XRC SRQ the request is for.
struct XrcEthHeader {
  uint8_t reserved;
  Be24 srq_number;
};

static_assert(sizeof(EthernetHeader) == 14 && alignof(EthernetHeader) == 1);
static_assert(sizeof(VlanTag) == 4 && alignof(VlanTag) == 1);
static_assert(sizeof(Ipv4Header) == 20 && alignof(Ipv4Header) == 1);
static_assert(sizeof(Ipv6Header) == 40 && alignof(Ipv6Header) == 1);
static_assert(sizeof(UdpHeader) == 8 && alignof(UdpHeader) == 1);
static_assert(sizeof(BthHeader) == 12 && alignof(BthHeader) == 1);
static_assert(sizeof(RethHeader) == 16 && alignof(RethHeader) == 1);
static_assert(sizeof(AethHeader) == 4 && alignof(AethHeader) == 1);
static_assert(sizeof(AtomicEthHeader) == 28 && alignof(AtomicEthHeader) == 1);
static_assert(sizeof(AtomicAckEthHeader) == 8 && alignof(AtomicAckEthHeader) == 1);
static_assert(sizeof(ImmDtHeader) == 4 && alignof(ImmDtHeader) == 1);
static_assert(sizeof(IethHeader) == 4 && alignof(IethHeader) == 1);
static_assert(sizeof(DethHeader) == 8 && alignof(DethHeader) == 1);
static_assert(sizeof(XrcEthHeader) == 4 && alignof(XrcEthHeader) == 1);

// The invariant CRC that ends every RoCEv2 packet (IBTA 7.8.1, A17.3.3).
constexpr size_t kIcrcBytes = 4;

// The RFC 791 header checksum: the one's complement of the one's complement
// sum of the header's 16-bit words, taken with the checksum field as zero.
// A received header is intact when this returns 0 over all of it (the field
// included).
inline uint16_t Ipv4HeaderChecksum(const uint8_t* header, size_t bytes) {
  // 32-bit words at a time: folding their sum's carries back in gives the
  // same one's complement sum as 16-bit words (RFC 1071 section 2).
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 4 <= bytes; i += 4) sum += LoadBe32(header + i);
  for (; i + 2 <= bytes; i += 2) sum += LoadBe16(header + i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

template <typename Header>
inline Header ReadHeader(const uint8_t* p) {
  Header h;
  std::memcpy(&h, p, sizeof(Header));
  return h;
}
template <typename Header>
inline void WriteHeader(uint8_t* p, const Header& h) {
  std::memcpy(p, &h, sizeof(Header));
}

// ECN, the two low bits of the IPv4 TOS and the IPv6 traffic class
// (RFC 3168 section 5): ECT(0) on the packets of a QP whose congestion
// control reads ECN, CE where a congested queue marked one.
constexpr uint8_t kEcnMask = 0x03;
constexpr uint8_t kEcnEct0 = 0x02;
constexpr uint8_t kEcnCe = 0x03;

// BTH byte 4's BECN bit (IBTA vol. 1 annex A17.9.3, RoCEv2): set in a CNP.
constexpr uint8_t kBthBecn = 0x40;

// --- Decoded, host-order forms -----------------------------------------------

// uroce's selective retransmission (docs/transport.md): the lowest of the
// BTH's 7 reserved bits after AckReq, which a standard receiver ignores and
// a standard sender leaves 0 (IBTA vol. 1, 9.2). On a request: the requester
// takes NAKs as "resend this PSN only"; on an acknowledgement or a response:
// the responder holds packets that arrive after a gap.
constexpr uint8_t kBthSelectiveRetransmission = 0x01;

struct BthFields {
  uint8_t opcode = 0;
  bool solicited_event = false;
  bool migration_request = false;
  // Set by the builder from the payload length (IBTA 9.2.3); the parser reports
  // what the packet says.
  uint8_t pad_count = 0;
  uint8_t transport_version = 0;  // IBTA 9.2.4: 0 is the only version
  uint16_t pkey = kDefaultPkey;
  uint8_t reserved_byte4 = 0;  // FECN/BECN + reserved; see BthHeader
  uint32_t dest_qp = 0;        // 24 bits
  bool ack_request = false;
  uint8_t reserved7 = 0;  // 7 bits
  Psn psn;
};

struct RethFields {
  uint64_t virtual_address = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
};

// AETH syndrome (IBTA 9.7.5.2.1, table 42): bits 6-5 say what kind of
// acknowledgement this is; bits 4-0 are the credit count (ACK), the RNR timer
// (RNR NAK) or the NAK code.
enum class AethKind : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };
// NAK codes (syndrome bits 4-0 when the kind is kNak), IBTA table 43.
enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};
// Credit count 31 (0x1F) means "credits invalid" (IBTA 9.7.7.2.4).
constexpr uint8_t kAethInvalidCredits = 0x1F;

struct AethFields {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits

  AethKind kind() const { return static_cast<AethKind>((syndrome >> 5) & 3); }
  uint8_t value() const { return syndrome & 0x1F; }
  static uint8_t Syndrome(AethKind kind, uint8_t value) {
    return static_cast<uint8_t>((static_cast<uint8_t>(kind) << 5) | (value & 0x1F));
  }
};

struct AtomicEthFields {
  uint64_t virtual_address = 0;
  uint32_t rkey = 0;
  uint64_t swap_or_add_data = 0;
  uint64_t compare_data = 0;
};

struct AtomicAckEthFields {
  uint64_t original_remote_data = 0;
};

struct DethFields {
  uint32_t qkey = 0;
  uint8_t reserved = 0;
  uint32_t src_qp = 0;  // 24 bits
};

// Decode* take the wire form; Encode* write it. Bit fields wider than the wire
// (a 32-bit QPN, say) are cut to the wire's width: validating them is the
// builder's job.
inline RethFields DecodeReth(const RethHeader& h) {
  return {h.virtual_address.load(), h.rkey.load(), h.dma_length.load()};
}
inline RethHeader EncodeReth(const RethFields& f) {
  RethHeader h;
  h.virtual_address.store(f.virtual_address);
  h.rkey.store(f.rkey);
  h.dma_length.store(f.dma_length);
  return h;
}
inline AethFields DecodeAeth(const AethHeader& h) { return {h.syndrome, h.msn.load()}; }
inline AethHeader EncodeAeth(const AethFields& f) {
  AethHeader h;
  h.syndrome = f.syndrome;
  h.msn.store(f.msn & 0xFFFFFF);
  return h;
}
inline AtomicEthFields DecodeAtomicEth(const AtomicEthHeader& h) {
  return {h.virtual_address.load(), h.rkey.load(), h.swap_or_add_data.load(), h.compare_data.load()};
}
inline AtomicEthHeader EncodeAtomicEth(const AtomicEthFields& f) {
  AtomicEthHeader h;
  h.virtual_address.store(f.virtual_address);
  h.rkey.store(f.rkey);
  h.swap_or_add_data.store(f.swap_or_add_data);
  h.compare_data.store(f.compare_data);
  return h;
}
inline AtomicAckEthFields DecodeAtomicAckEth(const AtomicAckEthHeader& h) {
  return {h.original_remote_data.load()};
}
inline AtomicAckEthHeader EncodeAtomicAckEth(const AtomicAckEthFields& f) {
  AtomicAckEthHeader h;
  h.original_remote_data.store(f.original_remote_data);
  return h;
}
inline DethFields DecodeDeth(const DethHeader& h) { return {h.qkey.load(), h.reserved, h.src_qp.load()}; }
inline DethHeader EncodeDeth(const DethFields& f) {
  DethHeader h;
  h.qkey.store(f.qkey);
  h.reserved = f.reserved;
  h.src_qp.store(f.src_qp & 0xFFFFFF);
  return h;
}

inline BthFields DecodeBth(const BthHeader& h) {
  BthFields f;
  f.opcode = h.opcode;
  f.solicited_event = (h.se_m_pad_tver & 0x80) != 0;
  f.migration_request = (h.se_m_pad_tver & 0x40) != 0;
  f.pad_count = (h.se_m_pad_tver >> 4) & 3;
  f.transport_version = h.se_m_pad_tver & 0x0F;
  f.pkey = h.pkey.load();
  f.reserved_byte4 = h.reserved_byte4;
  f.dest_qp = h.dest_qp.load();
  f.ack_request = (h.ack_req_reserved7 & 0x80) != 0;
  f.reserved7 = h.ack_req_reserved7 & 0x7F;
  f.psn = Psn(h.psn.load());
  return f;
}
inline BthHeader EncodeBth(const BthFields& f) {
  BthHeader h;
  h.opcode = f.opcode;
  h.se_m_pad_tver = static_cast<uint8_t>((f.solicited_event ? 0x80 : 0) | (f.migration_request ? 0x40 : 0) |
                                         ((f.pad_count & 3) << 4) | (f.transport_version & 0x0F));
  h.pkey.store(f.pkey);
  h.reserved_byte4 = f.reserved_byte4;
  h.dest_qp.store(f.dest_qp & 0xFFFFFF);
  h.ack_req_reserved7 = static_cast<uint8_t>((f.ack_request ? 0x80 : 0) | (f.reserved7 & 0x7F));
  h.psn.store(f.psn.value());
  return h;
}

}  // namespace uroce::transport
