// rte_intr_instance_alloc and its setters are experimental in DPDK 22.11
// (the version uroce builds against); RunOnInterruptThread needs them to
// make an interrupt source of its own. Before any DPDK header.
#define ALLOW_EXPERIMENTAL_API 1

#include "pmd/port.h"

#include <net/if.h>
#include <rte_errno.h>
#include <rte_interrupts.h>
#include <rte_log.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "pmd/log.h"
#include "pmd/memif_hangup_guard.h"

namespace uroce::pmd {
namespace {

// RunOnInterruptThread's mailbox: an eventfd registered as one more source
// of EAL's interrupt thread, whose callback runs the job posted. That thread
// runs its callbacks one at a time, so the job never runs beside a driver's.
// The source is never unregistered: every unregistration makes the thread
// rebuild its epoll set from all sources' handles, and memif leaves its
// listener's handle there in DPDK memory (its close never unregisters it); a
// rebuild late at exit, after rte_eal_cleanup unmapped that memory, would
// fault. For the same reason this handle lives in malloc's memory (PRIVATE).
class InterruptThreadJobs {
 public:
  // Leaked on purpose: the interrupt thread outlives exit()'s destructors.
  static InterruptThreadJobs& Get() {
    static InterruptThreadJobs* const jobs = new InterruptThreadJobs;
    return *jobs;
  }

  // False when the job did not run there (no source could be registered,
  // or the thread did not take it in time): the caller runs it itself.
  bool Run(const std::function<void()>& job) {
    std::lock_guard<std::mutex> one_job_at_a_time(post_);
    if (!Register()) return false;
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &job;
    done_ = false;
    const uint64_t one = 1;
    if (write(fd_, &one, sizeof(one)) != static_cast<ssize_t>(sizeof(one))) {
      job_ = nullptr;
      return false;
    }
    // The thread is busy only while a driver's callback runs (memif's
    // handshake or disconnect: microseconds); a thread that does not come
    // in 10 s is stuck, and the caller is better off running the job.
    if (!done_cv_.wait_for(lock, std::chrono::seconds(10), [this] { return done_; })) {
      if (job_ != nullptr) {
        job_ = nullptr;
        UROCE_LOG(WARNING, kPmd, "EAL's interrupt thread took no job for 10 s; running it here\n");
        return false;
      }
      done_cv_.wait(lock, [this] { return done_; });  // taken: it is running now
    }
    return true;
  }

 private:
  bool Register() {
    if (fd_ >= 0) return true;
    if (failed_) return false;
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rte_intr_handle* handle = fd < 0 ? nullptr : rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
    if (handle != nullptr && rte_intr_fd_set(handle, fd) == 0 && rte_intr_type_set(handle, RTE_INTR_HANDLE_EXT) == 0 &&
        rte_intr_callback_register(handle, &InterruptThreadJobs::OnEvent, this) == 0) {
      handle_ = handle;  // kept (EAL copied it) so that it is never a leak
      fd_ = fd;          // the callback reads fd_ only after a job is posted, under mutex_
      return true;
    }
    if (handle != nullptr) rte_intr_instance_free(handle);
    if (fd >= 0) close(fd);
    failed_ = true;
    return false;
  }

  static void OnEvent(void* arg) {
    auto* self = static_cast<InterruptThreadJobs*>(arg);
    std::unique_lock<std::mutex> lock(self->mutex_);
    // EAL reads nothing from an EXT source, and epoll here is level
    // triggered: unread, the eventfd would call back forever.
    uint64_t count;
    (void)!read(self->fd_, &count, sizeof(count));
    const std::function<void()>* job = self->job_;
    if (job == nullptr) return;  // an event whose job was taken back (timeout)
    self->job_ = nullptr;
    lock.unlock();
    (*job)();
    lock.lock();
    self->done_ = true;
    self->done_cv_.notify_all();
  }

  std::mutex post_;   // one caller at a time
  std::mutex mutex_;  // job_, done_; fd_ is set before the first job is posted
  std::condition_variable done_cv_;
  const std::function<void()>* job_ = nullptr;
  bool done_ = false;
  int fd_ = -1;
  rte_intr_handle* handle_ = nullptr;
  bool failed_ = false;
};

bool IsMemifPort(uint16_t port_id) {
  rte_eth_dev_info info;
  return rte_eth_dev_info_get(port_id, &info) == 0 && info.driver_name != nullptr &&
         std::strcmp(info.driver_name, "net_memif") == 0;
}

Status EthError(const char* what, uint16_t port_id, int ret) {
  return IoError(std::string(what) + " on port " + std::to_string(port_id) + ": " + rte_strerror(-ret));
}

// The MTU of the kernel network interface `if_index` in this process's
// network namespace (netdevice(7), SIOCGIFMTU), or -1.
int KernelInterfaceMtu(uint32_t if_index) {
  ifreq req;
  std::memset(&req, 0, sizeof(req));
  if (if_indextoname(if_index, req.ifr_name) == nullptr) return -1;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int ret = ioctl(fd, SIOCGIFMTU, &req);
  close(fd);
  return ret == 0 ? req.ifr_mtu : -1;
}

// PortConfig::mac: gives the port `wanted` as its address. False when it
// cannot take it (see PortConfig::mac) and must be promiscuous instead.
bool TakeMacAddress(uint16_t port_id, const rte_eth_dev_info& info, const std::array<uint8_t, 6>& wanted) {
  rte_ether_addr mac;
  std::memcpy(mac.addr_bytes, wanted.data(), 6);
  rte_ether_addr current;
  if (rte_eth_macaddr_get(port_id, &current) == 0 && rte_is_same_ether_addr(&current, &mac)) return true;
  if (info.if_index != 0) return false;  // the kernel's address: not ours to change
  // Before the start: ethdev writes the default address into the NIC again
  // at every start (its configuration replay), so it survives restarts.
  // Fails with ENOTSUP, or where a NIC refuses it.
  return rte_eth_dev_default_mac_addr_set(port_id, &mac) == 0;
}

}  // namespace

Status StartPort(uint16_t port_id, const PortConfig& config) {
  if (!rte_eth_dev_is_valid_port(port_id)) return NotFound("no DPDK port " + std::to_string(port_id));
  if (config.rx_pool == nullptr) return InvalidArgument("port " + std::to_string(port_id) + " needs an rx_pool");
  if (config.rx_queues == 0 || config.tx_queues == 0) return InvalidArgument("a port needs rx and tx queues");

  rte_eth_dev_info info;
  int ret = rte_eth_dev_info_get(port_id, &info);
  if (ret != 0) return EthError("rte_eth_dev_info_get", port_id, ret);
  if (config.rx_queues > info.max_rx_queues || config.tx_queues > info.max_tx_queues) {
    return InvalidArgument("port " + std::to_string(port_id) + " (" + info.driver_name + ") offers " +
                           std::to_string(info.max_rx_queues) + " rx / " + std::to_string(info.max_tx_queues) +
                           " tx queues");
  }

  // Before the port starts: its peer may come and go from then on.
  if (info.driver_name != nullptr && std::strcmp(info.driver_name, "net_memif") == 0) {
    (void)InstallMemifHangupGuard();  // on failure memif runs as before, and a warning says so
  }

  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  ret = rte_eth_dev_configure(port_id, config.rx_queues, config.tx_queues, &conf);
  if (ret != 0) return EthError("rte_eth_dev_configure", port_id, ret);

  uint16_t rx_desc = config.rx_descriptors;
  uint16_t tx_desc = config.tx_descriptors;
  ret = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_desc, &tx_desc);
  if (ret != 0) return EthError("rte_eth_dev_adjust_nb_rx_tx_desc", port_id, ret);

  const int socket = rte_eth_dev_socket_id(port_id);
  const unsigned queue_socket = socket < 0 ? SOCKET_ID_ANY : static_cast<unsigned>(socket);
  for (uint16_t q = 0; q < config.rx_queues; ++q) {
    ret = rte_eth_rx_queue_setup(port_id, q, rx_desc, queue_socket, nullptr, config.rx_pool);
    if (ret != 0) return EthError("rte_eth_rx_queue_setup", port_id, ret);
  }
  for (uint16_t q = 0; q < config.tx_queues; ++q) {
    ret = rte_eth_tx_queue_setup(port_id, q, tx_desc, queue_socket, nullptr);
    if (ret != 0) return EthError("rte_eth_tx_queue_setup", port_id, ret);
  }
  if (config.mtu != 0) {
    ret = rte_eth_dev_set_mtu(port_id, config.mtu);
    // Ports that are views of a kernel interface (af_packet, tap: the driver
    // gives its if_index) carry what that interface carries, but DPDK 22.11's
    // af_packet and tap drivers report 1518 bytes as their largest frame
    // whatever the interface, so ethdev refuses any MTU above 1500 (seen:
    // "Frame size (9018) > device max frame size (1518)"). There the
    // interface's own MTU decides: it must be at least ours; it is left as
    // the administrator set it.
    if (ret == -EINVAL && info.if_index != 0) {
      const int kernel_mtu = KernelInterfaceMtu(info.if_index);
      if (kernel_mtu < 0) return EthError("rte_eth_dev_set_mtu", port_id, ret);
      if (kernel_mtu < config.mtu) {
        return InvalidArgument("port " + std::to_string(port_id) + " (" + info.driver_name + "): mtu " +
                               std::to_string(config.mtu) + " is above its kernel interface's mtu " +
                               std::to_string(kernel_mtu) + " (raise it with `ip link set DEV mtu N`)");
      }
      ret = 0;
    }
    if (ret != 0 && ret != -ENOTSUP) return EthError("rte_eth_dev_set_mtu", port_id, ret);
  }
  bool promiscuous = config.promiscuous;
  if (config.mac && !TakeMacAddress(port_id, info, *config.mac)) promiscuous = true;
  if (!config.start) return Status::Ok();
  ret = rte_eth_dev_start(port_id);
  if (ret != 0) return EthError("rte_eth_dev_start", port_id, ret);
  if (promiscuous) {
    // ENOTSUP: a port that filters nothing (net_ring, memif).
    ret = rte_eth_promiscuous_enable(port_id);
    if (ret != 0 && ret != -ENOTSUP) return EthError("rte_eth_promiscuous_enable", port_id, ret);
  }
  return JoinSolicitedNodeGroups(port_id, config.ipv6_addresses);
}

rte_ether_addr SolicitedNodeMac(const std::array<uint8_t, 16>& ipv6_address) {
  // ff02::1:ffXX:XXXX (RFC 4291 §2.7.1) mapped to 33:33 + its last 32 bits
  // (RFC 2464 §7).
  return rte_ether_addr{{0x33, 0x33, 0xff, ipv6_address[13], ipv6_address[14], ipv6_address[15]}};
}

Status JoinSolicitedNodeGroups(uint16_t port_id, const std::vector<std::array<uint8_t, 16>>& ipv6_addresses) {
  if (ipv6_addresses.empty()) return Status::Ok();
  std::vector<rte_ether_addr> groups;
  for (const auto& address : ipv6_addresses) {
    const rte_ether_addr mac = SolicitedNodeMac(address);
    bool seen = false;
    for (const rte_ether_addr& g : groups) seen = seen || rte_is_same_ether_addr(&g, &mac);
    if (!seen) groups.push_back(mac);
  }
  int ret = rte_eth_dev_set_mc_addr_list(port_id, groups.data(), static_cast<uint32_t>(groups.size()));
  if (ret == 0) return Status::Ok();
  // No multicast list in this driver (or too short a one): all multicast.
  ret = rte_eth_allmulticast_enable(port_id);
  if (ret == 0 || ret == -ENOTSUP) return Status::Ok();
  return EthError("rte_eth_allmulticast_enable", port_id, ret);
}

void RunOnInterruptThread(const std::function<void()>& job) {
  if (rte_thread_is_intr() || !InterruptThreadJobs::Get().Run(job)) job();
}

Status ClosePort(uint16_t port_id) {
  if (!rte_eth_dev_is_valid_port(port_id)) return NotFound("no DPDK port " + std::to_string(port_id));
  int stopped = 0, closed = 0;
  auto stop_and_close = [&] {
    stopped = rte_eth_dev_stop(port_id);
    if (stopped == 0) closed = rte_eth_dev_close(port_id);
  };
  // A memif port is also torn down by EAL's interrupt thread, when its peer
  // disconnects (memif_disconnect: unmaps and frees its regions and control
  // channel). rte_eth_dev_stop runs memif_disconnect as well, and
  // rte_eth_dev_close frees the queues and the port's data, with nothing in
  // the driver to keep the two threads apart: both sides of a memif pair
  // closing at once (uroce perf's client and server after the last run)
  // freed the same regions twice and corrupted the heap (SIGSEGV). On the
  // interrupt thread the close runs before or after the peer's disconnect,
  // never during it.
  if (IsMemifPort(port_id)) {
    RunOnInterruptThread(stop_and_close);
  } else {
    stop_and_close();
  }
  if (stopped != 0) return EthError("rte_eth_dev_stop", port_id, stopped);
  if (closed != 0) return EthError("rte_eth_dev_close", port_id, closed);
  return Status::Ok();
}

StatusOr<uint16_t> PortByName(const std::string& name) {
  uint16_t port_id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) != 0) {
    return NotFound("no DPDK port named '" + name + "'");
  }
  return port_id;
}

}  // namespace uroce::pmd
