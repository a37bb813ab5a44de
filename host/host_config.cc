#include "host/host_config.h"

namespace uroce::host {

std::vector<transport::Gid> EndpointPortConfig::Ipv6Gids() const {
  std::vector<transport::Gid> out;
  for (const transport::Gid& gid : gids) {
    if (!transport::IsIpv4MappedGid(gid)) out.push_back(gid);
  }
  return out;
}

pmd::PortConfig PortConfigFor(const EndpointPortConfig& ec, rte_mempool* rx_pool) {
  pmd::PortConfig port;
  port.rx_pool = rx_pool;
  port.rx_descriptors = ec.rx_descriptors;
  port.tx_descriptors = ec.tx_descriptors;
  port.mtu = static_cast<uint16_t>(ec.mtu);
  port.promiscuous = ec.promiscuous;
  port.ipv6_addresses = ec.Ipv6Gids();
  if (!ec.mac_from_port) port.mac = ec.mac;
  return port;
}

}  // namespace uroce::host
