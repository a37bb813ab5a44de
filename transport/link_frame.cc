#include "transport/link_frame.h"

#include <cstring>

#include "transport/headers.h"
#include "transport/icrc.h"
#include "transport/wire_types.h"

namespace uroce::transport {
namespace {

constexpr size_t kEthernetBytes = 14, kIpv4Bytes = 20, kIpv6Bytes = 40, kUdpBytes = 8, kBthBytes = 12;
// The BTH opcode's top three bits name the service; 011 is UD (IBTA 9.2.1).
bool UdOpcode(uint8_t opcode) { return opcode >> 5 == 0x3; }

// Where a RoCEv2 frame's IP packet and UDP datagram are, for the shapes
// that have a link form; false for any other.
struct WireShape {
  IpVersion version = IpVersion::kIpv4;
  size_t udp = 0, ip_end = 0;
};

bool ReadShape(const uint8_t* wire, size_t length, WireShape* shape) {
  if (length < kEthernetBytes + kIpv4Bytes + kUdpBytes + kBthBytes + kIcrcBytes) return false;
  const uint16_t ether_type = LoadBe16(wire + 12);
  const uint8_t* ip = wire + kEthernetBytes;
  if (ether_type == kEtherTypeIpv4) {
    // Version 4 with no options, UDP, not a fragment (RFC 791).
    if (ip[0] != 0x45 || ip[9] != kIpProtocolUdp || (LoadBe16(ip + 6) & 0x3FFF) != 0) return false;
    shape->version = IpVersion::kIpv4;
    shape->udp = kEthernetBytes + kIpv4Bytes;
    shape->ip_end = kEthernetBytes + LoadBe16(ip + 2);
  } else if (ether_type == kEtherTypeIpv6) {
    // Version 6, UDP straight after the fixed header (RFC 8200).
    if (length < kEthernetBytes + kIpv6Bytes + kUdpBytes + kBthBytes + kIcrcBytes || (ip[0] >> 4) != 6 ||
        ip[6] != kIpProtocolUdp) {
      return false;
    }
    shape->version = IpVersion::kIpv6;
    shape->udp = kEthernetBytes + kIpv6Bytes;
    shape->ip_end = shape->udp + LoadBe16(ip + 4);
  } else {
    return false;
  }
  // The UDP datagram is the rest of the IP packet, within the frame, and
  // holds a BTH and an ICRC.
  const size_t udp = shape->udp, ip_end = shape->ip_end;
  return ip_end <= length && ip_end >= udp + kUdpBytes + kBthBytes + kIcrcBytes &&
         LoadBe16(wire + udp + 4) == ip_end - udp && LoadBe16(wire + udp + 2) == kRoceV2UdpPort;
}

}  // namespace

bool WriteIcrc(uint8_t* wire, size_t length) {
  WireShape shape;
  if (!ReadShape(wire, length, &shape)) return false;
  uint8_t* l3 = wire + kEthernetBytes;
  const size_t icrc_at = shape.ip_end - kIcrcBytes;
  StoreLe32(wire + icrc_at, ComputeIcrc(l3, shape.udp - kEthernetBytes, shape.version, icrc_at - kEthernetBytes));
  return true;
}

size_t WriteLinkFrame(const uint8_t* wire, size_t length, uint8_t* out, size_t capacity) {
  WireShape shape;
  if (!ReadShape(wire, length, &shape)) return 0;
  const size_t bth = shape.udp + kUdpBytes;
  if (UdOpcode(wire[bth])) return 0;
  const size_t transport = shape.ip_end - kIcrcBytes - bth;
  if (capacity < kLinkHeaderBytes + transport) return 0;
  const uint8_t* ip = wire + kEthernetBytes;
  uint8_t header[kLinkHeaderBytes] = {};
  if (shape.version == IpVersion::kIpv4) {
    header[0] = 4;
    header[1] = ip[1];  // TOS
    header[2] = ip[8];  // TTL
    const Gid src = Ipv4MappedGid(ip + 12), dst = Ipv4MappedGid(ip + 16);
    std::memcpy(header + kLinkSrcGidOffset, src.data(), 16);
    std::memcpy(header + kLinkDstGidOffset, dst.data(), 16);
  } else {
    header[0] = 6;
    header[1] = static_cast<uint8_t>(LoadBe16(ip) >> 4);  // traffic class: bits 4-11 of the first word
    header[2] = ip[7];                                    // hop limit
    std::memcpy(header + kLinkSrcGidOffset, ip + 8, 16);
    std::memcpy(header + kLinkDstGidOffset, ip + 24, 16);
  }
  std::memcpy(header + 4, wire + shape.udp, 2);  // the UDP source port, as it stands
  std::memcpy(out, header, kLinkHeaderBytes);
  std::memcpy(out + kLinkHeaderBytes, wire + bth, transport);
  return kLinkHeaderBytes + transport;
}

bool LinkFrameDestQp(const uint8_t* frame, size_t length, uint32_t* dest_qpn) {
  if (length < kLinkHeaderBytes + kBthBytes) return false;
  *dest_qpn = LoadBe24(frame + kLinkHeaderBytes + 5);
  return true;
}

}  // namespace uroce::transport
