// The kernel's routes and neighbour table as the source of the MACs that
// processes attached to `uroce daemon` need, when the daemon's uplink shares
// a kernel interface (`port = kernel:IFNAME`): the kernel owns the host's
// addresses there and answers ARP and neighbour solicitations for them, and
// the answers to requests reach the kernel, not uroce. So the daemon asks the
// kernel (rtnetlink(7)): the route to a destination gives the next hop (the
// destination itself on the link, or its gateway), the neighbour table gives
// the next hop's MAC, and a neighbour the kernel does not know yet is asked
// for (RTM_NEWNEIGH with NTF_USE: the kernel resolves it as if a packet
// waited for it, and tells the event socket when it has).
//
// Control path only (system calls), on the daemon's thread.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "host/netlink_socket.h"
#include "transport/headers.h"

namespace uroce::host {

class KernelNeighbors {
 public:
  enum class Answer {
    kKnown,        // *mac holds the next hop's MAC
    kAsked,        // the kernel is resolving it: look again after an event
    kUnreachable,  // no route through this interface, or the kernel failed to resolve it
  };

  // Questions about interface `if_index`.
  Status Open(uint32_t if_index);
  // Readable when the neighbour table changed (RTMGRP_NEIGH events).
  int event_fd() const { return events_.fd(); }
  // Empties the event socket; true if anything arrived.
  bool DrainEvents();

  // The MAC to send frames for `destination` (an IPv4-mapped or IPv6 GID) to.
  Answer Lookup(const transport::Gid& destination, transport::MacAddress* mac);

 private:
  Status NextHop(const transport::Gid& destination, transport::Gid* next_hop);

  uint32_t if_index_ = 0;
  NetlinkSocket queries_;
  NetlinkSocket events_;
};

}  // namespace uroce::host
