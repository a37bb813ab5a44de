#include "host/neighbor_frames.h"

#include <cstring>

namespace uroce::host {
namespace {

using transport::EthernetHeader;
using transport::Gid;
using transport::Ipv6Header;
using transport::MacAddress;
using transport::ReadHeader;
using transport::WriteHeader;

constexpr size_t kEthBytes = sizeof(EthernetHeader);
constexpr size_t kIpv6Bytes = sizeof(Ipv6Header);
constexpr uint16_t kArpHardwareEthernet = 1;
constexpr uint16_t kArpRequest = 1;
constexpr uint16_t kArpReply = 2;

size_t WriteEthernet(uint8_t* out, const uint8_t dst[6], const MacAddress& src, uint16_t ether_type) {
  EthernetHeader eth;
  std::memcpy(eth.dst, dst, 6);
  std::memcpy(eth.src, src.data(), 6);
  eth.ether_type.store(ether_type);
  WriteHeader(out, eth);
  return kEthBytes;
}

size_t PadFrame(uint8_t* out, size_t length) {
  if (length < kMinEthernetFrame) {
    std::memset(out + length, 0, kMinEthernetFrame - length);
    length = kMinEthernetFrame;
  }
  return length;
}

size_t BuildArp(uint8_t* out, uint16_t opcode, const uint8_t eth_dst[6], const MacAddress& my_mac, const Gid& my_ip,
                const uint8_t target_mac[6], const Gid& target_ip) {
  size_t n = WriteEthernet(out, eth_dst, my_mac, kEtherTypeArp);
  ArpPacket arp;
  arp.hardware_type.store(kArpHardwareEthernet);
  arp.protocol_type.store(transport::kEtherTypeIpv4);
  arp.hardware_length = 6;
  arp.protocol_length = 4;
  arp.opcode.store(opcode);
  std::memcpy(arp.sender_mac, my_mac.data(), 6);
  std::memcpy(arp.sender_ip, my_ip.data() + 12, 4);
  std::memcpy(arp.target_mac, target_mac, 6);
  std::memcpy(arp.target_ip, target_ip.data() + 12, 4);
  WriteHeader(out + n, arp);
  n += sizeof(arp);
  return PadFrame(out, n);
}

// An IPv6 header and an ND message with one link-layer option; fills in the
// ICMPv6 checksum.
size_t BuildNd(uint8_t* out, const uint8_t eth_dst[6], const MacAddress& my_mac, const Gid& src_ip, const uint8_t dst_ip[16],
               uint8_t type, uint32_t flags, const Gid& target, uint8_t option_type) {
  size_t n = WriteEthernet(out, eth_dst, my_mac, transport::kEtherTypeIpv6);
  constexpr uint16_t kIcmpBytes = sizeof(NdMessage) + sizeof(NdLinkLayerOption);
  Ipv6Header ip;
  ip.version_class_flow.store(6u << 28);
  ip.payload_length.store(kIcmpBytes);
  ip.next_header = kIpProtocolIcmpv6;
  ip.hop_limit = kNdHopLimit;
  std::memcpy(ip.src, src_ip.data(), 16);
  std::memcpy(ip.dst, dst_ip, 16);
  WriteHeader(out + n, ip);
  n += kIpv6Bytes;
  uint8_t* icmp = out + n;
  NdMessage nd;
  nd.type = type;
  nd.code = 0;
  nd.checksum.store(0);
  nd.flags.store(flags);
  std::memcpy(nd.target, target.data(), 16);
  WriteHeader(icmp, nd);
  NdLinkLayerOption option;
  option.type = option_type;
  option.length = 1;
  std::memcpy(option.mac, my_mac.data(), 6);
  WriteHeader(icmp + sizeof(nd), option);
  transport::StoreBe16(icmp + 2, Icmpv6Checksum(ip.src, ip.dst, icmp, kIcmpBytes));
  n += kIcmpBytes;
  return PadFrame(out, n);
}

uint32_t SumWords(const uint8_t* p, size_t length, uint32_t sum) {
  size_t i = 0;
  for (; i + 1 < length; i += 2) sum += transport::LoadBe16(p + i);
  if (i < length) sum += uint32_t{p[i]} << 8;  // an odd byte is padded with zero
  return sum;
}

NeighborMessage ParseArp(const uint8_t* frame, size_t length, NeighborMessage msg) {
  if (length < kEthBytes + sizeof(ArpPacket)) return {};
  const ArpPacket arp = ReadHeader<ArpPacket>(frame + kEthBytes);
  if (arp.hardware_type.load() != kArpHardwareEthernet || arp.protocol_type.load() != transport::kEtherTypeIpv4 ||
      arp.hardware_length != 6 || arp.protocol_length != 4) {
    return {};
  }
  const uint16_t op = arp.opcode.load();
  if (op != kArpRequest && op != kArpReply) return {};
  msg.kind = op == kArpRequest ? NeighborMessageKind::kArpRequest : NeighborMessageKind::kArpReply;
  msg.sender_ip = transport::Ipv4MappedGid(arp.sender_ip);
  std::memcpy(msg.sender_mac.data(), arp.sender_mac, 6);
  // A sender that is a multicast or all-zero MAC is not an answer to learn.
  msg.has_sender_mac = (arp.sender_mac[0] & 1) == 0 && msg.sender_mac != MacAddress{};
  msg.target_ip = transport::Ipv4MappedGid(arp.target_ip);
  return msg;
}

NeighborMessage ParseNd(const uint8_t* frame, size_t length, NeighborMessage msg) {
  if (length < kEthBytes + kIpv6Bytes + sizeof(NdMessage)) return {};
  const Ipv6Header ip = ReadHeader<Ipv6Header>(frame + kEthBytes);
  if ((ip.version_class_flow.load() >> 28) != 6 || ip.next_header != kIpProtocolIcmpv6) return {};
  const size_t icmp_length = ip.payload_length.load();
  if (icmp_length < sizeof(NdMessage) || kEthBytes + kIpv6Bytes + icmp_length > length) return {};
  const uint8_t* icmp = frame + kEthBytes + kIpv6Bytes;
  const NdMessage nd = ReadHeader<NdMessage>(icmp);
  if (nd.type != kIcmpv6NeighborSolicitation && nd.type != kIcmpv6NeighborAdvertisement) return {};
  // RFC 4861 7.1.1 / 7.1.2: hop limit 255, code 0, a valid checksum, and a
  // target that is not multicast.
  if (ip.hop_limit != kNdHopLimit || nd.code != 0 || nd.target[0] == 0xFF) return {};
  if (Icmpv6Checksum(ip.src, ip.dst, icmp, icmp_length) != 0) return {};
  const bool solicitation = nd.type == kIcmpv6NeighborSolicitation;
  std::memcpy(msg.target_ip.data(), nd.target, 16);
  if (solicitation) std::memcpy(msg.sender_ip.data(), ip.src, 16);
  else msg.sender_ip = msg.target_ip;
  msg.solicited = !solicitation && (nd.flags.load() & kNaFlagSolicited) != 0;
  // Options: each at least 8 bytes, none of length 0 (RFC 4861 7.1.1).
  const uint8_t wanted = solicitation ? kNdOptionSourceLinkLayer : kNdOptionTargetLinkLayer;
  size_t off = sizeof(NdMessage);
  while (off + 2 <= icmp_length) {
    const size_t option_bytes = size_t{icmp[off + 1]} * 8;
    if (option_bytes == 0 || off + option_bytes > icmp_length) return {};
    if (icmp[off] == wanted && option_bytes >= sizeof(NdLinkLayerOption)) {
      std::memcpy(msg.sender_mac.data(), icmp + off + 2, 6);
      msg.has_sender_mac = (msg.sender_mac[0] & 1) == 0;
    }
    off += option_bytes;
  }
  // A solicitation from the unspecified address (duplicate address
  // detection) must not carry a source link-layer option (7.1.1).
  static constexpr uint8_t kUnspecified[16] = {};
  if (solicitation && std::memcmp(ip.src, kUnspecified, 16) == 0) {
    if (msg.has_sender_mac) return {};
  }
  msg.kind = solicitation ? NeighborMessageKind::kNeighborSolicitation : NeighborMessageKind::kNeighborAdvertisement;
  return msg;
}

// An address no neighbour is found at (RFC 1122 3.2.1.3: 0/8, 127/8 and
// the limited broadcast; RFC 1112 4: 224/4; RFC 4291 2.5.2, 2.5.3, 2.7: ::,
// ::1, ff00::/8). IPv4 addresses are IPv4-mapped.
bool UnusableNeighborAddress(const Gid& gid) {
  if (transport::IsIpv4MappedGid(gid)) {
    const uint8_t* a = gid.data() + 12;
    const bool broadcast = a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255;
    return a[0] == 0 || a[0] == 127 || (a[0] & 0xF0) == 0xE0 || broadcast;
  }
  if (gid[0] == 0xFF) return true;
  for (size_t i = 0; i < 15; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[15] <= 1;
}

}  // namespace

uint16_t Icmpv6Checksum(const uint8_t src[16], const uint8_t dst[16], const uint8_t* icmp, size_t length) {
  uint32_t sum = 0;
  sum = SumWords(src, 16, sum);
  sum = SumWords(dst, 16, sum);
  sum += static_cast<uint32_t>(length >> 16) + static_cast<uint32_t>(length & 0xFFFF);
  sum += kIpProtocolIcmpv6;
  sum = SumWords(icmp, length, sum);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

NeighborMessage ParseNeighborMessage(const uint8_t* frame, size_t length) {
  if (length < kEthBytes) return {};
  const EthernetHeader eth = ReadHeader<EthernetHeader>(frame);
  NeighborMessage msg;
  std::memcpy(msg.eth_src.data(), eth.src, 6);
  switch (eth.ether_type.load()) {
    case kEtherTypeArp:
      return ParseArp(frame, length, msg);
    case transport::kEtherTypeIpv6:
      return ParseNd(frame, length, msg);
    default:
      return {};
  }
}

size_t BuildArpRequest(uint8_t* out, const MacAddress& my_mac, const Gid& my_ip, const Gid& target_ip) {
  static constexpr uint8_t kBroadcast[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  static constexpr uint8_t kUnknown[6] = {};  // RFC 826: the target hardware address is what is asked
  return BuildArp(out, kArpRequest, kBroadcast, my_mac, my_ip, kUnknown, target_ip);
}

size_t BuildArpReply(uint8_t* out, const MacAddress& my_mac, const Gid& my_ip, const MacAddress& to_mac,
                     const Gid& to_ip) {
  return BuildArp(out, kArpReply, to_mac.data(), my_mac, my_ip, to_mac.data(), to_ip);
}

size_t BuildNeighborSolicitation(uint8_t* out, const MacAddress& my_mac, const Gid& my_ip, const Gid& target_ip) {
  // Solicited-node multicast: ff02::1:ff00:0/104 plus the target's low 24
  // bits (RFC 4291 2.7.1); its MAC is 33:33 and the low 32 bits (RFC 2464 7).
  uint8_t dst_ip[16] = {0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF};
  std::memcpy(dst_ip + 13, target_ip.data() + 13, 3);
  const uint8_t dst_mac[6] = {0x33, 0x33, dst_ip[12], dst_ip[13], dst_ip[14], dst_ip[15]};
  return BuildNd(out, dst_mac, my_mac, my_ip, dst_ip, kIcmpv6NeighborSolicitation, 0, target_ip,
                 kNdOptionSourceLinkLayer);
}

size_t BuildNeighborAdvertisement(uint8_t* out, const MacAddress& my_mac, const Gid& my_ip, const MacAddress& to_mac,
                                  const Gid& to_ip) {
  return BuildNd(out, to_mac.data(), my_mac, my_ip, to_ip.data(), kIcmpv6NeighborAdvertisement,
                 kNaFlagSolicited | kNaFlagOverride, my_ip, kNdOptionTargetLinkLayer);
}

size_t BuildNeighborQuestion(uint8_t* out, const NeighborMessage& asked, const MacAddress& uplink_mac,
                             const Gid& sender_ip, NeighborRefusal* why) {
  const bool arp = asked.kind == NeighborMessageKind::kArpRequest;
  NeighborRefusal refusal = NeighborRefusal::kNone;
  if (!arp && asked.kind != NeighborMessageKind::kNeighborSolicitation) {
    refusal = NeighborRefusal::kNotARequest;
  } else if (transport::IsIpv4MappedGid(sender_ip) != arp || transport::IsIpv4MappedGid(asked.target_ip) != arp) {
    refusal = NeighborRefusal::kOtherFamily;
  } else if (UnusableNeighborAddress(sender_ip)) {
    refusal = NeighborRefusal::kUnusableSender;
  } else if (UnusableNeighborAddress(asked.target_ip)) {
    refusal = NeighborRefusal::kUnusableTarget;
  } else if (asked.target_ip == sender_ip) {
    refusal = NeighborRefusal::kGratuitous;
  }
  if (why != nullptr) *why = refusal;
  if (refusal != NeighborRefusal::kNone) return 0;
  return arp ? BuildArpRequest(out, uplink_mac, sender_ip, asked.target_ip)
             : BuildNeighborSolicitation(out, uplink_mac, sender_ip, asked.target_ip);
}

}  // namespace uroce::host
