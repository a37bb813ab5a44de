// `uroce daemon`'s uplink on a kernel interface the host keeps using
// (`port = kernel:IFNAME`): a cloud VM's or container's only NIC, whose
// address is the host's and whose MAC is the only one the network accepts.
//
// af_xdp (DPDK's net_af_xdp): uroce's XDP program (xdp/uroce_steer.bpf.c)
// sends RoCEv2 frames for the uplink's own addresses (its GIDs) to uroce's
// AF_XDP sockets, one per queue of the interface (64 at most), and passes
// every other frame to the kernel, so ssh, DNS, ICMP, ARP and RoCE for
// other addresses (routed, bridged) stay the kernel's. RoCE for the
// uplink's addresses never reaches the kernel: the program drops it on a
// queue with no uroce socket, to another MAC, and until the uplink has
// filled the program's maps and enabled it (ConfigureSteering). The program
// is attached while the port lives and detached when it closes. One left
// by a daemon that died (kill -9) has no sockets any more, so a stale
// program drops RoCE for the host's addresses: it fails closed. The next
// daemon recognizes it by its name and replaces it.
//
// af_packet (DPDK's net_af_packet), where XDP cannot load (an older kernel,
// another XDP program on the interface, no CAP_BPF): uroce reads every frame
// of the interface and the kernel still sees them all, RoCE included. UDP
// sockets bound to port 4791 (IPv4 and IPv6, before the port opens) keep the
// kernel from answering RoCE frames with ICMP port unreachable and keep any
// other local socket from receiving them; an uplink refuses to open while
// somebody else holds the port, and names the holder (host/udp_port_holders.h).
// They are bound in af_xdp mode as well, for the moment before the program
// is configured (RoCE then still goes to the kernel) and for a program
// detached by hand.
//
// Either way the kernel owns the addresses: the daemon never answers ARP/ND
// for them, and learns neighbours from the kernel (host/kernel_neighbors.h).
//
// Control path only.
#pragma once

#include <rte_mempool.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "host/host_config.h"
#include "pmd/eth_port_io.h"
#include "host/kernel_interface.h"
#include "transport/headers.h"
#include "xdp/steer_program.h"

namespace uroce::host {

class KernelUplink {
 public:
  // EAL must be running. `pool` feeds the port's receive queues (and must
  // outlive the uplink). Tries af_xdp, then af_packet, as ec.kernel_io
  // allows; `notes` gets a line per fallback taken and why.
  static StatusOr<std::unique_ptr<KernelUplink>> Open(const EndpointPortConfig& ec, const KernelInterface& kif,
                                                      rte_mempool* pool, std::string* notes);
  ~KernelUplink();  // stops and removes the port (af_xdp: detaches the program)
  KernelUplink(const KernelUplink&) = delete;
  KernelUplink& operator=(const KernelUplink&) = delete;

  uint16_t port_id() const { return port_id_; }
  bool af_xdp() const { return af_xdp_; }
  uint16_t queues() const { return queues_; }
  pmd::MultiQueuePortIo* io() { return io_.get(); }
  // "net_af_xdp on eth0 (2 queues)", for the log.
  std::string Describe() const;

  // af_xdp: the XDP program's counters (xdp::SteerCounter order), summed
  // over the CPUs. FailedPrecondition for an af_packet uplink.
  using XdpCounters = std::array<uint64_t, xdp::kSteerCounters>;
  StatusOr<XdpCounters> ReadXdpCounters() const;

 private:
  KernelUplink() = default;
  Status OpenAfXdp(const EndpointPortConfig& ec, const KernelInterface& kif, rte_mempool* pool, std::string* notes);
  // Finds the program DPDK attached to the interface and fills its maps:
  // the addresses, then the MAC, then enabled.
  Status ConfigureSteering(uint32_t if_index, const std::vector<transport::Gid>& gids,
                           const transport::MacAddress& mac);
  Status OpenAfPacket(const EndpointPortConfig& ec, const KernelInterface& kif, rte_mempool* pool);
  Status StartProbed(const std::string& devargs, const EndpointPortConfig& ec, rte_mempool* pool, uint16_t queues);
  void RemovePort();
  Status BindUdpGuards();  // fails while anybody else holds UDP 4791

  std::string interface_;
  std::string vdev_;  // the probed device's name, empty when none
  uint16_t port_id_ = 0;
  uint16_t queues_ = 1;
  bool af_xdp_ = false;
  bool started_ = false;
  int program_fd_ = -1;  // the XDP object, a memfd the driver opens by path
  int steer_config_fd_ = -1;    // the attached program's uroce_cfg
  int steer_counters_fd_ = -1;  // and its uroce_cnt, for STATS
  std::string lock_path_;
  int lock_fd_ = -1;     // one daemon per interface (flock, released on death)
  bool guarded_ = false;  // holds a share of the process's UDP 4791 guards
  std::unique_ptr<pmd::MultiQueuePortIo> io_;
};

}  // namespace uroce::host
