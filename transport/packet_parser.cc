#include "transport/packet_parser.h"

#include <rte_mbuf.h>

#include "transport/icrc.h"
#include "transport/link_frame.h"
#include "transport/wire_types.h"

namespace uroce::transport {
namespace {

// Ethernet II and an optional 802.1Q tag. Fills the MACs and VLAN, sets
// *l3_offset and *ether_type.
ParseError ParseEthernet(const uint8_t* frame, size_t length, PacketView* view, size_t* l3_offset,
                         uint16_t* ether_type) {
  if (length < sizeof(EthernetHeader)) return ParseError::kTruncated;
  const auto eth = ReadHeader<EthernetHeader>(frame);
  std::memcpy(view->fields.dst_mac.data(), eth.dst, 6);
  std::memcpy(view->fields.src_mac.data(), eth.src, 6);
  *ether_type = eth.ether_type.load();
  *l3_offset = sizeof(EthernetHeader);
  if (*ether_type == kEtherTypeVlan) {
    if (length < sizeof(EthernetHeader) + sizeof(VlanTag)) return ParseError::kTruncated;
    const auto tag = ReadHeader<VlanTag>(frame + sizeof(EthernetHeader));
    view->fields.has_vlan = true;
    view->fields.vlan_tci = tag.tci.load();
    *ether_type = tag.ether_type.load();
    *l3_offset += sizeof(VlanTag);
  }
  view->ether_type = *ether_type;
  return ParseError::kOk;
}

// IPv4 (RFC 791). Sets *ip_end, the offset just past the IP packet.
// The header checksum is left for the caller to check once the frame is
// known to be RoCE, so that a damaged RoCE frame is counted as one.
ParseError ParseIpv4(const uint8_t* frame, size_t length, size_t l3, PacketView* view, size_t* ip_end) {
  if (length < l3 + sizeof(Ipv4Header)) return ParseError::kTruncated;
  const auto ip = ReadHeader<Ipv4Header>(frame + l3);
  if ((ip.version_ihl >> 4) != 4) return ParseError::kNotRoce;
  const size_t header_bytes = size_t{ip.version_ihl & 0x0Fu} * 4;
  if (header_bytes < sizeof(Ipv4Header)) return ParseError::kBadIpLength;
  if (length < l3 + header_bytes) return ParseError::kTruncated;
  const size_t total = ip.total_length.load();
  if (total < header_bytes + sizeof(UdpHeader)) return ParseError::kBadIpLength;
  if (length < l3 + total) return ParseError::kTruncated;

  PacketFields& f = view->fields;
  f.ip_version = IpVersion::kIpv4;
  f.traffic_class = ip.tos;
  f.hop_limit = ip.ttl;
  f.ipv4_identification = ip.identification.load();
  f.ipv4_flags_fragment = ip.flags_fragment_offset.load();
  f.src_gid = Ipv4MappedGid(ip.src);
  f.dst_gid = Ipv4MappedGid(ip.dst);
  view->ip_header_bytes = static_cast<uint16_t>(header_bytes);
  view->ip_protocol = ip.protocol;

  if (ip.protocol != kIpProtocolUdp) return ParseError::kNotRoce;
  // A fragment cannot be parsed on its own, and RoCEv2 never fragments.
  if (f.ipv4_flags_fragment & (kIpv4MoreFragments | kIpv4FragmentOffsetMask)) return ParseError::kNotRoce;
  *ip_end = l3 + total;
  return ParseError::kOk;
}

// IPv6 (RFC 8200): UDP must follow the fixed header directly.
ParseError ParseIpv6(const uint8_t* frame, size_t length, size_t l3, PacketView* view, size_t* ip_end) {
  if (length < l3 + sizeof(Ipv6Header)) return ParseError::kTruncated;
  const auto ip = ReadHeader<Ipv6Header>(frame + l3);
  const uint32_t first_word = ip.version_class_flow.load();
  if ((first_word >> 28) != 6) return ParseError::kNotRoce;
  PacketFields& f = view->fields;
  f.ip_version = IpVersion::kIpv6;
  f.traffic_class = static_cast<uint8_t>(first_word >> 20);
  f.ipv6_flow_label = first_word & 0xFFFFF;
  f.hop_limit = ip.hop_limit;
  std::memcpy(f.src_gid.data(), ip.src, 16);
  std::memcpy(f.dst_gid.data(), ip.dst, 16);
  view->ip_header_bytes = sizeof(Ipv6Header);
  view->ip_protocol = ip.next_header;
  if (ip.next_header != kIpProtocolUdp) return ParseError::kNotRoce;
  const size_t payload = ip.payload_length.load();
  if (payload < sizeof(UdpHeader)) return ParseError::kBadIpLength;  // also a jumbogram's 0
  if (length < l3 + sizeof(Ipv6Header) + payload) return ParseError::kTruncated;
  *ip_end = l3 + sizeof(Ipv6Header) + payload;
  return ParseError::kOk;
}

// Everything from the BTH on, in [bth, end) where `end` is where the ICRC
// starts. The caller has checked that a BTH fits.
ParseError ParseTransport(const uint8_t* frame, size_t bth, size_t end, PacketView* view) {
  PacketFields& f = view->fields;
  f.bth = DecodeBth(ReadHeader<BthHeader>(frame + bth));
  if (f.bth.transport_version != 0) return ParseError::kBadBthVersion;
  const OpcodeInfo& op = LookupOpcode(f.bth.opcode);
  if (!op.valid) return ParseError::kUnknownOpcode;
  view->opcode = &op;

  const size_t available = end - bth;
  if (available < op.header_bytes) return ParseError::kBadLengthForOpcode;
  const uint8_t* h = frame + bth;
  if (op.has(kXrcEth)) {
    // The number is only decoded here; whether it names an XRC SRQ of the
    // receiving QP's domain is the responder's check (SelectXrcSrq).
    const auto x = ReadHeader<XrcEthHeader>(h + op.xrceth_offset);
    f.xrceth_reserved = x.reserved;
    f.xrc_srqn = x.srq_number.load();
  }
  if (op.has(kDeth)) f.deth = DecodeDeth(ReadHeader<DethHeader>(h + op.deth_offset));
  if (op.has(kReth)) f.reth = DecodeReth(ReadHeader<RethHeader>(h + op.reth_offset));
  if (op.has(kAtomicEth)) f.atomic_eth = DecodeAtomicEth(ReadHeader<AtomicEthHeader>(h + op.atomic_eth_offset));
  if (op.has(kAeth)) f.aeth = DecodeAeth(ReadHeader<AethHeader>(h + op.aeth_offset));
  if (op.has(kAtomicAckEth)) {
    f.atomic_ack_eth = DecodeAtomicAckEth(ReadHeader<AtomicAckEthHeader>(h + op.atomic_ack_eth_offset));
  }
  if (op.has(kImmDt)) f.immediate_data = LoadBe32(h + op.immdt_offset);
  if (op.has(kIeth)) f.invalidate_rkey = LoadBe32(h + op.ieth_offset);

  // Payload and pad. Every header is a multiple of 4 bytes and so is a
  // whole packet (IBTA 9.2.3: the pad makes it so), hence so is what
  // follows the headers.
  const size_t payload_and_pad = available - op.header_bytes;
  view->payload = h + op.header_bytes;
  if (payload_and_pad % 4 != 0) return ParseError::kBadLengthForOpcode;
  const size_t pad = f.bth.pad_count;
  if (pad > payload_and_pad) return ParseError::kBadPadCount;
  f.payload_length = static_cast<uint32_t>(payload_and_pad - pad);
  switch (op.payload) {
    case PayloadRule::kNone:
      if (payload_and_pad != 0) return ParseError::kBadLengthForOpcode;
      break;
    case PayloadRule::kFullMtu:
      if (pad != 0) return ParseError::kBadPadCount;
      if (f.payload_length == 0) return ParseError::kBadLengthForOpcode;
      break;
    case PayloadRule::kOneToMtu:
      if (f.payload_length == 0) return ParseError::kBadLengthForOpcode;
      break;
    case PayloadRule::kZeroToMtu:
      break;
    case PayloadRule::kExactlyEight:  // ATOMIC WRITE: its 8 bytes, no pad
      if (pad != 0) return ParseError::kBadPadCount;
      if (f.payload_length != 8) return ParseError::kBadLengthForOpcode;
      break;
    case PayloadRule::kExactlySixteen:  // CNP: its 16 reserved bytes, no pad
      if (pad != 0) return ParseError::kBadPadCount;
      if (f.payload_length != 16) return ParseError::kBadLengthForOpcode;
      break;
  }
  return ParseError::kOk;
}

}  // namespace

const char* ParseErrorName(ParseError error) {
  switch (error) {
    case ParseError::kOk: return "ok";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kNotRoce: return "not RoCE";
    case ParseError::kBadIpLength: return "bad IP length";
    case ParseError::kBadIpChecksum: return "bad IPv4 header checksum";
    case ParseError::kBadUdpLength: return "bad UDP length";
    case ParseError::kBadBthVersion: return "bad BTH version";
    case ParseError::kUnknownOpcode: return "unknown opcode";
    case ParseError::kBadLengthForOpcode: return "length not valid for the opcode";
    case ParseError::kBadPadCount: return "bad pad count";
    case ParseError::kBadIcrc: return "bad ICRC";
    case ParseError::kMultiSegmentMbuf: return "multi-segment mbuf";
  }
  return "unknown error";
}

ParseError ParsePacket(const uint8_t* frame, size_t length, const ParseOptions& options, PacketView* view) {
  // One block copy: cheaper than building a fresh view field by field.
  static const PacketView kEmptyView{};
  *view = kEmptyView;
  view->frame = frame;
  view->frame_length = length;
  if (frame == nullptr) return ParseError::kTruncated;

  size_t l3 = 0;
  uint16_t ether_type = 0;
  ParseError e = ParseEthernet(frame, length, view, &l3, &ether_type);
  if (e != ParseError::kOk) return e;
  view->l3_offset = static_cast<uint16_t>(l3);

  size_t ip_end = 0;
  IpVersion version = IpVersion::kIpv4;
  if (ether_type == kEtherTypeIpv4) {
    version = IpVersion::kIpv4;
    e = ParseIpv4(frame, length, l3, view, &ip_end);
  } else if (ether_type == kEtherTypeIpv6) {
    version = IpVersion::kIpv6;
    e = ParseIpv6(frame, length, l3, view, &ip_end);
  } else {
    return ParseError::kNotRoce;
  }
  if (e != ParseError::kOk) return e;

  // UDP: the IP layer has checked that its 8 bytes lie within the packet.
  const size_t udp = l3 + view->ip_header_bytes;
  view->udp_offset = static_cast<uint16_t>(udp);
  const auto udp_header = ReadHeader<UdpHeader>(frame + udp);
  PacketFields& f = view->fields;
  f.udp_src_port = udp_header.src_port.load();
  f.udp_dst_port = udp_header.dst_port.load();
  f.udp_checksum = udp_header.checksum.load();
  if (f.udp_dst_port != kRoceV2UdpPort) return ParseError::kNotRoce;
  view->is_roce = true;
  if (version == IpVersion::kIpv4 && options.verify_ipv4_checksum &&
      Ipv4HeaderChecksum(frame + l3, view->ip_header_bytes) != 0) {
    return ParseError::kBadIpChecksum;
  }
  const size_t udp_length = udp_header.length.load();
  if (udp_length != ip_end - udp) return ParseError::kBadUdpLength;
  if (udp_length < sizeof(UdpHeader) + sizeof(BthHeader) + kIcrcBytes) return ParseError::kBadUdpLength;

  const size_t bth = udp + sizeof(UdpHeader);
  const size_t icrc_at = ip_end - kIcrcBytes;
  view->bth_offset = static_cast<uint16_t>(bth);
  view->packet_end = ip_end;
  view->icrc_stored = LoadLe32(frame + icrc_at);

  // The ICRC goes first: when a frame was corrupted on the way, "bad ICRC"
  // is the truth, whatever else its damaged headers seem to say.
  if (options.verify_icrc) {
    view->icrc_computed = ComputeIcrc(frame + l3, view->ip_header_bytes, version, icrc_at - l3);
    view->icrc_checked = true;
  }
  e = ParseTransport(frame, bth, icrc_at, view);
  if (view->icrc_checked && !view->icrc_ok()) return ParseError::kBadIcrc;
  return e;
}

ParseError ParseLinkFrame(const uint8_t* frame, size_t length, PacketView* view) {
  static const PacketView kEmptyView{};
  *view = kEmptyView;
  view->frame = frame;
  view->frame_length = length;
  if (frame == nullptr || length < kLinkHeaderBytes + sizeof(BthHeader)) return ParseError::kTruncated;
  PacketFields& f = view->fields;
  const uint8_t version = frame[0];
  if ((version != 4 && version != 6) || frame[3] != 0 || frame[6] != 0 || frame[7] != 0) {
    return ParseError::kNotRoce;
  }
  f.ip_version = version == 4 ? IpVersion::kIpv4 : IpVersion::kIpv6;
  f.traffic_class = frame[1];
  f.hop_limit = frame[2];
  f.udp_src_port = LoadBe16(frame + 4);
  std::memcpy(f.src_gid.data(), frame + kLinkSrcGidOffset, 16);
  std::memcpy(f.dst_gid.data(), frame + kLinkDstGidOffset, 16);
  // An IPv4 endpoint's address is only ever ::ffff:a.b.c.d.
  if (version == 4 && (!IsIpv4MappedGid(f.src_gid) || !IsIpv4MappedGid(f.dst_gid))) return ParseError::kNotRoce;
  view->is_roce = true;
  view->bth_offset = static_cast<uint16_t>(kLinkHeaderBytes);
  view->packet_end = length;
  // UD keeps the wire form (its GRH is the IP header): a UD opcode here is
  // one no link speaks.
  if (frame[kLinkHeaderBytes] >> 5 == 0x3) return ParseError::kUnknownOpcode;
  return ParseTransport(frame, kLinkHeaderBytes, length, view);
}

ParseError ParseLinkFrame(const rte_mbuf* mbuf, PacketView* view) {
  if (mbuf->nb_segs != 1 || mbuf->data_len != mbuf->pkt_len) {
    *view = PacketView{};
    return ParseError::kMultiSegmentMbuf;
  }
  return ParseLinkFrame(rte_pktmbuf_mtod(mbuf, const uint8_t*), mbuf->data_len, view);
}

ParseError ParsePacket(const rte_mbuf* mbuf, const ParseOptions& options, PacketView* view) {
  if (mbuf->nb_segs != 1 || mbuf->data_len != mbuf->pkt_len) {
    *view = PacketView{};
    return ParseError::kMultiSegmentMbuf;
  }
  return ParsePacket(rte_pktmbuf_mtod(mbuf, const uint8_t*), mbuf->data_len, options, view);
}

}  // namespace uroce::transport
