// Ethernet port set-up on any DPDK port id (control path): ring pairs, vdevs
// and PCI NICs alike.
#pragma once

#include <rte_ethdev.h>
#include <rte_mempool.h>

#include <string>

#include "common/status.h"

namespace uroce::pmd {

struct PortConfig {
  uint16_t rx_queues = 1;
  uint16_t tx_queues = 1;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  uint16_t mtu = 0;  // 0: keep the port's own
  bool promiscuous = false;
  rte_mempool* rx_pool = nullptr;  // receive buffers come from here
  // false: configure the queues only; the caller starts the port (a memif
  // client retries its start until the server's socket is there).
  bool start = true;
};

// Configures the queues of `port_id` and starts it.
Status StartPort(uint16_t port_id, const PortConfig& config);

// Stops and closes the port; buffers still held in its rings are freed.
Status ClosePort(uint16_t port_id);

// The port id of a device by name (e.g. "net_ring0", "net_memif").
StatusOr<uint16_t> PortByName(const std::string& name);

}  // namespace uroce::pmd
