#include "cm/socket_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace uroce::cm {

using transport::Gid;
using transport::Ipv4MappedGid;
using transport::IsIpv4MappedGid;


bool SockaddrToGid(const sockaddr* address, Gid* gid, uint16_t* port) {
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    *gid = Ipv4MappedGid(reinterpret_cast<const uint8_t*>(&in->sin_addr));
    *port = ntohs(in->sin_port);
    return true;
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    std::memcpy(gid->data(), &in6->sin6_addr, 16);
    *port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

void GidToSockaddr(const Gid& gid, uint16_t port, sockaddr_storage* out, size_t* length) {
  std::memset(out, 0, sizeof(*out));
  if (IsIpv4MappedGid(gid)) {
    auto* in = reinterpret_cast<sockaddr_in*>(out);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, gid.data() + 12, 4);
    *length = sizeof(sockaddr_in);
    return;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  std::memcpy(&in6->sin6_addr, gid.data(), 16);
  *length = sizeof(sockaddr_in6);
}

size_t SockaddrLength(const sockaddr* address) {
  if (address == nullptr) return 0;
  if (address->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (address->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

bool IsWildcardSockaddr(const sockaddr* address) {
  if (address == nullptr) return true;
  if (address->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (address->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, &in6addr_any,
                       sizeof(in6addr_any)) == 0;
  }
  return false;
}

uint16_t SockaddrPort(const sockaddr* address) {
  if (address == nullptr) return 0;
  if (address->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port);
  if (address->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(address)->sin6_port);
  return 0;
}

}  // namespace uroce::cm
