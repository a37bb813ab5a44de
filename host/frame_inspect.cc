#include "host/frame_inspect.h"

#include "host/neighbor_frames.h"
#include "transport/opcode.h"
#include "transport/packet_parser.h"
#include "transport/wire_types.h"

namespace uroce::host {

namespace {

// Neither checksum: the receiving engine checks the IPv4 header checksum and
// the ICRC (a pass over the whole frame) of every frame it takes, and the
// switch reads headers only. Everything else the engine's parser refuses,
// the switch refuses before it moves the frame anywhere.
constexpr transport::ParseOptions kRoutingChecks{.verify_icrc = false, .verify_ipv4_checksum = false};

}  // namespace

// The packet parser decides (transport/packet_parser.h); this only says
// what the switch routes on. Everything read is inside the first segment.
bool InspectFrame(const rte_mbuf* m, FrameInfo* info) {
  transport::PacketView view;
  const transport::ParseError e =
      transport::ParsePacket(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), kRoutingChecks, &view);
  // Shorter than the headers it announces, whatever it carries.
  if (e == transport::ParseError::kTruncated || e == transport::ParseError::kBadIpLength) return false;
  info->src_ip = view.fields.src_gid;
  info->dst_ip = view.fields.dst_gid;
  info->ipv6_header = view.fields.ip_version == transport::IpVersion::kIpv6;
  // The switch's ports are untagged: a tagged frame is nobody's here.
  if (view.fields.has_vlan) {
    info->kind = FrameInfo::Kind::kOther;
    return true;
  }
  if (view.is_roce) {
    // A frame to UDP 4791 that is not a RoCEv2 packet the engine would take.
    if (e != transport::ParseError::kOk) return false;
    info->kind = FrameInfo::Kind::kRoce;
    info->dest_qpn = view.fields.bth.dest_qp;
    info->ud = view.opcode->service == transport::TransportService::kUd;
    if (info->ud) {
      info->src_qpn = view.fields.deth.src_qp;
      info->payload = static_cast<size_t>(view.payload - view.frame);
      info->payload_length = view.fields.payload_length;
    }
    return true;
  }
  const bool neighbor = view.ether_type == kEtherTypeArp ||
                        (view.ether_type == transport::kEtherTypeIpv6 && view.ip_protocol == kIpProtocolIcmpv6);
  // ParseNeighborMessage checks the rest of a neighbour message.
  info->kind = neighbor ? FrameInfo::Kind::kNeighbor : FrameInfo::Kind::kOther;
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
