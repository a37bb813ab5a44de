#include "pmd/port_setup.h"

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "pmd/eal.h"
#include "pmd/log.h"

namespace uroce::pmd {


std::string VdevArg(const std::string& vdev, const std::string& key) {
  size_t pos = vdev.find(',');
  while (pos != std::string::npos) {
    const size_t start = pos + 1;
    const size_t next = vdev.find(',', start);
    const std::string item = vdev.substr(start, next == std::string::npos ? std::string::npos : next - start);
    if (item.rfind(key + "=", 0) == 0) return item.substr(key.size() + 1);
    pos = next;
  }
  return "";
}

namespace {

// memif's server refuses to start when its socket file exists ("Address
// already in use", DPDK's memif guide); a file nobody accepts on is what a
// killed server leaves behind, and is removed.
void RemoveStaleMemifSocket(const std::string& vdev) {
  if (vdev.rfind("net_memif", 0) != 0 || VdevArg(vdev, "role") != "server") return;
  if (VdevArg(vdev, "socket-abstract") != "no") return;  // abstract sockets leave no file
  const std::string path = VdevArg(vdev, "socket");
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path) || access(path.c_str(), F_OK) != 0) return;
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  if (fd < 0) return;
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const bool refused = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == ECONNREFUSED;
  close(fd);
  if (refused) unlink(path.c_str());
}

// "0-1" asks EAL to pin lcore 1 to CPU 1; on a machine (or cgroup) without
// CPU 1, EAL refuses to start. Such lcores run on the first CPU this process
// may use instead ("1@0"): slower when they spin, but the demo and tests
// still run anywhere. Explicit lcore@cpu maps are left as they are.
std::string FitLcoresToCpus(const std::string& lcores) {
  if (lcores.find_first_of("@(") != std::string::npos) return lcores;
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return lcores;
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &cpus)) first = c;
  }
  if (first < 0) return lcores;
  std::string out;
  bool changed = false;
  for (unsigned l : ParseLcoreList(lcores)) {
    out += out.empty() ? "" : ",";
    out += std::to_string(l);
    if (l >= CPU_SETSIZE || !CPU_ISSET(l, &cpus)) {
      out += "@" + std::to_string(first);
      changed = true;
    }
  }
  if (changed) UROCE_LOG(WARNING, kPmd, "lcores %s: not every CPU is here; running them as %s\n", lcores.c_str(), out.c_str());
  return changed ? out : lcores;
}

}  // namespace

// Buffers for the largest frame the port may carry: RoCE frames are at most
// a 4096-byte path MTU plus headers; af_packet wants 2 KiB at least.
uint16_t DataRoomFor(uint32_t mtu) {
  const uint32_t frame = std::min<uint32_t>(mtu, 4096 + 128) + 128;
  return static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + std::max<uint32_t>(2048, frame));
}

// af_packet's ring frames (devarg framesz, 2048 by default) hold the frame
// behind the kernel's tpacket2 header: tpacket_rcv puts the MAC header at
// TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14 = 66 bytes into the frame and cuts
// what does not fit. RoCE frames up to the largest this MTU allows (as
// DataRoomFor) must fit whole, or every long one fails its ICRC; frames above
// that (non-RoCE jumbo traffic on the same interface) may be cut. And DPDK
// 22.11's af_packet finds receive frame i at i * framesz in the ring, while
// the kernel starts every block (devarg blocksz, a page by default) afresh:
// unless frames tile blocks exactly, it reads the wrong places and receives
// nothing (seen: framesz=4304,blocksz=8192, every ARP reply lost).
Status CheckAfPacketFrameSize(const std::string& port, uint32_t mtu) {
  constexpr uint32_t kMacOffset = 66;
  auto arg = [&](const char* key, uint32_t fallback) {
    const std::string v = VdevArg(port, key);
    return v.empty() ? fallback : static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 0));
  };
  const uint32_t page = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  const uint32_t framesz = arg("framesz", 2048);
  const uint32_t blocksz = arg("blocksz", page);
  const uint32_t largest = std::min<uint32_t>(mtu, 4096 + 128) + RTE_ETHER_HDR_LEN;
  if (framesz >= kMacOffset + largest && framesz > 0 && blocksz % framesz == 0) return Status::Ok();
  // Multiples of 256 bytes tile blocks of a few pages.
  const uint32_t need = (kMacOffset + largest + 255) / 256 * 256;
  const uint32_t block = std::lcm(need, page);
  return InvalidArgument("mtu " + std::to_string(mtu) + " over af_packet needs ring frames of " +
                         std::to_string(kMacOffset + largest) + " bytes or more that tile its blocks (framesz " +
                         std::to_string(framesz) + ", blocksz " + std::to_string(blocksz) + " given); add framesz=" +
                         std::to_string(need) + ",blocksz=" + std::to_string(block) + " to the port arguments");
}

Status StartEalFor(const EalConfig& eal) {
  for (const std::string& vdev : eal.vdevs) RemoveStaleMemifSocket(vdev);
  EalConfig fitted = eal;
  fitted.lcores = FitLcoresToCpus(fitted.lcores);
  return StartEal(fitted);
}

}  // namespace uroce::pmd
