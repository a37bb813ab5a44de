// The RoCEv2 packet builder: writes Ethernet (+802.1Q), IPv4 or IPv6, UDP,
// the BTH and the opcode's extension headers, the pad and the ICRC, from a
// PacketFields, into a plain buffer or an rte_mbuf.
//
// The engine's form is split in two so that payload moves once, straight
// from registered memory into the frame:
//
//   PendingPacket p;
//   if (BeginPacket(fields, mbuf, &p) != BuildError::kOk) ...;  // headers written
//   memcpy(p.payload, source, p.payload_length);                // caller's copy (any number of pieces)
//   FinishPacket(p);                                            // pad + ICRC
//
// BuildPacket does all three for tests and tools.
//
// What is written: IPv4 total length and header checksum, UDP length, the
// UDP checksum as given (RoCEv2 senders leave it 0, as rxe does), BTH PadCnt
// from the payload length, zero pad bytes. Frames shorter than Ethernet's
// 60-byte minimum are not padded here (the NIC or PMD does that; the parser
// ignores such padding).
//
// Fast path: no allocation, no lock, no system call. Thread-safety: pure
// functions on the caller's buffers; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"
#include "transport/packet_fields.h"

struct rte_mbuf;

namespace uroce::transport {

enum class BuildError : uint8_t {
  kOk = 0,
  kUnknownOpcode,       // fields.bth.opcode is not in the opcode table
  kBadPayloadLength,    // the opcode's payload rule (IBTA 9.7.3.1) forbids this length
  kFieldOutOfRange,     // a value wider than its wire field (QPN, PSN, MSN, TVer, flow label, ...)
  kNotIpv4MappedGid,    // IPv4 with a GID that is not ::ffff:a.b.c.d
  kPacketTooLong,       // longer than an IP packet can be
  kBufferTooSmall,      // the buffer or the mbuf's tailroom cannot hold the frame
  kMultiSegmentMbuf,    // the mbuf overloads take single-segment mbufs only
};

// "unknown opcode", "bad payload length", ...
const char* BuildErrorName(BuildError error);

// A frame whose headers are written and whose payload the caller is to
// place. Plain data: copy it, keep it beside the frame.
struct PendingPacket {
  uint8_t* frame = nullptr;
  size_t frame_length = 0;      // the whole frame, ICRC included
  uint8_t* payload = nullptr;   // payload_length bytes go here
  uint32_t payload_length = 0;
  uint8_t pad_count = 0;        // zero bytes FinishPacket writes after the payload
  uint16_t l3_offset = 0;
  uint16_t ip_header_bytes = 0;
  IpVersion ip_version = IpVersion::kIpv4;
};

// The frame length BuildPacket would write for `fields`, or 0 if it would
// fail for any reason but the buffer.
size_t FrameLength(const PacketFields& fields);

// Checks `fields` and writes every header into buffer[0, capacity). The
// payload, pad and ICRC are left for the caller and FinishPacket.
BuildError BeginPacket(const PacketFields& fields, uint8_t* buffer, size_t capacity, PendingPacket* pending);

// As above, appending the frame to `mbuf` (which must be a single segment
// with the tailroom for it).
BuildError BeginPacket(const PacketFields& fields, rte_mbuf* mbuf, PendingPacket* pending);

// The bytes before the BTH that every packet of one path shares (Ethernet,
// VLAN, IP, UDP, with their lengths and the IPv4 checksum left to fill): a
// per-path header template. BeginPacket with a template copies them and
// writes only the lengths, the checksum (from the template's partial sum,
// RFC 1624) and the transport headers, instead of every field; it remakes
// the template when the packet's network fields are not the ones it was
// made from. The frame is byte for byte the one without it.
struct HeaderTemplate {
  static constexpr size_t kMaxBytes = sizeof(EthernetHeader) + sizeof(VlanTag) + sizeof(Ipv6Header) + sizeof(UdpHeader);
  PacketFields key;  // what it was made from (only the network fields count)
  uint8_t bytes[kMaxBytes] = {};
  uint8_t length = 0, l3 = 0, udp = 0;
  IpVersion ip_version = IpVersion::kIpv4;
  uint64_t ipv4_sum = 0;
  bool valid = false;
};

// As BeginPacket(fields, mbuf, pending), through `tmpl` (the caller's, one
// per path; any state, it is remade as needed).
BuildError BeginPacket(const PacketFields& fields, rte_mbuf* mbuf, PendingPacket* pending, HeaderTemplate* tmpl);

// Writes the pad and the ICRC once the payload is in place.
void FinishPacket(const PendingPacket& pending);
// The pad alone: for a frame that leaves in a form without an ICRC
// (transport/link_frame.h); its ICRC bytes are left as they are.
void FinishPacketWithoutIcrc(const PendingPacket& pending);

// Builds the whole frame, payload (fields.payload_length bytes; may be null
// when that is 0) included. On success *frame_length is the frame's length.
BuildError BuildPacket(const PacketFields& fields, const uint8_t* payload, uint8_t* buffer, size_t capacity,
                       size_t* frame_length);
BuildError BuildPacket(const PacketFields& fields, const uint8_t* payload, rte_mbuf* mbuf);

}  // namespace uroce::transport
