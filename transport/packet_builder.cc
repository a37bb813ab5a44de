#include "transport/packet_builder.h"

#include <rte_mbuf.h>

#include <cstring>

#include "transport/icrc.h"
#include "transport/opcode.h"
#include "transport/wire_types.h"

namespace uroce::transport {
namespace {

constexpr size_t kMaxIpPacket = 0xFFFF;

// Where everything goes in the frame, and the checks that make it valid.
struct Layout {
  const OpcodeInfo* op = nullptr;
  size_t l3 = 0;
  size_t ip_header_bytes = 0;
  size_t udp = 0;
  size_t bth = 0;
  size_t payload = 0;
  uint8_t pad = 0;
  size_t icrc = 0;
  size_t frame_length = 0;
};

bool PayloadLengthAllowed(PayloadRule rule, uint32_t length) {
  switch (rule) {
    case PayloadRule::kNone: return length == 0;
    // A whole path MTU: never empty, and never padded (IBTA 9.7.3.1.3).
    case PayloadRule::kFullMtu: return length > 0 && length % 4 == 0;
    case PayloadRule::kOneToMtu: return length > 0;
    case PayloadRule::kZeroToMtu: return true;
    case PayloadRule::kExactlyEight: return length == 8;
    case PayloadRule::kExactlySixteen: return length == 16;
  }
  return false;
}

BuildError Plan(const PacketFields& f, Layout* layout) {
  const OpcodeInfo& op = LookupOpcode(f.bth.opcode);
  if (!op.valid) return BuildError::kUnknownOpcode;
  if (!PayloadLengthAllowed(op.payload, f.payload_length)) return BuildError::kBadPayloadLength;

  constexpr uint32_t k24Bits = 0xFFFFFF;
  if (f.bth.dest_qp > k24Bits || f.bth.transport_version > 0x0F || f.bth.reserved7 > 0x7F) {
    return BuildError::kFieldOutOfRange;
  }
  if (op.has(kDeth) && f.deth.src_qp > k24Bits) return BuildError::kFieldOutOfRange;
  if (op.has(kXrcEth) && f.xrc_srqn > k24Bits) return BuildError::kFieldOutOfRange;
  if (op.has(kAeth) && f.aeth.msn > k24Bits) return BuildError::kFieldOutOfRange;

  layout->op = &op;
  layout->l3 = sizeof(EthernetHeader) + (f.has_vlan ? sizeof(VlanTag) : 0);
  if (f.ip_version == IpVersion::kIpv4) {
    if (!IsIpv4MappedGid(f.src_gid) || !IsIpv4MappedGid(f.dst_gid)) return BuildError::kNotIpv4MappedGid;
    layout->ip_header_bytes = sizeof(Ipv4Header);
  } else {
    if (f.ipv6_flow_label > 0xFFFFF) return BuildError::kFieldOutOfRange;
    layout->ip_header_bytes = sizeof(Ipv6Header);
  }
  layout->udp = layout->l3 + layout->ip_header_bytes;
  layout->bth = layout->udp + sizeof(UdpHeader);
  layout->payload = layout->bth + op.header_bytes;
  layout->pad = static_cast<uint8_t>((4 - f.payload_length % 4) % 4);
  layout->icrc = layout->payload + f.payload_length + layout->pad;
  layout->frame_length = layout->icrc + kIcrcBytes;
  if (layout->frame_length - layout->l3 > kMaxIpPacket) return BuildError::kPacketTooLong;
  return BuildError::kOk;
}

// Ethernet (and VLAN), IP and UDP: everything before the BTH.
void WriteNetworkHeaders(const PacketFields& f, const Layout& layout, uint8_t* frame) {
  EthernetHeader eth;
  std::memcpy(eth.dst, f.dst_mac.data(), 6);
  std::memcpy(eth.src, f.src_mac.data(), 6);
  eth.ether_type.store(f.has_vlan ? kEtherTypeVlan : (f.ip_version == IpVersion::kIpv4 ? kEtherTypeIpv4
                                                                                         : kEtherTypeIpv6));
  WriteHeader(frame, eth);
  if (f.has_vlan) {
    VlanTag tag;
    tag.tci.store(f.vlan_tci);
    tag.ether_type.store(f.ip_version == IpVersion::kIpv4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
    WriteHeader(frame + sizeof(EthernetHeader), tag);
  }

  const size_t ip_length = layout.frame_length - layout.l3;
  const size_t udp_length = layout.frame_length - layout.udp;
  if (f.ip_version == IpVersion::kIpv4) {
    Ipv4Header ip;
    ip.version_ihl = 0x45;  // version 4, five 32-bit words: no options
    ip.tos = f.traffic_class;
    ip.total_length.store(static_cast<uint16_t>(ip_length));
    ip.identification.store(f.ipv4_identification);
    ip.flags_fragment_offset.store(f.ipv4_flags_fragment);
    ip.ttl = f.hop_limit;
    ip.protocol = kIpProtocolUdp;
    ip.header_checksum.store(0);
    std::memcpy(ip.src, f.src_gid.data() + 12, 4);
    std::memcpy(ip.dst, f.dst_gid.data() + 12, 4);
    // Summed over the header still in registers, not read back from the frame.
    uint8_t bytes[sizeof(Ipv4Header)];
    std::memcpy(bytes, &ip, sizeof(ip));
    ip.header_checksum.store(Ipv4HeaderChecksum(bytes, sizeof(bytes)));
    WriteHeader(frame + layout.l3, ip);
  } else {
    Ipv6Header ip;
    ip.version_class_flow.store((6u << 28) | (uint32_t{f.traffic_class} << 20) | f.ipv6_flow_label);
    ip.payload_length.store(static_cast<uint16_t>(udp_length));
    ip.next_header = kIpProtocolUdp;
    ip.hop_limit = f.hop_limit;
    std::memcpy(ip.src, f.src_gid.data(), 16);
    std::memcpy(ip.dst, f.dst_gid.data(), 16);
    WriteHeader(frame + layout.l3, ip);
  }

  UdpHeader udp;
  udp.src_port.store(f.udp_src_port);
  udp.dst_port.store(f.udp_dst_port);
  udp.length.store(static_cast<uint16_t>(udp_length));
  udp.checksum.store(f.udp_checksum);
  WriteHeader(frame + layout.udp, udp);
}

// The BTH and the opcode's extension headers.
void WriteTransportHeaders(const PacketFields& f, const Layout& layout, uint8_t* frame) {
  BthFields bth = f.bth;
  bth.pad_count = layout.pad;
  uint8_t* h = frame + layout.bth;
  WriteHeader(h, EncodeBth(bth));
  const OpcodeInfo& op = *layout.op;
  if (op.has(kDeth)) WriteHeader(h + op.deth_offset, EncodeDeth(f.deth));
  if (op.has(kXrcEth)) {
    XrcEthHeader x{};
    x.reserved = f.xrceth_reserved;
    x.srq_number.store(f.xrc_srqn);
    WriteHeader(h + op.xrceth_offset, x);
  }
  if (op.has(kReth)) WriteHeader(h + op.reth_offset, EncodeReth(f.reth));
  if (op.has(kAtomicEth)) WriteHeader(h + op.atomic_eth_offset, EncodeAtomicEth(f.atomic_eth));
  if (op.has(kAeth)) WriteHeader(h + op.aeth_offset, EncodeAeth(f.aeth));
  if (op.has(kAtomicAckEth)) WriteHeader(h + op.atomic_ack_eth_offset, EncodeAtomicAckEth(f.atomic_ack_eth));
  if (op.has(kImmDt)) StoreBe32(h + op.immdt_offset, f.immediate_data);
  if (op.has(kIeth)) StoreBe32(h + op.ieth_offset, f.invalidate_rkey);
}

void WriteHeaders(const PacketFields& f, const Layout& layout, uint8_t* frame) {
  WriteNetworkHeaders(f, layout, frame);
  WriteTransportHeaders(f, layout, frame);
}

// Whether `t` was made from fields that write the same bytes before the BTH
// as `f` (all but the lengths and the IPv4 checksum).
bool SameNetworkHeaders(const PacketFields& t, const PacketFields& f) {
  return SameMac(t.dst_mac.data(), f.dst_mac.data()) && SameMac(t.src_mac.data(), f.src_mac.data()) &&
         t.has_vlan == f.has_vlan && (!f.has_vlan || t.vlan_tci == f.vlan_tci) && t.ip_version == f.ip_version &&
         SameGid(t.src_gid, f.src_gid) && SameGid(t.dst_gid, f.dst_gid) && t.traffic_class == f.traffic_class &&
         t.hop_limit == f.hop_limit &&
         t.ipv4_identification == f.ipv4_identification && t.ipv4_flags_fragment == f.ipv4_flags_fragment &&
         t.ipv6_flow_label == f.ipv6_flow_label && t.udp_src_port == f.udp_src_port &&
         t.udp_dst_port == f.udp_dst_port && t.udp_checksum == f.udp_checksum;
}

// The network headers of `f` with every length 0 and the IPv4 checksum 0;
// for IPv4 also their one's complement sum (RFC 1071), so that a packet's
// checksum is that plus its total length, folded (RFC 1624).
void MakeTemplate(const PacketFields& f, const Layout& layout, HeaderTemplate* t) {
  Layout zero = layout;
  zero.frame_length = layout.udp;  // lengths written as 0 below
  t->key = f;
  t->length = static_cast<uint8_t>(layout.bth);
  t->l3 = static_cast<uint8_t>(layout.l3);
  t->udp = static_cast<uint8_t>(layout.udp);
  t->ip_version = f.ip_version;
  WriteNetworkHeaders(f, zero, t->bytes);
  uint8_t* ip = t->bytes + layout.l3;
  if (f.ip_version == IpVersion::kIpv4) {
    StoreBe16(ip + 2, 0);   // total length
    StoreBe16(ip + 10, 0);  // header checksum
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof(Ipv4Header); i += 2) sum += LoadBe16(ip + i);
    t->ipv4_sum = sum;
  } else {
    StoreBe16(ip + 4, 0);  // payload length
  }
  StoreBe16(t->bytes + layout.udp + 4, 0);  // UDP length
  t->valid = true;
}

// The network headers from the template, with this packet's lengths.
void WriteFromTemplate(const HeaderTemplate& t, const Layout& layout, uint8_t* frame) {
  std::memcpy(frame, t.bytes, t.length);
  const uint16_t ip_length = static_cast<uint16_t>(layout.frame_length - layout.l3);
  const uint16_t udp_length = static_cast<uint16_t>(layout.frame_length - layout.udp);
  uint8_t* ip = frame + t.l3;
  if (t.ip_version == IpVersion::kIpv4) {
    StoreBe16(ip + 2, ip_length);
    uint64_t sum = t.ipv4_sum + ip_length;
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    StoreBe16(ip + 10, static_cast<uint16_t>(~sum));
  } else {
    StoreBe16(ip + 4, udp_length);
  }
  StoreBe16(frame + t.udp + 4, udp_length);
}

void FillPending(const PacketFields& f, const Layout& layout, uint8_t* frame, PendingPacket* pending) {
  pending->frame = frame;
  pending->frame_length = layout.frame_length;
  pending->payload = frame + layout.payload;
  pending->payload_length = f.payload_length;
  pending->pad_count = layout.pad;
  pending->l3_offset = static_cast<uint16_t>(layout.l3);
  pending->ip_header_bytes = static_cast<uint16_t>(layout.ip_header_bytes);
  pending->ip_version = f.ip_version;
}

}  // namespace

const char* BuildErrorName(BuildError error) {
  switch (error) {
    case BuildError::kOk: return "ok";
    case BuildError::kUnknownOpcode: return "unknown opcode";
    case BuildError::kBadPayloadLength: return "payload length not valid for the opcode";
    case BuildError::kFieldOutOfRange: return "field out of range";
    case BuildError::kNotIpv4MappedGid: return "IPv4 packet with a GID that is not IPv4-mapped";
    case BuildError::kPacketTooLong: return "packet too long";
    case BuildError::kBufferTooSmall: return "buffer too small";
    case BuildError::kMultiSegmentMbuf: return "multi-segment mbuf";
  }
  return "unknown error";
}

size_t FrameLength(const PacketFields& fields) {
  Layout layout;
  return Plan(fields, &layout) == BuildError::kOk ? layout.frame_length : 0;
}

BuildError BeginPacket(const PacketFields& fields, uint8_t* buffer, size_t capacity, PendingPacket* pending) {
  Layout layout;
  const BuildError e = Plan(fields, &layout);
  if (e != BuildError::kOk) return e;
  if (buffer == nullptr || capacity < layout.frame_length) return BuildError::kBufferTooSmall;
  WriteHeaders(fields, layout, buffer);
  FillPending(fields, layout, buffer, pending);
  return BuildError::kOk;
}

BuildError BeginPacket(const PacketFields& fields, rte_mbuf* mbuf, PendingPacket* pending) {
  if (mbuf->nb_segs != 1 || mbuf->data_len != mbuf->pkt_len) return BuildError::kMultiSegmentMbuf;
  Layout layout;
  const BuildError e = Plan(fields, &layout);
  if (e != BuildError::kOk) return e;
  if (layout.frame_length > rte_pktmbuf_tailroom(mbuf)) return BuildError::kBufferTooSmall;
  // Checked above, so the append cannot fail.
  auto* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(mbuf, static_cast<uint16_t>(layout.frame_length)));
  WriteHeaders(fields, layout, frame);
  FillPending(fields, layout, frame, pending);
  return BuildError::kOk;
}

BuildError BeginPacket(const PacketFields& fields, rte_mbuf* mbuf, PendingPacket* pending, HeaderTemplate* tmpl) {
  if (mbuf->nb_segs != 1 || mbuf->data_len != mbuf->pkt_len) return BuildError::kMultiSegmentMbuf;
  Layout layout;
  const BuildError e = Plan(fields, &layout);
  if (e != BuildError::kOk) return e;
  if (layout.frame_length > rte_pktmbuf_tailroom(mbuf)) return BuildError::kBufferTooSmall;
  auto* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(mbuf, static_cast<uint16_t>(layout.frame_length)));
  if (!tmpl->valid || !SameNetworkHeaders(tmpl->key, fields)) MakeTemplate(fields, layout, tmpl);
  WriteFromTemplate(*tmpl, layout, frame);
  WriteTransportHeaders(fields, layout, frame);
  FillPending(fields, layout, frame, pending);
  return BuildError::kOk;
}

void FinishPacket(const PendingPacket& p) {
  uint8_t* pad = p.payload + p.payload_length;
  std::memset(pad, 0, p.pad_count);
  uint8_t* icrc = pad + p.pad_count;
  const size_t covered = static_cast<size_t>(icrc - (p.frame + p.l3_offset));
  StoreLe32(icrc, ComputeIcrc(p.frame + p.l3_offset, p.ip_header_bytes, p.ip_version, covered));
}

void FinishPacketWithoutIcrc(const PendingPacket& p) { std::memset(p.payload + p.payload_length, 0, p.pad_count); }

BuildError BuildPacket(const PacketFields& fields, const uint8_t* payload, uint8_t* buffer, size_t capacity,
                       size_t* frame_length) {
  if (payload == nullptr && fields.payload_length > 0) return BuildError::kBadPayloadLength;
  PendingPacket p;
  const BuildError e = BeginPacket(fields, buffer, capacity, &p);
  if (e != BuildError::kOk) return e;
  if (p.payload_length > 0) std::memcpy(p.payload, payload, p.payload_length);
  FinishPacket(p);
  *frame_length = p.frame_length;
  return BuildError::kOk;
}

BuildError BuildPacket(const PacketFields& fields, const uint8_t* payload, rte_mbuf* mbuf) {
  if (payload == nullptr && fields.payload_length > 0) return BuildError::kBadPayloadLength;
  PendingPacket p;
  const BuildError e = BeginPacket(fields, mbuf, &p);
  if (e != BuildError::kOk) return e;
  if (p.payload_length > 0) std::memcpy(p.payload, payload, p.payload_length);
  FinishPacket(p);
  return BuildError::kOk;
}

}  // namespace uroce::transport
