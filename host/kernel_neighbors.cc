#include "host/kernel_neighbors.h"

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstring>

namespace uroce::host {
namespace {

using transport::Gid;

// A request with room for one address attribute.
struct AddressRequest {
  nlmsghdr header;
  union {
    rtmsg route;
    ndmsg neighbor;
  };
  char attributes[RTA_SPACE(16)];
};

// The family of `gid` and the address bytes inside it.
int FamilyOf(const Gid& gid, const uint8_t** bytes, size_t* length) {
  if (transport::IsIpv4MappedGid(gid)) {
    *bytes = gid.data() + 12;
    *length = 4;
    return AF_INET;
  }
  *bytes = gid.data();
  *length = 16;
  return AF_INET6;
}

void AddAddress(AddressRequest* r, size_t fixed, uint16_t type, const uint8_t* bytes, size_t length) {
  r->header.nlmsg_len = static_cast<uint32_t>(NLMSG_LENGTH(fixed));
  auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(r) + NLMSG_ALIGN(r->header.nlmsg_len));
  a->rta_type = type;
  a->rta_len = static_cast<uint16_t>(RTA_LENGTH(length));
  std::memcpy(RTA_DATA(a), bytes, length);
  r->header.nlmsg_len = static_cast<uint32_t>(NLMSG_ALIGN(r->header.nlmsg_len) + RTA_SPACE(length));
}

// A neighbour-table request about `gid` on interface `if_index`.
AddressRequest NeighborRequest(uint16_t type, uint16_t flags, uint32_t if_index, const Gid& gid) {
  const uint8_t* bytes;
  size_t length;
  AddressRequest r{};
  r.header.nlmsg_type = type;
  r.header.nlmsg_flags = flags;
  r.neighbor.ndm_family = static_cast<unsigned char>(FamilyOf(gid, &bytes, &length));
  r.neighbor.ndm_ifindex = static_cast<int>(if_index);
  AddAddress(&r, sizeof(ndmsg), NDA_DST, bytes, length);
  return r;
}

Gid GidFrom(int family, const void* bytes) {
  if (family == AF_INET) return transport::Ipv4MappedGid(static_cast<const uint8_t*>(bytes));
  Gid gid;
  std::memcpy(gid.data(), bytes, 16);
  return gid;
}

}  // namespace

Status KernelNeighbors::Open(uint32_t if_index) {
  if_index_ = if_index;
  UROCE_RETURN_IF_ERROR(queries_.Open());
  return events_.Open(RTMGRP_NEIGH);
}

bool KernelNeighbors::DrainEvents() {
  bool any = false;
  events_.Drain([&](const nlmsghdr&) { any = true; });
  return any;
}

Status KernelNeighbors::NextHop(const Gid& destination, Gid* next_hop) {
  const uint8_t* bytes;
  size_t length;
  const int family = FamilyOf(destination, &bytes, &length);
  AddressRequest r{};
  r.header.nlmsg_type = RTM_GETROUTE;
  r.route.rtm_family = static_cast<unsigned char>(family);
  r.route.rtm_dst_len = static_cast<unsigned char>(length * 8);
  AddAddress(&r, sizeof(rtmsg), RTA_DST, bytes, length);
  bool found = false;
  uint32_t oif = 0;
  Gid hop = destination;
  unsigned char type = RTN_UNSPEC;
  Status s = queries_.Request(&r.header, [&](const nlmsghdr& h) {
    if (h.nlmsg_type != RTM_NEWROUTE || h.nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg))) return;
    const auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(&h));
    const void* attrs[RTA_MAX + 1];
    uint16_t lengths[RTA_MAX + 1];
    ParseAttributes(h, sizeof(rtmsg), attrs, RTA_MAX, lengths);
    found = true;
    type = rt->rtm_type;
    if (attrs[RTA_OIF] != nullptr && lengths[RTA_OIF] == 4) std::memcpy(&oif, attrs[RTA_OIF], 4);
    if (attrs[RTA_GATEWAY] != nullptr && lengths[RTA_GATEWAY] == length) hop = GidFrom(family, attrs[RTA_GATEWAY]);
  });
  if (!s.ok()) return s;
  if (!found || type != RTN_UNICAST) return NotFound("no unicast route");
  if (oif != if_index_) return NotFound("the route leaves through another interface");
  *next_hop = hop;
  return Status::Ok();
}

KernelNeighbors::Answer KernelNeighbors::Lookup(const Gid& destination, transport::MacAddress* mac) {
  Gid hop;
  if (!NextHop(destination, &hop).ok()) return Answer::kUnreachable;
  AddressRequest r = NeighborRequest(RTM_GETNEIGH, 0, if_index_, hop);
  uint16_t state = NUD_NONE;
  bool has_mac = false;
  Status s = queries_.Request(&r.header, [&](const nlmsghdr& h) {
    if (h.nlmsg_type != RTM_NEWNEIGH || h.nlmsg_len < NLMSG_LENGTH(sizeof(ndmsg))) return;
    const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(&h));
    const void* attrs[NDA_MAX + 1];
    uint16_t lengths[NDA_MAX + 1];
    ParseAttributes(h, sizeof(ndmsg), attrs, NDA_MAX, lengths);
    state = nd->ndm_state;
    if (attrs[NDA_LLADDR] != nullptr && lengths[NDA_LLADDR] == 6) {
      std::memcpy(mac->data(), attrs[NDA_LLADDR], 6);
      has_mac = true;
    }
  });
  // A usable entry (NUD_VALID: reachable, stale, delay, probe, permanent):
  // the kernel itself would send with it.
  if (s.ok() && has_mac && (state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT))) {
    return Answer::kKnown;
  }
  if (s.ok() && (state & NUD_INCOMPLETE)) return Answer::kAsked;  // already being resolved
  // Unknown, failed or not yet asked: ask the kernel to resolve it (as
  // `ip neigh replace ADDR dev IF use` does). A failed entry is asked again.
  AddressRequest use = NeighborRequest(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, if_index_, hop);
  use.neighbor.ndm_state = NUD_NONE;
  use.neighbor.ndm_flags = NTF_USE;
  if (!queries_.Request(&use.header, [](const nlmsghdr&) {}).ok()) return Answer::kUnreachable;
  return Answer::kAsked;
}

}  // namespace uroce::host
