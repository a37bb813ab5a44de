#include "host/frame_inspect.h"

#include <cstring>

#include "host/neighbor_frames.h"
#include "transport/opcode.h"
#include "transport/wire_types.h"

namespace uroce::host {

using transport::LoadBe16;
using transport::LoadBe24;

namespace {

constexpr size_t kEthernetHeader = 14;
constexpr size_t kIpv4MinHeader = 20;
constexpr size_t kIpv6Header = 40;
constexpr size_t kUdpHeader = 8;
constexpr size_t kBth = 12;
constexpr size_t kDeth = 8;
constexpr size_t kIcrc = 4;
constexpr uint8_t kIpProtocolUdp = 17;

}  // namespace

// Ethernet II, untagged; IPv4 (no fragments) or IPv6 (UDP as the next
// header, as RoCEv2 sends it: IBTA A17.4); UDP to 4791; a whole BTH, and a
// DETH for the UD opcodes. Everything read is inside the first segment.
bool InspectFrame(const rte_mbuf* m, FrameInfo* info) {
  const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
  const size_t len = rte_pktmbuf_data_len(m);
  if (len < kEthernetHeader) return false;
  const uint16_t ether_type = LoadBe16(p + 12);
  size_t l4 = 0;
  uint8_t protocol = 0;
  if (ether_type == transport::kEtherTypeIpv4) {
    if (len < kEthernetHeader + kIpv4MinHeader) return false;
    const uint8_t* ip = p + kEthernetHeader;
    if ((ip[0] >> 4) != 4) return false;
    const size_t ihl = (ip[0] & 0x0F) * 4u;
    if (ihl < kIpv4MinHeader) return false;
    protocol = ip[9];
    info->src_ip = transport::Ipv4MappedGid(ip + 12);
    info->dst_ip = transport::Ipv4MappedGid(ip + 16);
    info->ipv6_header = false;
    // Fragments are not RoCE (RoCEv2 sets DF and never fragments).
    if ((LoadBe16(ip + 6) & 0x3FFF) != 0) protocol = 0;
    l4 = kEthernetHeader + ihl;
  } else if (ether_type == transport::kEtherTypeIpv6) {
    if (len < kEthernetHeader + kIpv6Header) return false;
    const uint8_t* ip = p + kEthernetHeader;
    if ((ip[0] >> 4) != 6) return false;
    protocol = ip[6];
    std::memcpy(info->src_ip.data(), ip + 8, 16);
    std::memcpy(info->dst_ip.data(), ip + 24, 16);
    info->ipv6_header = true;
    l4 = kEthernetHeader + kIpv6Header;
    if (protocol == kIpProtocolIcmpv6) {
      info->kind = FrameInfo::Kind::kNeighbor;  // ParseNeighborMessage checks the rest
      return true;
    }
  } else if (ether_type == kEtherTypeArp) {
    info->kind = FrameInfo::Kind::kNeighbor;
    return true;
  } else {
    info->kind = FrameInfo::Kind::kOther;
    return true;
  }
  if (protocol != kIpProtocolUdp) {
    info->kind = FrameInfo::Kind::kOther;
    return true;
  }
  if (len < l4 + kUdpHeader) return false;
  if (LoadBe16(p + l4 + 2) != transport::kRoceV2UdpPort) {
    info->kind = FrameInfo::Kind::kOther;
    return true;
  }
  const size_t bth = l4 + kUdpHeader;
  if (len < bth + kBth) return false;
  info->kind = FrameInfo::Kind::kRoce;
  info->dest_qpn = LoadBe24(p + bth + 5);
  const uint8_t opcode = p[bth];
  info->ud = opcode == static_cast<uint8_t>(transport::Opcode::kUdSendOnly) ||
             opcode == static_cast<uint8_t>(transport::Opcode::kUdSendOnlyWithImmediate);
  if (info->ud) {
    if (len < bth + kBth + kDeth + kIcrc) return false;
    info->src_qpn = LoadBe24(p + bth + kBth + 5);
    info->payload = bth + kBth + kDeth;
    info->payload_length = len - info->payload - kIcrc;
  }
  return true;
}

bool UnusableSourceAddress(const transport::Gid& gid, bool ipv6_header) {
  if (transport::IsIpv4MappedGid(gid)) {
    if (ipv6_header) return true;
    const uint8_t* a = gid.data() + 12;
    if (a[0] == 0 || a[0] == 127) return true;        // 0/8, 127/8
    if ((a[0] & 0xF0) == 0xE0) return true;          // 224/4
    return a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255;
  }
  if (gid[0] == 0xFF) return true;  // ff00::/8
  for (size_t i = 0; i < 15; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[15] <= 1;  // :: or ::1
}

}  // namespace uroce::host
