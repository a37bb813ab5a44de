#include "transport/address_text.h"

#include <arpa/inet.h>

#include <cstdio>

namespace uroce::transport {

bool ParseIpAddress(const std::string& text, Gid* gid) {
  uint8_t v4[4];
  if (inet_pton(AF_INET, text.c_str(), v4) == 1) {
    *gid = Ipv4MappedGid(v4);
    return true;
  }
  return inet_pton(AF_INET6, text.c_str(), gid->data()) == 1;
}

bool ParseMacAddress(const std::string& text, MacAddress* mac) {
  unsigned b[6];
  char tail;
  if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6) {
    return false;
  }
  if (text.size() != 17) return false;
  for (int i = 0; i < 6; ++i) (*mac)[i] = static_cast<uint8_t>(b[i]);
  return true;
}

std::string GidToString(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (IsIpv4MappedGid(gid)) {
    inet_ntop(AF_INET, gid.data() + 12, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, gid.data(), buf, sizeof(buf));
  }
  return buf;
}

std::string MacToString(const MacAddress& mac) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
  return buf;
}

}  // namespace uroce::transport
