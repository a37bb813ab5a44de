// What the kernel knows about one of its network interfaces, for an uplink
// that shares it (`port = kernel:IFNAME`, host/daemon.h): the interface's
// index, MAC, MTU, its IPv4 and IPv6 addresses (rtnetlink(7) RTM_GETLINK,
// RTM_GETADDR) and its queue count (ethtool's channels). Read once, on the
// control path, in the caller's network namespace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/headers.h"

namespace uroce::host {

struct KernelInterface {
  std::string name;
  uint32_t if_index = 0;
  transport::MacAddress mac{};
  uint32_t mtu = 0;
  bool up = false;
  // RoCE v2 GIDs of the interface's addresses: IPv4 ones (IPv4-mapped)
  // first, then IPv6 ones of global scope (IBTA A17.8: a GID per address).
  // Link-local and tentative IPv6 addresses are left out: a link-local
  // address needs an interface index no GID carries, and a tentative one
  // is not the host's until duplicate address detection passes.
  std::vector<transport::Gid> gids;
  uint32_t queues = 1;  // combined (or receive) channels, at least 1
};

// kNotFound when there is no such interface here.
StatusOr<KernelInterface> ReadKernelInterface(const std::string& name);

}  // namespace uroce::host
