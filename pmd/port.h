// Ethernet port set-up on any DPDK port id (control path): ring pairs, vdevs
// and PCI NICs alike.
#pragma once

#include <rte_ethdev.h>
#include <rte_mempool.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace uroce::pmd {

struct PortConfig {
  uint16_t rx_queues = 1;
  uint16_t tx_queues = 1;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  uint16_t mtu = 0;  // 0: keep the port's own
  bool promiscuous = false;
  // The address the port must receive unicast frames to (an [endpoint]'s
  // `mac = XX`), unless it already has it: the port is given it as its
  // default address (rte_eth_dev_default_mac_addr_set) before it starts. A
  // NIC that filters unicast (a virtio-net device in a VM does) otherwise
  // drops every frame sent to it. Where the driver cannot change its
  // address, and on ports that are views of a kernel interface (af_packet,
  // tap: the address is the kernel's, other programs use it), the port is
  // put in promiscuous mode instead. Unset: the port keeps its address.
  std::optional<std::array<uint8_t, 6>> mac;
  // The port's IPv6 addresses: it joins their solicited-node groups
  // (JoinSolicitedNodeGroups) once started.
  std::vector<std::array<uint8_t, 16>> ipv6_addresses;
  rte_mempool* rx_pool = nullptr;  // receive buffers come from here
  // false: configure the queues only; the caller starts the port (a memif
  // client retries its start until the server's socket is there).
  bool start = true;
};

// Configures the queues of `port_id` and starts it.
Status StartPort(uint16_t port_id, const PortConfig& config);

// Lets the port receive the IPv6 neighbour solicitations for `ipv6_addresses`
// (RFC 4861 §7.2.1: a node joins the solicited-node multicast group of each
// of its addresses; on Ethernet the group's MAC is 33:33:ff and the address's
// last 24 bits, RFC 2464 §7). A NIC that filters multicast (a virtio-net
// device in a VM does) otherwise never delivers them, and peers cannot
// resolve our IPv6 GIDs. Uses the port's multicast list where the driver has
// one, else all-multicast; ports that filter nothing need neither (ENOTSUP is
// no error).
rte_ether_addr SolicitedNodeMac(const std::array<uint8_t, 16>& ipv6_address);
Status JoinSolicitedNodeGroups(uint16_t port_id, const std::vector<std::array<uint8_t, 16>>& ipv6_addresses);

// Stops and closes the port; buffers still held in its rings are freed. A
// memif port is stopped and closed on EAL's interrupt thread (see
// RunOnInterruptThread).
Status ClosePort(uint16_t port_id);

// Runs `job` on EAL's interrupt thread, between the callbacks DPDK's drivers
// run there, and returns once it has run. For what must not run beside a
// driver's own interrupt-thread work on the same port: DPDK 22.11's memif
// connects and disconnects there (its peer's handshake and hang-up), and
// starting, stopping or closing a memif port from another thread at the same
// time frees its memory twice. Runs `job` on the calling thread when that is
// the interrupt thread, or if the interrupt thread cannot take jobs. EAL must
// be running. Control path; `job` must not wait for another job.
void RunOnInterruptThread(const std::function<void()>& job);

// The port id of a device by name (e.g. "net_ring0", "net_memif").
StatusOr<uint16_t> PortByName(const std::string& name);

}  // namespace uroce::pmd
