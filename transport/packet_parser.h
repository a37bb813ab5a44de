// The RoCEv2 packet parser: any byte sequence in, either a decoded view of a
// RoCEv2 frame or the specific reason it is not one.
//
// The parser trusts nothing it reads: every length is checked before the
// bytes it announces are touched, so it never reads outside [frame,
// frame + length), whatever the bytes say. Fast path: no allocation, no
// lock, no system call; the view points into the caller's frame.
//
// Thread-safety: pure functions; any thread, on frames no one writes
// meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"
#include "transport/opcode.h"
#include "transport/packet_fields.h"

struct rte_mbuf;

namespace uroce::transport {

enum class ParseError : uint8_t {
  kOk = 0,
  // The buffer ends before a header, or before the end of the IP packet the
  // IP header announces.
  kTruncated,
  // Not a RoCEv2 frame: not IPv4 or IPv6, not UDP, not to port 4791, a
  // version nibble that disagrees with the EtherType, an IPv4 fragment, or
  // IPv6 extension headers before UDP.
  kNotRoce,
  // IPv4 header length below 20 bytes, or an IP length too short for its
  // own header and a UDP header.
  kBadIpLength,
  // The IPv4 header checksum is wrong (ParseOptions::verify_ipv4_checksum).
  kBadIpChecksum,
  // The UDP length is not the IP payload length, or leaves no room for a
  // BTH and an ICRC.
  kBadUdpLength,
  // BTH TVer is not 0, the only transport header version (IBTA 9.2.4).
  kBadBthVersion,
  // An opcode that is reserved, or of a service uroce does not speak (RD, CNP).
  kUnknownOpcode,
  // The packet's length does not suit its opcode (IBTA 9.2, 9.7.3.1): the
  // extension headers do not fit; payload where the opcode carries none;
  // an empty First, Middle or Last packet; a length after the headers that
  // is not a multiple of 4.
  kBadLengthForOpcode,
  // PadCnt larger than the bytes after the headers, or padding on a packet
  // that may not end a message (IBTA 9.2.3, 9.7.3.1.3).
  kBadPadCount,
  // The ICRC does not match the packet (ParseOptions::verify_icrc).
  kBadIcrc,
  // The mbuf overload takes single-segment mbufs only.
  kMultiSegmentMbuf,
};

// "truncated", "not RoCE", "bad IP length", ...
const char* ParseErrorName(ParseError error);

struct ParseOptions {
  // The engine always verifies; `uroce dump` reports it.
  bool verify_icrc = true;
  bool verify_ipv4_checksum = true;
};

// A parsed frame. Offsets are from the first byte of the frame. On an error
// the view holds what was decoded before it (is_roce says whether the frame
// got as far as UDP port 4791; on kBadIcrc the fields are decoded as far
// as the frame allows, for tools like `uroce dump`).
struct PacketView {
  PacketFields fields;
  const OpcodeInfo* opcode = nullptr;  // set once the opcode is known to be valid

  const uint8_t* frame = nullptr;
  size_t frame_length = 0;        // as given, Ethernet padding included
  bool is_roce = false;           // IP + UDP to port 4791
  uint16_t ether_type = 0;        // after the VLAN tag, if any; 0 if the frame is too short to say
  uint8_t ip_protocol = 0;        // IPv4 protocol or IPv6 next header, once the IP header is read
  uint16_t l3_offset = 0;         // IP header
  uint16_t ip_header_bytes = 0;   // 20 + IPv4 options, or 40
  uint16_t udp_offset = 0;
  uint16_t bth_offset = 0;
  size_t packet_end = 0;          // just past the ICRC; Ethernet padding may follow

  const uint8_t* payload = nullptr;  // fields.payload_length bytes, then fields.bth.pad_count pad bytes

  uint32_t icrc_stored = 0;    // as the packet carries it (read least-significant byte first)
  uint32_t icrc_computed = 0;  // valid when icrc_checked
  bool icrc_checked = false;
  bool icrc_ok() const { return icrc_checked && icrc_stored == icrc_computed; }

  // Not the parser's: the engine's receiver sets it for a frame with
  // kBthPullDescriptor from a process whose memory it may read
  // (PeerMemory::PullSource); 0 for every other frame.
  uint32_t pull_source = 0;
  // Likewise for a staged chunk (kBthStagedChunk): the link it came by
  // (PeerMemory::LinkSource); 0 for every other frame.
  uint32_t staged_link = 0;
};

// Parses the frame at [frame, frame + length) into *view.
ParseError ParsePacket(const uint8_t* frame, size_t length, const ParseOptions& options, PacketView* view);

// Parses a single-segment mbuf (kMultiSegmentMbuf otherwise).
ParseError ParsePacket(const rte_mbuf* mbuf, const ParseOptions& options, PacketView* view);

// Parses a packet in the form it takes over a local link
// (transport/link_frame.h): the same view, with no Ethernet fields (zero),
// l3_offset, udp_offset and ip_header_bytes 0, bth_offset the link
// header's size, and no ICRC (icrc_checked false). kNotRoce: a link header
// that is not one (an IP version other than 4 or 6, reserved bytes not 0,
// an IPv4 address that is not ::ffff:a.b.c.d); kUnknownOpcode also for a
// UD opcode, which never goes in this form. Only for frames the port says
// came in this form (PeerMemory::LinkFrame).
ParseError ParseLinkFrame(const uint8_t* frame, size_t length, PacketView* view);
ParseError ParseLinkFrame(const rte_mbuf* mbuf, PacketView* view);

}  // namespace uroce::transport
