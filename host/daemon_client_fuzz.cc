// libFuzzer target for what a process takes from whoever answers on the
// daemon's socket (host/daemon_client.h): the ATTACH reply and its
// configuration (ParseAttachGrant) and the DEVICES answer, whose names
// become paths a root `uroce exec` creates (ParseDevicesReply). What is
// accepted must be exactly the daemon's grammar: the grant written back is
// the same text; every device name is a single path component. That the
// grant then loads as a configuration on the daemon's shared-memory ports
// only is runtime/daemon_grant_fuzz.cc's, on the same inputs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/daemon_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::host;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto reply = ParseAttachReply(text); reply.ok()) {
    if (auto grant = ParseAttachGrant(reply->config_text, reply->slot); grant.ok()) {
      if (FormatGrantConfig(*grant) != reply->config_text || grant->endpoints.empty() ||
          grant->endpoints.size() > kMaxUplinks) {
        abort();
      }
    }
  }
  if (auto devices = ParseDevicesReply(text); devices.ok()) {
    if (devices->size() > kMaxUplinks) abort();
    for (size_t i = 0; i < devices->size(); ++i) {
      const DeviceLine& d = (*devices)[i];
      if (d.index != i || d.gids.empty() || d.gids.size() > kMaxGrantGids) abort();
      if (!d.netdev.empty() && (!ValidInterfaceName(d.netdev) || d.netdev.find('/') != std::string::npos ||
                                d.netdev == ".." || d.netdev == ".")) {
        abort();
      }
    }
  }
  return 0;
}
