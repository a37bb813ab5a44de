// `uroce daemon`'s uplink on a kernel interface the host keeps using
// (`port = kernel:IFNAME`): a cloud VM's or container's only NIC, whose
// address is the host's and whose MAC is the only one the network accepts.
//
// af_xdp (DPDK's net_af_xdp): uroce's XDP program (xdp/uroce_steer.bpf.c)
// sends RoCEv2 frames to uroce's AF_XDP sockets, one per queue of the
// interface, and passes every other frame to the kernel, so ssh, DNS, ICMP
// and ARP stay the kernel's. The program is attached while the port lives
// and detached when it closes; one left by a daemon that died (kill -9) is
// recognized by its name and replaced.
//
// af_packet (DPDK's net_af_packet), where XDP cannot load (an older kernel,
// another XDP program on the interface, no CAP_BPF): uroce reads every frame
// of the interface and the kernel still sees them all, RoCE included. UDP
// sockets bound to port 4791 (IPv4 and IPv6, before the port opens) keep the
// kernel from answering RoCE frames with ICMP port unreachable and keep any
// other local socket from receiving them; an uplink refuses to open while
// somebody else holds the port, and names the holder (pmd/udp_port_holders.h).
// They are bound in af_xdp mode as well, for frames of a queue with no socket.
//
// Either way the kernel owns the addresses: the daemon never answers ARP/ND
// for them, and learns neighbours from the kernel (pmd/kernel_neighbors.h).
//
// Control path only.
#pragma once

#include <rte_mempool.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "pmd/config.h"
#include "pmd/eth_port_io.h"
#include "pmd/kernel_interface.h"

namespace uroce::pmd {

class KernelUplink {
 public:
  // EAL must be running. `pool` feeds the port's receive queues (and must
  // outlive the uplink). Tries af_xdp, then af_packet, as ec.kernel_io
  // allows; `notes` gets a line per fallback taken and why.
  static StatusOr<std::unique_ptr<KernelUplink>> Open(const EndpointConfig& ec, const KernelInterface& kif,
                                                      rte_mempool* pool, std::string* notes);
  ~KernelUplink();  // stops and removes the port (af_xdp: detaches the program)
  KernelUplink(const KernelUplink&) = delete;
  KernelUplink& operator=(const KernelUplink&) = delete;

  uint16_t port_id() const { return port_id_; }
  bool af_xdp() const { return af_xdp_; }
  uint16_t queues() const { return queues_; }
  MultiQueuePortIo* io() { return io_.get(); }
  // "net_af_xdp on eth0 (2 queues)", for the log.
  std::string Describe() const;

 private:
  KernelUplink() = default;
  Status OpenAfXdp(const EndpointConfig& ec, const KernelInterface& kif, rte_mempool* pool);
  Status OpenAfPacket(const EndpointConfig& ec, const KernelInterface& kif, rte_mempool* pool);
  Status StartProbed(const std::string& devargs, const EndpointConfig& ec, rte_mempool* pool, uint16_t queues);
  void RemovePort();
  Status BindUdpGuards();  // fails while anybody else holds UDP 4791

  std::string interface_;
  std::string vdev_;  // the probed device's name, empty when none
  uint16_t port_id_ = 0;
  uint16_t queues_ = 1;
  bool af_xdp_ = false;
  bool started_ = false;
  int program_fd_ = -1;  // the XDP object, a memfd the driver opens by path
  std::string lock_path_;
  int lock_fd_ = -1;     // one daemon per interface (flock, released on death)
  bool guarded_ = false;  // holds a share of the process's UDP 4791 guards
  std::unique_ptr<MultiQueuePortIo> io_;
};

}  // namespace uroce::pmd
