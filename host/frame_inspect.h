// What the daemon's switch and a process's local links decide on in a frame:
// its kind (RoCEv2, ARP / neighbour discovery, anything else), its IP
// addresses and, for RoCEv2, the destination QPN (BTH, IBTA 9.2) and for UD
// the source QPN (DETH, IBTA 9.3). The packet parser reads the frame, so a
// frame is RoCE here exactly when the receiving engine would parse it (short
// of the checksums it checks itself); only the first segment is read, and
// every offset is checked against it: the frame may come from anyone.
#pragma once

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"

namespace uroce::host {

struct FrameInfo {
  enum class Kind { kOther, kRoce, kNeighbor } kind = Kind::kOther;
  transport::Gid src_ip{}, dst_ip{};
  bool ipv6_header = false;  // the addresses came in an IPv6 header (else IPv4)
  uint32_t dest_qpn = 0;
  bool ud = false;
  uint32_t src_qpn = 0;  // UD: DETH source QP
  size_t payload = 0;    // UD: offset of the datagram's payload (a MAD on QP 1)
  size_t payload_length = 0;
};

// False for a frame shorter than the headers it announces, or a frame to UDP
// 4791 that the packet parser refuses; a frame that is simply not RoCE or
// ARP/ND (a VLAN-tagged one included) is kOther.
bool InspectFrame(const rte_mbuf* m, FrameInfo* info);

// A source address no host may send from (RFC 1122 3.2.1.3: "this network"
// 0/8, loopback 127/8, limited broadcast; RFC 1112 4 and RFC 4291 2.7: a
// multicast address is never a source, 224/4 and ff00::/8; RFC 4291 2.5.2
// and 2.5.3: the unspecified address ::, loopback ::1). An IPv4-mapped
// address (RFC 4291 2.5.5.2) inside an IPv6 header (`ipv6_header`) is one
// too: an IPv4 node has no IPv6 header, so it is a disguise. IPv4 addresses
// are IPv4-mapped GIDs, as InspectFrame gives them.
bool UnusableSourceAddress(const transport::Gid& gid, bool ipv6_header);

// An Ethernet source that no station has (IEEE 802.3 3.2.3: the individual/
// group bit set, broadcast included).
inline bool GroupMacAddress(const uint8_t mac[6]) { return (mac[0] & 1) != 0; }

}  // namespace uroce::host
