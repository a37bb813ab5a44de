// Who holds a local UDP port: read from /proc/net/udp and /proc/net/udp6 of
// the caller's network namespace (proc(5)), each socket's inode matched to
// the processes that have it open (/proc/PID/fd). A kernel uplink refuses
// to start while anyone but uroce holds port 4791, and says who does.
//
// Control path only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::host {

struct UdpPortHolder {
  bool ipv6 = false;
  std::string local_address;  // as the kernel prints it, e.g. "00000000" (0.0.0.0)
  uid_t uid = 0;
  uint64_t inode = 0;        // 0: a socket of the kernel's own (rdma_rxe, say)
  std::vector<pid_t> pids;   // the processes with the socket open, when visible
  std::vector<std::string> programs;  // their /proc/PID/comm, same order
};

// The rows of one /proc/net/udp{,6} text whose local port is `port`. Pure:
// rows that do not parse are skipped.
std::vector<UdpPortHolder> ParseProcNetUdp(std::string_view text, bool ipv6, uint16_t port);

// Every holder of `port` in this network namespace, pids filled in.
std::vector<UdpPortHolder> UdpPortHolders(uint16_t port);

// "uid 65534 (pid 4242 python3)", or "the kernel (inode 0: rdma_rxe?)".
std::string DescribeHolder(const UdpPortHolder& holder);

}  // namespace uroce::host
