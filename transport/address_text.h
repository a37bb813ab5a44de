// Text forms of the wire's addresses: a GID as the IPv4 or IPv6 address it
// holds, and a MAC as six colon-separated hex bytes. The configuration, the
// daemon's protocol, telemetry and the tools print and read addresses only
// through these, so that every place spells an address the same way.
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <string>

#include "transport/headers.h"

namespace uroce::transport {

// "10.0.0.1" becomes ::ffff:10.0.0.1 (RFC 4291 2.5.5.2); "fd00::1" stays
// IPv6 (inet_pton(3)). False for anything else.
bool ParseIpAddress(const std::string& text, Gid* gid);
// Exactly "xx:xx:xx:xx:xx:xx" in hex; false otherwise.
bool ParseMacAddress(const std::string& text, MacAddress* mac);
// "10.0.0.1" for an IPv4-mapped GID, else "fd00::1" (inet_ntop(3)).
std::string GidToString(const Gid& gid);
// "02:00:00:00:00:01".
std::string MacToString(const MacAddress& mac);

}  // namespace uroce::transport
