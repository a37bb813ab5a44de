// libFuzzer target for the configuration a process loads from whoever
// answers on the daemon's socket (runtime::LoadConfigFromDaemon's text): an
// ATTACH reply whose grant a process takes (host/daemon_protocol.h) must
// load as a configuration on the daemon's shared-memory ports only, with no
// EAL driver to load, in the slot's own QPN range, and never with
// loopback or a multicast MAC. Any reply text is also loaded as a
// configuration, which must never crash. Its corpora are host's
// daemon_client_fuzz and daemon_protocol_fuzz ones.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/daemon_protocol.h"
#include "pmd/eal.h"
#include "runtime/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::host;
  using uroce::runtime::EndpointConfig;
  using uroce::runtime::LoadConfigText;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto reply = ParseAttachReply(text);
  if (!reply.ok()) return 0;
  // Whatever a reply carries is checked like any other file.
  auto config = LoadConfigText(reply->config_text, "fuzz");
  auto grant = ParseAttachGrant(reply->config_text, reply->slot);
  if (!grant.ok()) return 0;
  if (!config.ok() || config->endpoints.size() != grant->endpoints.size() ||
      !uroce::pmd::FindDriverLoadArgument(config->eal.extra_args).empty() || config->eal.allow_driver_load) {
    abort();
  }
  for (size_t k = 0; k < config->endpoints.size(); ++k) {
    const EndpointConfig& ep = config->endpoints[k];
    if (ep.kind != PortKind::kShm || ep.shm_index != k || ep.qpn_base != reply->slot << kDaemonQpnShift ||
        ep.qpn_count != (1u << kDaemonQpnShift) || ep.loopback || (ep.mac[0] & 1) != 0) {
      abort();
    }
  }
  return 0;
}
