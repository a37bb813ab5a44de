#include "host/host_config.h"

namespace uroce::host {

std::vector<transport::Gid> EndpointPortConfig::Ipv6Gids() const {
  std::vector<transport::Gid> out;
  for (const transport::Gid& gid : gids) {
    if (!transport::IsIpv4MappedGid(gid)) out.push_back(gid);
  }
  return out;
}

}  // namespace uroce::host
