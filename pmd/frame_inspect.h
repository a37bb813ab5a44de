// What the daemon's switch and a process's local links decide on in a frame:
// its kind (RoCEv2, ARP / neighbour discovery, anything else), its IP
// addresses and, for RoCEv2, the destination QPN (BTH, IBTA 9.2) and for UD
// the source QPN (DETH, IBTA 9.3). Only the first segment is read, and every
// offset is checked against it: the frame may come from anyone.
#pragma once

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"

namespace uroce::pmd {

struct FrameInfo {
  enum class Kind { kOther, kRoce, kNeighbor } kind = Kind::kOther;
  transport::Gid src_ip{}, dst_ip{};
  uint32_t dest_qpn = 0;
  bool ud = false;
  uint32_t src_qpn = 0;  // UD: DETH source QP
  size_t payload = 0;    // UD: offset of the datagram's payload (a MAD on QP 1)
  size_t payload_length = 0;
};

// False for a frame too short or inconsistent for what its headers claim;
// a frame that is simply not RoCE or ARP/ND is kOther.
bool InspectFrame(const rte_mbuf* m, FrameInfo* info);

}  // namespace uroce::pmd
