#include "host/kernel_interface.h"

// glibc's net/if.h before the kernel's headers (linux/if.h then defers to it).
#include <net/if.h>
// clang-format off
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/if_addr.h>
#include <linux/if_arp.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
// clang-format on
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "host/netlink_socket.h"

namespace uroce::host {
namespace {

// ethtool's channels (ETHTOOL_GCHANNELS): the queues a NIC spreads received
// frames over (RSS). The af_xdp port binds one socket per queue, or the
// frames of the other queues would reach the kernel instead of uroce.
uint32_t QueueCount(const std::string& name) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1;
  ethtool_channels channels{};
  channels.cmd = ETHTOOL_GCHANNELS;
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  req.ifr_data = reinterpret_cast<char*>(&channels);
  const int ret = ioctl(fd, SIOCETHTOOL, &req);
  close(fd);
  if (ret != 0) return 1;  // no channels (veth before 5.x, many virtual devices): one queue
  const uint32_t n = channels.combined_count != 0 ? channels.combined_count : channels.rx_count;
  return n == 0 ? 1 : n;
}

}  // namespace

StatusOr<KernelInterface> ReadKernelInterface(const std::string& name) {
  KernelInterface out;
  out.name = name;
  if (name.empty() || name.size() >= IFNAMSIZ) return InvalidArgument("'" + name + "' is not an interface name");
  out.if_index = if_nametoindex(name.c_str());
  if (out.if_index == 0) return NotFound("no network interface '" + name + "' in this network namespace");
  NetlinkSocket nl;
  UROCE_RETURN_IF_ERROR(nl.Open());

  struct {
    nlmsghdr header;
    ifinfomsg info;
  } link_request{};
  link_request.header.nlmsg_len = sizeof(link_request);
  link_request.header.nlmsg_type = RTM_GETLINK;
  link_request.info.ifi_family = AF_UNSPEC;
  link_request.info.ifi_index = static_cast<int>(out.if_index);
  bool has_mac = false;
  Status s = nl.Request(&link_request.header, [&](const nlmsghdr& h) {
    if (h.nlmsg_type != RTM_NEWLINK || h.nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) return;
    const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(&h));
    if (info->ifi_index != static_cast<int>(out.if_index)) return;
    out.up = (info->ifi_flags & IFF_UP) != 0;
    const void* attrs[IFLA_MAX + 1];
    uint16_t lengths[IFLA_MAX + 1];
    ParseAttributes(h, sizeof(ifinfomsg), attrs, IFLA_MAX, lengths);
    if (info->ifi_type == ARPHRD_ETHER && attrs[IFLA_ADDRESS] != nullptr && lengths[IFLA_ADDRESS] == 6) {
      std::memcpy(out.mac.data(), attrs[IFLA_ADDRESS], 6);
      has_mac = true;
    }
    if (attrs[IFLA_MTU] != nullptr && lengths[IFLA_MTU] == 4) std::memcpy(&out.mtu, attrs[IFLA_MTU], 4);
  });
  if (!s.ok()) return IoError("reading interface " + name + ": " + s.message());
  if (!has_mac) return InvalidArgument("interface " + name + " is not an Ethernet interface");

  struct {
    nlmsghdr header;
    ifaddrmsg addr;
  } addr_request{};
  addr_request.header.nlmsg_len = sizeof(addr_request);
  addr_request.header.nlmsg_type = RTM_GETADDR;
  addr_request.header.nlmsg_flags = NLM_F_DUMP;
  addr_request.addr.ifa_family = AF_UNSPEC;
  std::vector<transport::Gid> ipv6;
  s = nl.Request(&addr_request.header, [&](const nlmsghdr& h) {
    if (h.nlmsg_type != RTM_NEWADDR || h.nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) return;
    const auto* a = static_cast<const ifaddrmsg*>(NLMSG_DATA(&h));
    if (a->ifa_index != out.if_index) return;
    const void* attrs[IFA_MAX + 1];
    uint16_t lengths[IFA_MAX + 1];
    ParseAttributes(h, sizeof(ifaddrmsg), attrs, IFA_MAX, lengths);
    uint32_t flags = a->ifa_flags;
    if (attrs[IFA_FLAGS] != nullptr && lengths[IFA_FLAGS] == 4) std::memcpy(&flags, attrs[IFA_FLAGS], 4);
    // IFA_LOCAL is the address itself on point-to-point links; IFA_ADDRESS
    // on the others.
    const void* address = attrs[IFA_LOCAL] != nullptr ? attrs[IFA_LOCAL] : attrs[IFA_ADDRESS];
    const uint16_t length = attrs[IFA_LOCAL] != nullptr ? lengths[IFA_LOCAL] : lengths[IFA_ADDRESS];
    if (address == nullptr) return;
    if (a->ifa_family == AF_INET && length == 4) {
      out.gids.push_back(transport::Ipv4MappedGid(static_cast<const uint8_t*>(address)));
    } else if (a->ifa_family == AF_INET6 && length == 16) {
      if (a->ifa_scope != RT_SCOPE_UNIVERSE) return;
      if (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)) return;
      transport::Gid gid;
      std::memcpy(gid.data(), address, 16);
      ipv6.push_back(gid);
    }
  });
  if (!s.ok()) return IoError("reading the addresses of " + name + ": " + s.message());
  out.gids.insert(out.gids.end(), ipv6.begin(), ipv6.end());
  out.queues = QueueCount(name);
  return out;
}

}  // namespace uroce::host
