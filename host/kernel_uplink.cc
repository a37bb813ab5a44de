#include "host/kernel_uplink.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "pmd/port.h"
#include "pmd/port_setup.h"
#include "host/udp_port_holders.h"
#include "xdp/steer_program.h"

namespace uroce::host {

using pmd::CheckAfPacketFrameSize;
using pmd::MultiQueuePortIo;
using pmd::PortByName;
using pmd::PortConfig;
using pmd::StartPort;

namespace {

constexpr char kLockDirectory[] = "/run/uroce";
constexpr uint16_t kRoceV2Port = 4791;

std::string LockPath(const std::string& name, ino_t netns) {
  return std::string(kLockDirectory) + "/kernel-" + std::to_string(netns) + "-" + name + ".lock";
}

// One daemon per interface: the lock names the network namespace (its
// inode) and the interface, and dies with its holder, even by kill -9 (the
// file stays then, and the next daemon takes it over).
StatusOr<int> LockInterface(const std::string& name, std::string* lock_path) {
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns) != 0) ns.st_ino = 0;
  if (mkdir(kLockDirectory, 0755) != 0 && errno != EEXIST) {
    return IoError(std::string("cannot create ") + kLockDirectory + ": " + std::strerror(errno));
  }
  const std::string path = LockPath(name, ns.st_ino);
  *lock_path = path;
  // The holder removes the file when it stops (with the lock held): a file
  // we locked after that is not the one at the path any more, so we look
  // again (a few times; each round means another daemon came and went).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("cannot open " + path + ": " + std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      return AlreadyExists("another uroce daemon uses interface " + name + " (" + path + " is locked)");
    }
    struct stat held {}, named {};
    if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      return fd;
    }
    close(fd);
  }
  return Unavailable("cannot lock " + path + ": it keeps being replaced");
}

// The XDP program attached to the interface now, if any: 0, or its id and
// name.
uint32_t AttachedProgram(uint32_t if_index, std::string* name) {
  uint32_t id = 0;
  if (bpf_xdp_query_id(static_cast<int>(if_index), 0, &id) != 0 || id == 0) return 0;
  const int fd = bpf_prog_get_fd_by_id(id);
  if (fd >= 0) {
    bpf_prog_info info{};
    uint32_t length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &length) == 0) *name = info.name;
    close(fd);
  }
  return id;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

StatusOr<std::unique_ptr<KernelUplink>> KernelUplink::Open(const EndpointPortConfig& ec, const KernelInterface& kif,
                                                           rte_mempool* pool, std::string* notes) {
  std::unique_ptr<KernelUplink> up(new KernelUplink());
  up->interface_ = kif.name;
  auto lock = LockInterface(kif.name, &up->lock_path_);
  if (!lock.ok()) return lock.status();
  up->lock_fd_ = *lock;
  if (!kif.up) return FailedPrecondition("interface " + kif.name + " is down (ip link set " + kif.name + " up)");
  if (ec.mtu > kif.mtu) {
    return InvalidArgument("mtu " + std::to_string(ec.mtu) + " is above interface " + kif.name + "'s mtu " +
                           std::to_string(kif.mtu));
  }
  // Port 4791 is held before any frame flows: whoever else held it would
  // receive every RoCE frame the kernel sees (BindUdpGuards).
  UROCE_RETURN_IF_ERROR(up->BindUdpGuards());
  Status xdp = NotSupported("kernel_io = af_packet");
  if (ec.kernel_io != KernelIo::kAfPacket) {
    xdp = up->OpenAfXdp(ec, kif, pool, notes);
    if (xdp.ok()) return up;
    up->RemovePort();
    if (ec.kernel_io == KernelIo::kAfXdp) return xdp;
    *notes += "af_xdp on " + kif.name + " failed (" + xdp.message() +
              "); falling back to af_packet: the kernel sees every RoCE frame as well\n";
  }
  Status packet = up->OpenAfPacket(ec, kif, pool);
  if (!packet.ok()) {
    up->RemovePort();
    return packet;
  }
  return up;
}

Status KernelUplink::OpenAfXdp(const EndpointPortConfig& ec, const KernelInterface& kif, rte_mempool* pool,
                               std::string* notes) {
  std::string name;
  const uint32_t id = AttachedProgram(kif.if_index, &name);
  if (id != 0) {
    // Ours, left by a daemon that died (we hold the interface's lock, so no
    // live daemon uses it): replace it. Anybody else's stays.
    if (name != xdp::kSteerProgramName) {
      return FailedPrecondition("interface " + kif.name + " already runs XDP program " + std::to_string(id) + " (" +
                                name + ")");
    }
    if (bpf_xdp_detach(static_cast<int>(kif.if_index), 0, nullptr) != 0) {
      return IoError("cannot detach the stale uroce XDP program " + std::to_string(id) + " from " + kif.name);
    }
  }
  // The driver loads the program from a file name: a memory file, reached
  // through /proc, so nothing is left on disk.
  program_fd_ = memfd_create("uroce_steer.bpf.o", MFD_CLOEXEC);
  if (program_fd_ < 0) return IoError(Errno("memfd_create"));
  const std::string_view object = xdp::SteerProgramObject();
  if (write(program_fd_, object.data(), object.size()) != static_cast<ssize_t>(object.size())) {
    return IoError(Errno("writing the XDP program"));
  }
  queues_ = static_cast<uint16_t>(std::min<uint32_t>(kif.queues, 64));
  vdev_ = "net_af_xdp_" + kif.name;
  const std::string devargs = vdev_ + ",iface=" + kif.name + ",start_queue=0,queue_count=" + std::to_string(queues_) +
                              ",xdp_prog=/proc/self/fd/" + std::to_string(program_fd_);
  UROCE_RETURN_IF_ERROR(StartProbed(devargs, ec, pool, queues_));
  // The driver attached the program when the port's queues were set up.
  // Until its addresses are filled in it passes all RoCE to the kernel,
  // where the guards hold UDP 4791; from then until `enabled` it drops RoCE
  // for those addresses.
  UROCE_RETURN_IF_ERROR(ConfigureSteering(kif.if_index, ec.gids, kif.mac));
  if (queues_ < kif.queues) {
    *notes += "interface " + kif.name + " has " + std::to_string(kif.queues) + " queues and uroce opened sockets on " +
              std::to_string(queues_) + ": RoCE the NIC puts on queue " + std::to_string(queues_) +
              " or above is dropped (xdp no_socket in STATS); steer UDP port 4791 to queues below " +
              std::to_string(queues_) + " (ethtool -L or -N)\n";
  }
  af_xdp_ = true;
  return Status::Ok();
}

namespace {

// One of the attached program's maps (`map_ids`), by the name the kernel
// reports, checked against the sizes the program declares
// (xdp/uroce_steer.bpf.c).
StatusOr<int> ProgramMap(const std::vector<uint32_t>& map_ids, const char* name, uint32_t key_size,
                         uint32_t value_size) {
  for (uint32_t id : map_ids) {
    const int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &length) == 0 && std::strcmp(info.name, name) == 0) {
      if (info.key_size != key_size || info.value_size != value_size) {
        close(fd);
        return FailedPrecondition(std::string("the XDP program's map ") + name + " is not the one uroce knows");
      }
      return fd;
    }
    close(fd);
  }
  return NotFound(std::string("the XDP program has no map ") + name);
}

}  // namespace

Status KernelUplink::ConfigureSteering(uint32_t if_index, const std::vector<transport::Gid>& gids,
                                       const transport::MacAddress& mac) {
  if (gids.size() > xdp::kSteerAddresses) {
    return InvalidArgument("af_xdp steers at most " + std::to_string(xdp::kSteerAddresses) + " addresses, not " +
                           std::to_string(gids.size()));
  }
  // The program DPDK attached (with XDP_FLAGS_UPDATE_IF_NOEXIST, so no
  // other one), found as bpftool would: its id, then its maps' ids
  // (bpf(2) BPF_OBJ_GET_INFO_BY_FD). We loaded it, so we may open them.
  uint32_t id = 0;
  if (bpf_xdp_query_id(static_cast<int>(if_index), 0, &id) != 0 || id == 0) {
    return IoError("no XDP program is attached to " + interface_ + " after the af_xdp port started");
  }
  const int prog_fd = bpf_prog_get_fd_by_id(id);
  if (prog_fd < 0) return IoError(Errno("opening the XDP program"));
  bpf_prog_info info{};
  uint32_t length = sizeof(info);
  std::vector<uint32_t> map_ids;
  int got = bpf_obj_get_info_by_fd(prog_fd, &info, &length);
  if (got == 0 && info.nr_map_ids > 0) {
    map_ids.resize(info.nr_map_ids);
    const uint32_t maps = info.nr_map_ids;
    info = bpf_prog_info{};
    info.nr_map_ids = maps;
    info.map_ids = reinterpret_cast<uintptr_t>(map_ids.data());
    length = sizeof(info);
    got = bpf_obj_get_info_by_fd(prog_fd, &info, &length);
    map_ids.resize(std::min<uint32_t>(maps, info.nr_map_ids));
  }
  close(prog_fd);
  if (got != 0) return IoError("cannot read the XDP program's maps: " + std::string(std::strerror(-got)));
  if (std::strcmp(info.name, xdp::kSteerProgramName) != 0) {
    return FailedPrecondition("interface " + interface_ + " runs XDP program " + std::to_string(id) + " (" +
                              info.name + "), not uroce's");
  }
  auto addresses = ProgramMap(map_ids, xdp::kAddressesMapName, sizeof(transport::Gid), 1);
  if (!addresses.ok()) return addresses.status();
  Status filled = Status::Ok();
  const uint8_t ours = 1;
  for (const transport::Gid& gid : gids) {
    if (bpf_map_update_elem(*addresses, gid.data(), &ours, BPF_ANY) != 0) {
      filled = IoError(Errno("filling the XDP program's addresses"));
      break;
    }
  }
  close(*addresses);
  UROCE_RETURN_IF_ERROR(filled);
  auto config = ProgramMap(map_ids, xdp::kConfigMapName, sizeof(uint32_t), sizeof(xdp::SteerConfig));
  if (!config.ok()) return config.status();
  steer_config_fd_ = *config;
  auto counters = ProgramMap(map_ids, xdp::kCountersMapName, sizeof(uint32_t), sizeof(uint64_t));
  if (!counters.ok()) return counters.status();
  steer_counters_fd_ = *counters;
  // The MAC first, then enabled, in two writes: an array map's update is a
  // copy the program may read halfway, and the byte `enabled` alone turns
  // the steering on once everything else is in place.
  xdp::SteerConfig c{};
  std::memcpy(c.mac, mac.data(), sizeof(c.mac));
  const uint32_t zero = 0;
  if (bpf_map_update_elem(steer_config_fd_, &zero, &c, BPF_ANY) != 0) {
    return IoError(Errno("setting the XDP program's MAC"));
  }
  c.enabled = 1;
  if (bpf_map_update_elem(steer_config_fd_, &zero, &c, BPF_ANY) != 0) {
    return IoError(Errno("enabling the XDP program"));
  }
  return Status::Ok();
}

StatusOr<KernelUplink::XdpCounters> KernelUplink::ReadXdpCounters() const {
  if (steer_counters_fd_ < 0) return FailedPrecondition("not an af_xdp uplink");
  // A per-CPU array's value is one slot per possible CPU (bpf(2),
  // BPF_MAP_TYPE_PERCPU_ARRAY), each rounded up to 8 bytes.
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return IoError("cannot count the possible CPUs");
  std::vector<uint64_t> values(static_cast<size_t>(cpus));
  XdpCounters sums{};
  for (uint32_t i = 0; i < sums.size(); ++i) {
    if (bpf_map_lookup_elem(steer_counters_fd_, &i, values.data()) != 0) {
      return IoError(Errno("reading the XDP program's counters"));
    }
    for (uint64_t v : values) sums[i] += v;
  }
  return sums;
}

Status KernelUplink::OpenAfPacket(const EndpointPortConfig& ec, const KernelInterface& kif, rte_mempool* pool) {
  // Ring frames that hold the largest frame of this MTU whole (see
  // CheckAfPacketFrameSize: tpacket's header comes first), tiling blocks of
  // whole pages.
  const uint32_t page = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  const uint32_t largest = std::min<uint32_t>(ec.mtu, 4096 + 128) + 14;
  const uint32_t frame = (66 + largest + 255) / 256 * 256;
  const uint32_t block = std::lcm(frame, page);
  queues_ = 1;
  vdev_ = "net_af_packet_" + kif.name;
  const std::string devargs = vdev_ + ",iface=" + kif.name + ",qpairs=1,framesz=" + std::to_string(frame) +
                              ",blocksz=" + std::to_string(block) + ",framecnt=" + std::to_string(block / frame * 64);
  UROCE_RETURN_IF_ERROR(CheckAfPacketFrameSize(devargs, ec.mtu));
  UROCE_RETURN_IF_ERROR(StartProbed(devargs, ec, pool, 1));
  af_xdp_ = false;
  return Status::Ok();
}

Status KernelUplink::StartProbed(const std::string& devargs, const EndpointPortConfig& ec, rte_mempool* pool,
                                 uint16_t queues) {
  if (rte_dev_probe(devargs.c_str()) != 0) {
    const std::string device = vdev_;
    vdev_.clear();
    return IoError("DPDK could not create " + device + " (its log above says why)");
  }
  auto id = PortByName(vdev_);
  if (!id.ok()) return IoError(vdev_ + " made no port");
  port_id_ = *id;
  PortConfig port;
  port.rx_pool = pool;
  port.rx_queues = queues;
  port.tx_queues = queues;  // af_xdp pairs every receive queue with a transmit queue
  port.rx_descriptors = ec.rx_descriptors;
  port.tx_descriptors = ec.tx_descriptors;
  port.mtu = static_cast<uint16_t>(ec.mtu);
  port.promiscuous = false;  // frames for the host's MAC only, as the kernel gets them
  UROCE_RETURN_IF_ERROR(StartPort(port_id_, port));
  started_ = true;
  io_ = std::make_unique<MultiQueuePortIo>(port_id_, queues);
  return Status::Ok();
}

// The guard sockets are the process's, shared by its kernel uplinks (a
// second bind of port 4791 would fail): the first uplink binds them, the
// last one to close closes them. Control path, one thread.
namespace {
int g_guard_fds[2] = {-1, -1};
int g_guard_users = 0;
}  // namespace

Status KernelUplink::BindUdpGuards() {
  if (g_guard_users != 0) {
    ++g_guard_users;
    guarded_ = true;
    return Status::Ok();
  }
  // Bound, never read: RoCE frames the kernel also gets (af_packet shows it
  // every frame; af_xdp passes it those that arrive before the program's
  // addresses are filled in) fill the guards' buffers and are dropped
  // there, instead of drawing ICMP port unreachable. And nobody else may hold the port: a local user who bound
  // 4791 first would receive, from the kernel, the headers and payload of
  // every SEND, WRITE and READ response to every attached process. So fail
  // closed. No SO_REUSEADDR or SO_REUSEPORT: without them Linux refuses any
  // later bind of port 4791 on this namespace, on a wildcard, a specific
  // address or a device (ip(7), udp(7)), and a bind of ours fails while any
  // such socket exists.
  const int families[2] = {AF_INET, AF_INET6};
  int fds[2] = {-1, -1};
  auto close_held = [&fds] {
    for (int held : fds) {
      if (held >= 0) close(held);
    }
  };
  for (int i = 0; i < 2; ++i) {
    const int fd = socket(families[i], SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (errno == EAFNOSUPPORT) continue;  // no IPv6 in this kernel: nothing to deliver to either
      const Status error = IoError(Errno("socket for the UDP 4791 guard"));
      close_held();
      return error;
    }
    int bound = -1;
    if (families[i] == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(kRoceV2Port);
      bound = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      const int only = 1;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, sizeof(only));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(kRoceV2Port);
      bound = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    if (bound != 0) {
      const int bind_errno = errno;
      close(fd);
      close_held();
      const std::string family = i == 0 ? "IPv4" : "IPv6";
      if (bind_errno != EADDRINUSE) {
        return IoError("cannot bind UDP port 4791 (" + family + "): " + std::strerror(bind_errno));
      }
      std::string who;
      for (const UdpPortHolder& h : UdpPortHolders(kRoceV2Port)) {
        who += (who.empty() ? "" : "; ") + DescribeHolder(h);
      }
      if (who.empty()) who = "somebody this process cannot see";
      return FailedPrecondition("UDP port 4791 (" + family + ") is held by " + who +
                                ": it would receive every RoCE frame the kernel sees; refusing to start (stop it, "
                                "or run the daemon in a network namespace of its own)");
    }
    fds[i] = fd;
  }
  g_guard_fds[0] = fds[0];
  g_guard_fds[1] = fds[1];
  g_guard_users = 1;
  guarded_ = true;
  return Status::Ok();
}

void KernelUplink::RemovePort() {
  io_.reset();
  if (!vdev_.empty()) {
    if (started_) rte_eth_dev_stop(port_id_);
    // Removing the device closes the port: the driver frees its rings'
    // buffers, and af_xdp detaches its program.
    rte_eal_hotplug_remove("vdev", vdev_.c_str());
    vdev_.clear();
  }
  started_ = false;
  for (int* fd : {&steer_config_fd_, &steer_counters_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  if (program_fd_ >= 0) {
    close(program_fd_);
    program_fd_ = -1;
  }
}

KernelUplink::~KernelUplink() {
  RemovePort();
  if (guarded_ && --g_guard_users == 0) {
    for (int& fd : g_guard_fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  if (lock_fd_ >= 0) {
    // Removed while still held (see LockInterface), so no file is left
    // behind by a daemon that stopped.
    unlink(lock_path_.c_str());
    close(lock_fd_);
  }
}

std::string KernelUplink::Describe() const {
  return std::string(af_xdp_ ? "net_af_xdp" : "net_af_packet") + " on " + interface_ + " (" + std::to_string(queues_) +
         (queues_ == 1 ? " queue)" : " queues)");
}

}  // namespace uroce::host
