// The parts of uroce's configuration (runtime/config.h, docs/configuration.md)
// that the host floor reads: what a port is and where it is (the keys of an
// [endpoint.NAME] section that the daemon's uplinks and a process's devices
// share), and the daemon's own [daemon] section. The parser and the rest of
// the model (EAL, engine, [impair], a process's devices) are the runtime's,
// above this floor; the runtime's EndpointConfig extends EndpointPortConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pmd/port.h"
#include "transport/headers.h"

namespace uroce::host {

enum class PortKind {
  kRingPair,  // one side of an in-process net_ring pair (pmd::CreateRingPair)
  kVdev,      // any DPDK virtual device, given to EAL as --vdev
  kPci,       // a PCI NIC, allowed with -a
  kKernel,    // a kernel interface the kernel keeps using (`uroce daemon` only)
  kShm,       // a process's shared-memory port to `uroce daemon` (host/shm_channel.h)
};

// How a kernel port reaches its interface (host/kernel_uplink.h).
enum class KernelIo { kAuto, kAfXdp, kAfPacket };

// An [endpoint.NAME] section's port and addresses.
struct EndpointPortConfig {
  std::string name;  // NAME of [endpoint.NAME]
  std::string port;  // as written
  PortKind kind = PortKind::kVdev;
  std::string device_name;  // kVdev: the name before the first ','; kPci: the address
  std::string interface;    // kKernel: the kernel interface's name
  KernelIo kernel_io = KernelIo::kAuto;
  std::vector<transport::Gid> gids;  // the GID table: ipv4, ipv6, then `gids`
  // The GIDs that are IPv6 addresses (not ::ffff:a.b.c.d).
  std::vector<transport::Gid> Ipv6Gids() const;
  bool has_ipv4 = false, has_ipv6 = false;
  bool mac_from_port = true;
  transport::MacAddress mac{};
  uint32_t mtu = 1500;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  unsigned mbufs = 8191;
  bool promiscuous = false;
  unsigned resolve_timeout_ms = 3000;
};

// The poll-mode port settings an endpoint's keys give (descriptors, MTU,
// promiscuous mode, IPv6 groups, a MAC set in the file), receiving into
// `rx_pool`; queues and `start` keep pmd::PortConfig's defaults.
pmd::PortConfig PortConfigFor(const EndpointPortConfig& ec, rte_mempool* rx_pool);

// `uroce daemon` (host/daemon.h): its control socket and switch.
constexpr uint32_t kDaemonMaxProcesses = 254;  // QPN leases 1..254 << 16
struct DaemonConfig {
  std::string socket = "/run/uroce/uroce.sock";
  uint32_t idle_us = 1000;  // the switch's longest sleep when no frame moves
  uint32_t max_processes = 64;
  uint32_t max_processes_per_uid = 32;
  uint32_t max_listens_per_uid = 256;
  uint32_t max_peers_per_uid = 65536;
  uint32_t attach_timeout_ms = 5000;
  uint32_t slot_quarantine_ms = 10000;
};

}  // namespace uroce::host
