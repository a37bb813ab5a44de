// IP socket addresses <-> RoCEv2 GIDs. The connection APIs (librdmacm,
// libfabric's FI_SOCKADDR_IN/IN6) name endpoints by sockaddr; RoCEv2 names
// them by GID, the IPv6 address or the IPv4-mapped ::ffff:a.b.c.d
// (IBTA Annex A17.4.5.1), and the RDMA IP CM service carries the port
// (IBTA Annex A11).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"

namespace uroce::cm {

// AF_INET or AF_INET6 -> GID and port (host order); false for other families.
bool SockaddrToGid(const sockaddr* address, transport::Gid* gid, uint16_t* port);
// GID and port -> sockaddr_in (IPv4-mapped GIDs) or sockaddr_in6; `length`
// gets the size used.
void GidToSockaddr(const transport::Gid& gid, uint16_t port, sockaddr_storage* out, size_t* length);
// sizeof(sockaddr_in) / sizeof(sockaddr_in6), 0 for other families or null.
size_t SockaddrLength(const sockaddr* address);
// INADDR_ANY or in6addr_any.
bool IsWildcardSockaddr(const sockaddr* address);
// Port (host order) of an AF_INET/AF_INET6 address; 0 for others.
uint16_t SockaddrPort(const sockaddr* address);

}  // namespace uroce::cm
