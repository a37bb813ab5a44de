#include "host/daemon.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <rte_ethdev.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "host/daemon_protocol.h"
#include "host/frame_switch.h"
#include "host/kernel_interface.h"
#include "host/kernel_neighbors.h"
#include "host/kernel_uplink.h"
#include "host/shm_channel.h"
#include "host/host_config.h"
#include "pmd/eth_port_io.h"
#include "pmd/mempool.h"
#include "pmd/port.h"
#include "pmd/port_setup.h"
#include "pmd/shutdown_signal.h"
#include "transport/address_text.h"

namespace uroce::host {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

static_assert(kDaemonCommIdShift == kSwitchCommIdShift, "the switch routes by the IDs the daemon leases");

// The inode of /proc/WHO/ns/pid (namespaces(7)): which pid namespace the
// process is in; 0 if it cannot be read (a process gone, or one this daemon
// may not look at).
uint64_t PidNamespaceOf(const std::string& who) {
  struct stat st{};
  if (stat(("/proc/" + who + "/ns/pid").c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// One attached process.
struct Session {
  int fd = -1;
  // Who connected, in the kernel's word (SO_PEERCRED, unix(7)): a process
  // may claim any pid in its ATTACH, so the claim is only logged.
  int64_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // Its pid namespace (the inode of /proc/PID/ns/pid; 0 if it could not be
  // read). Quotas and STATS go by uid and pid namespace together: a
  // container's processes (root in it, without a user namespace, is uid 0
  // here) are one owner apart from the host's and from every other
  // container's, and root in a container is not the host's root.
  uint64_t pid_ns = 0;
  uint64_t accepted_ns = 0;  // when it connected (attach_timeout_ms)
  std::string program;
  uint32_t slot = 0;  // 0: not attached yet
  // Its ports (host/shm_channel.h), one per uplink, in the uplinks' order.
  std::vector<std::unique_ptr<ShmChannel>> channels;
  std::vector<std::unique_ptr<ShmPortIo>> ios;
  // Its QPs connected to QPs on this host (PEER): local QPN -> the peer's
  // QPN. Keys are QPNs of its own lease, so at most 65536 entries. The same
  // records by the peer's slot, (slot, local QPN), so that a process's end
  // finds its peers without a walk over everybody's records. Changed only
  // through SwitchDaemon::SetPeer / ErasePeer / ClearPeers (they keep the per-uid
  // count too).
  std::map<uint32_t, uint32_t> peers;
  std::set<std::pair<uint32_t, uint32_t>> peers_by_slot;
  uint64_t peer_messages_refused = 0;  // malformed or not its own (the first few are logged)
  uint64_t peers_gone_told = 0;        // PEER_GONE sent to it
};

class SwitchDaemon final : public Daemon {
 public:
  SwitchDaemon(const DaemonConfig& config, const std::vector<EndpointPortConfig>& uplinks, DaemonReport report,
               std::optional<pmd::PortImpairment> uplink_faults)
      : config_(config), uplink_configs_(uplinks), report_(std::move(report)), uplink_faults_(std::move(uplink_faults)) {}
  ~SwitchDaemon() override { Stop(); }

  Status Listen() override;
  Status StartUplinks() override;
  void Run() override;
  void Stop() override;

 private:
  struct Uplink;
  // One report line (printf-style) to report_.
  void Log(const char* format, ...) __attribute__((format(printf, 2, 3)));
  Status StartPortUplink(Uplink& u);
  Status StartKernelUplink(Uplink& u);
  // The port the switch uses: `port`, or [impair] around it.
  transport::PacketIo* SwitchPortFor(Uplink& u, transport::PacketIo* port);
  void ServeControl(int timeout_us);
  void ServeNeighborQuestions(Uplink& u);
  void ServeLinkRequests(size_t uplink);
  void CloseLinksOf(uint32_t slot);
  // `s` let go of (or could not map) its link on `uplink` to `other`.
  void DeclineLink(Session& s, size_t uplink, uint32_t other);
  size_t LinksOf(uint32_t slot) const;
  Session* SessionOfSlot(uint32_t slot);
  // A notification, with one file or none; false if it could not be sent
  // now (never blocks the switch).
  bool Notify(Session& s, const std::string& text, int file);
  void RecheckNeighbors(Uplink& u, bool ask);
  bool IsHostAddress(const transport::Gid& gid) const;
  void Accept();
  void HandleMessage(Session& s);
  Status AttachSession(Session& s, const AttachRequest& request);
  void Release(Session& s);
  // Every process's line for an exempt viewer (below); any other viewer
  // sees only its own owner's processes.
  std::string StatsText(const Session& viewer) const;
  // No per-uid quota, never locked out: root's and the daemon's own uid's
  // processes in the daemon's own pid namespace (a container's root is not
  // exempt).
  bool Exempt(const Session& s) const {
    return (s.uid == 0 || s.uid == geteuid()) && own_pid_ns_ != 0 && s.pid_ns == own_pid_ns_;
  }
  // Quotas are per owner: a uid in one pid namespace.
  using Owner = std::pair<uid_t, uint64_t>;
  static Owner OwnerOf(const Session& s) { return {s.uid, s.pid_ns}; }
  // "uid U", and its pid namespace when that is not the daemon's (for refusals).
  std::string OwnerText(const Session& s) const;
  // CM ports the processes of `owner` listen on (the first switch's table:
  // every switch has the same).
  uint32_t ListensOf(const Owner& owner) const;
  // PEER records: every uid other than root's and the daemon's may keep at
  // most [daemon] max_peers_per_uid of them over all its processes.
  void SetPeer(Session& s, uint32_t qpn, uint32_t peer_qpn);
  void ErasePeer(Session& s, uint32_t qpn);
  void ClearPeers(Session& s);
  std::map<Owner, size_t> peers_of_owner_;
  const uint64_t own_pid_ns_ = PidNamespaceOf("self");
  static constexpr size_t kMaxPending = 16;       // sessions not attached, in all
  static constexpr size_t kMaxPendingPerUid = 4;  // ... of one uid (not exempt)
  uint64_t sessions_refused_ = 0;  // turned away (or closed for an exempt one)
  uint64_t attach_timeouts_ = 0;   // closed for not attaching in time
  std::string DevicesText() const;
  void Reply(Session& s, const std::string& text);
  void ReplyWithFiles(Session& s, const std::string& text, const std::vector<int>& files);
  uint32_t FreeSlot();
  // A process's counters over every uplink's switch.
  SwitchPortCounters SlotCounters(uint32_t slot) const;

  // One per [endpoint.NAME]: device uroceK of every attached process.
  struct Uplink {
    EndpointPortConfig config;
    std::string device;  // "uroce0", ...
    uint16_t port = 0;
    bool started = false;
    transport::MacAddress mac{};
    std::unique_ptr<pmd::EthPortIo> io;
    // A kernel interface's uplink (port = kernel:IFNAME) and the kernel's
    // neighbour table, with the processes' questions it has not answered yet.
    std::unique_ptr<KernelUplink> kernel;
    std::unique_ptr<KernelNeighbors> neighbors;
    struct PendingQuestion {
      NeighborQuestion question;
      std::chrono::steady_clock::time_point deadline;
    };
    std::vector<PendingQuestion> pending;
    uint64_t questions_over_quota = 0;  // not waited on: the asker had its share
    // [impair] between the switch and the port (uplink_faults_).
    std::unique_ptr<pmd::ImpairedPortIo> impaired;
    std::unique_ptr<FrameSwitch> sw;
  };

  // A direct link between two processes on one uplink (host/local_links.h).
  // The daemon keeps the file mapped: it marks it closed when either process
  // ends, and shows its traffic in STATS.
  struct LocalLink {
    size_t uplink = 0;
    uint32_t a = 0, b = 0;  // slots, a < b (a maps it as kDaemon: a -> b is "to process")
    std::unique_ptr<ShmChannel> file;
  };
  // Each link's file is real memory once its rings have gone round (about
  // 4 MiB at MTU 1500): a bounded number; beyond it the switch carries the
  // traffic.
  static constexpr size_t kMaxLinks = 256;
  // And per process, so that one process talking to every other cannot
  // take them all (a full mesh of 65 processes still fits).
  static constexpr size_t kMaxLinksPerProcess = 64;
  // And per uid other than root's and the daemon's (a link counts for the
  // uids of both ends), so that one user's processes leave links for others.
  static constexpr size_t kMaxLinksPerUid = kMaxLinks / 2;
  size_t LinksOfOwner(const Owner& owner) const;

  const DaemonConfig config_;
  const std::vector<EndpointPortConfig> uplink_configs_;
  const DaemonReport report_;
  const std::optional<pmd::PortImpairment> uplink_faults_;
  int listen_fd_ = -1;
  std::string socket_path_;
  pmd::MempoolPtr pool_;  // every uplink's and every process port's buffers
  unsigned pool_size_ = 0;
  std::vector<std::unique_ptr<Uplink>> uplinks_;
  std::vector<std::unique_ptr<Session>> sessions_;
  // When each slot was last released (steady clock, ns; 0: never), and the
  // draw among free slots (FreeSlot).
  std::array<uint64_t, kSwitchLastSlot + 1> released_ns_{};
  std::mt19937_64 slot_random_{std::random_device{}()};
  std::vector<pollfd> control_fds_;
  std::vector<LocalLink> links_;
  uint64_t links_made_ = 0, links_refused_ = 0, links_declined_ = 0;
  bool stopped_ = false;
};

void SwitchDaemon::Log(const char* format, ...) {
  if (!report_) return;
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, format, args);  // the whole line, however long
  va_end(args);
  std::string line(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(line.data(), line.size() + 1, format, again);
  va_end(again);
  report_(line);
}

Status SwitchDaemon::Listen() {
  socket_path_ = config_.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) return InvalidArgument("[daemon] socket: path too long");
  std::memcpy(addr.sun_path, socket_path_.data(), socket_path_.size());
  // Somebody answering there is a daemon already: refuse, and leave it be.
  int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  const bool answered = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  const int probe_errno = errno;
  close(probe);
  if (answered) {
    return AlreadyExists("another uroce daemon is running on " + socket_path_ +
                         " (stop it first, or give this one another [daemon] socket)");
  }
  if (probe_errno == ECONNREFUSED) unlink(socket_path_.c_str());  // left by a daemon that died
  // The socket's directory (/run/uroce by default).
  const size_t slash = socket_path_.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = socket_path_.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("cannot create " + dir + ": " + std::strerror(errno));
    }
    // Programs refuse a socket that others could replace
    // (CheckDaemonSocketPath): say so here, at once.
    struct stat dir_stat{};
    if (stat(dir.c_str(), &dir_stat) != 0 || !S_ISDIR(dir_stat.st_mode)) {
      return IoError(dir + " is not a directory");
    }
    if ((dir_stat.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (dir_stat.st_mode & S_ISVTX) == 0) {
      return FailedPrecondition(dir + " is writable by other users, who could replace the control socket: give the "
                                "daemon a directory of its own ([daemon] socket)");
    }
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  // Mode 0660: the owner and its group attach (the umask must not let others
  // in between bind and chmod).
  const mode_t old_mask = umask(0117);
  const int bound = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  umask(old_mask);
  if (bound != 0) return IoError("cannot bind " + socket_path_ + ": " + std::strerror(bind_errno));
  if (chmod(socket_path_.c_str(), 0660) != 0 || listen(listen_fd_, 64) != 0) {
    return IoError("cannot listen on " + socket_path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status SwitchDaemon::StartUplinks() {
  // One pool for every uplink and every process port: the switches only
  // move buffers between them. Processes come and go; each port's receive
  // ring holds buffers while it lives.
  unsigned mbufs = 0;
  uint32_t mtu = 0;
  for (const EndpointPortConfig& ec : uplink_configs_) {
    mbufs += ec.mbufs;
    mtu = std::max(mtu, ec.mtu);
  }
  pool_size_ = std::max<unsigned>(mbufs, 32767);
  auto pool = pmd::CreatePktPool({.name = "uroce_daemon", .mbufs = pool_size_, .data_room = pmd::DataRoomFor(mtu)});
  if (!pool.ok()) return pool.status();
  pool_ = std::move(*pool);
  for (const EndpointPortConfig& ec : uplink_configs_) {
    auto u = std::make_unique<Uplink>();
    u->config = ec;
    u->device = "uroce" + std::to_string(uplinks_.size());
    uplinks_.push_back(std::move(u));
    Uplink& up = *uplinks_.back();
    Status s = ec.kind == PortKind::kKernel ? StartKernelUplink(up) : StartPortUplink(up);
    if (!s.ok()) return Status(s.code(), "[endpoint." + ec.name + "] " + s.message());
    std::string gids;
    for (const auto& g : up.config.gids) gids += (gids.empty() ? "" : ", ") + transport::GidToString(g);
    Log("%s on %s, MAC %s, addresses %s; control socket %s", up.device.c_str(),
        up.kernel ? (up.kernel->Describe() + ", shared with the kernel").c_str()
                  : (ec.port + " (" + ec.name + ")").c_str(),
        transport::MacToString(up.mac).c_str(), gids.c_str(), socket_path_.c_str());
  }
  // A process's frames to another uplink's address cross between the
  // switches, never onto a wire (FrameSwitch::SetSiblings).
  for (auto& u : uplinks_) {
    std::vector<FrameSwitch*> siblings;
    for (auto& other : uplinks_) {
      if (other != u) siblings.push_back(other->sw.get());
    }
    u->sw->SetSiblings(std::move(siblings));
  }
  return Status::Ok();
}

// A DPDK port with addresses of its own: the switch answers ARP/ND for them.
Status SwitchDaemon::StartPortUplink(Uplink& u) {
  const EndpointPortConfig& ec = u.config;
  auto id = pmd::PortByName(ec.device_name);
  if (!id.ok()) return NotFound("uplink '" + ec.port + "': EAL made no port " + ec.device_name);
  u.port = *id;
  if (ec.port.rfind("net_af_packet", 0) == 0) UROCE_RETURN_IF_ERROR(pmd::CheckAfPacketFrameSize(ec.port, ec.mtu));
  UROCE_RETURN_IF_ERROR(pmd::StartPort(u.port, PortConfigFor(ec, pool_.get())));
  u.started = true;
  if (ec.mac_from_port) {
    rte_ether_addr mac;
    if (rte_eth_macaddr_get(u.port, &mac) != 0 || !rte_is_unicast_ether_addr(&mac) || rte_is_zero_ether_addr(&mac)) {
      return InvalidArgument("uplink '" + ec.port + "' has no unicast MAC: give [endpoint." + ec.name + "] mac");
    }
    std::memcpy(u.mac.data(), mac.addr_bytes, 6);
  } else {
    u.mac = ec.mac;
  }
  u.io = std::make_unique<pmd::EthPortIo>(u.port, 0);
  FrameSwitch::Options options;
  options.mac = u.mac;
  options.gids = ec.gids;
  options.uplink = SwitchPortFor(u, u.io.get());
  options.pool = pool_.get();
  u.sw = std::make_unique<FrameSwitch>(options);
  return Status::Ok();
}

// The kernel's own interface, shared: its MAC and (unless the configuration
// names some) its addresses; af_xdp with uroce's XDP program, or af_packet.
Status SwitchDaemon::StartKernelUplink(Uplink& u) {
  EndpointPortConfig& ec = u.config;
  auto kif = ReadKernelInterface(ec.interface);
  if (!kif.ok()) return kif.status();
  if (ec.gids.empty()) ec.gids = kif->gids;
  if (ec.gids.empty()) {
    return FailedPrecondition("interface " + ec.interface +
                              " has no IPv4 or global IPv6 address to be the device's GIDs (or give ipv4/ipv6)");
  }
  if (!ec.mac_from_port && ec.mac != kif->mac) {
    return InvalidArgument("mac: a kernel port sends as its interface, " + transport::MacToString(kif->mac));
  }
  std::string notes;
  auto uplink = KernelUplink::Open(ec, *kif, pool_.get(), &notes);
  for (size_t start = 0; start < notes.size();) {
    const size_t end = notes.find('\n', start);
    Log("%s", notes.substr(start, end - start).c_str());
    start = end == std::string::npos ? notes.size() : end + 1;
  }
  if (!uplink.ok()) return uplink.status();
  u.kernel = std::move(*uplink);
  u.port = u.kernel->port_id();
  u.mac = kif->mac;
  u.neighbors = std::make_unique<KernelNeighbors>();
  UROCE_RETURN_IF_ERROR(u.neighbors->Open(kif->if_index));
  FrameSwitch::Options options;
  options.mac = u.mac;
  options.gids = ec.gids;
  options.uplink = SwitchPortFor(u, u.kernel->io());
  options.pool = pool_.get();
  options.kernel_neighbors = true;
  u.sw = std::make_unique<FrameSwitch>(options);
  return Status::Ok();
}

transport::PacketIo* SwitchDaemon::SwitchPortFor(Uplink& u, transport::PacketIo* port) {
  if (!uplink_faults_) return port;
  pmd::PortImpairment faults = *uplink_faults_;
  faults.seed = pmd::DeriveSeed(uplink_faults_->seed, uplinks_.size() - 1);  // this uplink's own stream
  u.impaired = std::make_unique<pmd::ImpairedPortIo>(port, pool_.get(), faults);
  return u.impaired.get();
}

bool SwitchDaemon::IsHostAddress(const transport::Gid& gid) const {
  for (const auto& u : uplinks_) {
    if (std::find(u->config.gids.begin(), u->config.gids.end(), gid) != u->config.gids.end()) return true;
  }
  return false;
}

// Kernel uplink: the processes' ARP/ND questions, answered from the kernel's
// table; one it does not know yet is asked for and answered when the kernel
// has it (a neighbour event), or dropped after the resolver's own time
// (the process then reports the address unreachable).
void SwitchDaemon::ServeNeighborQuestions(Uplink& u) {
  NeighborQuestion questions[FrameSwitch::kQuestions];
  const size_t n = u.sw->TakeNeighborQuestions(questions, FrameSwitch::kQuestions);
  for (size_t i = 0; i < n; ++i) {
    const NeighborQuestion& q = questions[i];
    transport::MacAddress mac;
    const auto answer = u.neighbors->Lookup(q.target, &mac);
    if (answer == KernelNeighbors::Answer::kKnown) {
      u.sw->AnswerNeighborQuestion(q, mac);
      continue;
    }
    if (answer == KernelNeighbors::Answer::kUnreachable) continue;
    bool asked = false;
    size_t of_slot = 0;
    for (const auto& p : u.pending) {
      if (p.question.slot != q.slot) continue;
      ++of_slot;
      asked = asked || p.question.target == q.target;
    }
    if (asked) continue;
    // Each question has the kernel resolve an address (NTF_USE), and waits
    // here up to resolve_timeout_ms: one process gets at most the switch's
    // per-process share of the wait list, so it cannot starve the others.
    if (of_slot >= FrameSwitch::kQuestionsPerProcess) {
      u.questions_over_quota++;
      continue;
    }
    if (u.pending.size() < FrameSwitch::kQuestions) {
      u.pending.push_back(
          {q, std::chrono::steady_clock::now() + std::chrono::milliseconds(u.config.resolve_timeout_ms)});
    }
  }
}

// ask: look the pending ones up again (after a neighbour event); otherwise
// only drop those past their deadline.
void SwitchDaemon::RecheckNeighbors(Uplink& u, bool ask) {
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < u.pending.size();) {
    transport::MacAddress mac;
    const NeighborQuestion& q = u.pending[i].question;
    bool done = now >= u.pending[i].deadline;
    if (!done && ask) {
      const auto answer = u.neighbors->Lookup(q.target, &mac);
      if (answer == KernelNeighbors::Answer::kKnown) u.sw->AnswerNeighborQuestion(q, mac);
      done = answer != KernelNeighbors::Answer::kAsked;
    }
    if (done) {
      u.pending[i] = u.pending.back();
      u.pending.pop_back();
    } else {
      ++i;
    }
  }
}

void SwitchDaemon::Run() {
  using Clock = std::chrono::steady_clock;
  // An idle sleep of idle_us means what it says (the default timer slack
  // is 50 us: every frame that found the switch asleep would wait that).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  // Idle, the switch sleeps ever longer, from kFirstSleepUs up to idle_us:
  // frames between processes on the host pass it by (local links), so it
  // mostly waits for the uplink, and on a machine with few cores a thread
  // that wakes often takes the CPU from the processes that poll.
  constexpr uint32_t kFirstSleepUs = 16;
  const uint32_t idle_us = std::max<uint32_t>(config_.idle_us, 1);
  uint32_t sleep_us = 0;
  unsigned idle_polls = 0;
  auto next_control = Clock::now();
  while (!pmd::ShutdownRequested()) {
    unsigned moved = 0;
    for (size_t k = 0; k < uplinks_.size(); ++k) {
      Uplink& u = *uplinks_[k];
      moved += u.sw->Poll();
      if (u.sw->has_neighbor_questions()) ServeNeighborQuestions(u);
      if (u.sw->has_link_requests()) ServeLinkRequests(k);
    }
    idle_polls = moved != 0 ? 0 : idle_polls + 1;
    if (moved != 0) sleep_us = 0;
    // Frames moving: look at the control socket once a millisecond. Idle: the
    // look is the sleep (ppoll with the idle time), so a new process or a
    // frame is served within idle_us.
    if (idle_polls > 256) {
      sleep_us = std::min(idle_us, sleep_us == 0 ? kFirstSleepUs : sleep_us * 2);
      ServeControl(static_cast<int>(sleep_us));
      next_control = Clock::now() + std::chrono::milliseconds(1);
    } else if (Clock::now() >= next_control) {
      ServeControl(0);
      next_control = Clock::now() + std::chrono::milliseconds(1);
    }
  }
  Log("stopping (%s)", pmd::ShutdownSignal() == SIGTERM ? "SIGTERM" : "SIGINT");
}

void SwitchDaemon::ServeControl(int timeout_us) {
  // Sessions that never attached within attach_timeout_ms (and those closed
  // to make room) go.
  const uint64_t now = NowNs();
  for (size_t i = sessions_.size(); i >= 1; --i) {
    Session& s = *sessions_[i - 1];
    const bool late = s.slot == 0 && now - s.accepted_ns > uint64_t{config_.attach_timeout_ms} * 1000000;
    if (s.fd >= 0 && !late) continue;
    if (late) ++attach_timeouts_;
    Release(s);
    sessions_.erase(sessions_.begin() + static_cast<long>(i - 1));
  }
  std::vector<pollfd>& fds = control_fds_;  // kept: no allocation per look
  fds.clear();
  fds.push_back({listen_fd_, POLLIN, 0});
  for (const auto& s : sessions_) fds.push_back({s->fd, POLLIN, 0});
  // Kernel uplinks: their neighbour tables' events, after the sessions.
  const size_t first_neighbor_fd = fds.size();
  for (const auto& u : uplinks_) {
    if (u->neighbors) fds.push_back({u->neighbors->event_fd(), POLLIN, 0});
  }
  timespec timeout{0, static_cast<long>(timeout_us) * 1000};
  const int ready = ppoll(fds.data(), fds.size(), &timeout, nullptr);
  // A question waits for a neighbour event (then the kernel is asked again)
  // or for its deadline.
  size_t k = first_neighbor_fd;
  for (auto& u : uplinks_) {
    if (!u->neighbors) continue;
    if (ready > 0 && (fds[k++].revents & POLLIN)) {
      u->neighbors->DrainEvents();
      RecheckNeighbors(*u, /*ask=*/true);
    } else if (!u->pending.empty()) {
      RecheckNeighbors(*u, /*ask=*/false);
    }
  }
  if (ready <= 0) return;
  // Sessions first (their indices match fds[1..]), then new connections.
  for (size_t i = sessions_.size(); i >= 1; --i) {
    if (fds[i].revents == 0) continue;
    Session& s = *sessions_[i - 1];
    if (fds[i].revents & POLLIN) HandleMessage(s);
    if (s.fd < 0 || (fds[i].revents & (POLLHUP | POLLERR))) {
      Release(s);
      sessions_.erase(sessions_.begin() + static_cast<long>(i - 1));
    }
  }
  if (fds[0].revents & POLLIN) Accept();
}

void SwitchDaemon::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto s = std::make_unique<Session>();
    s->fd = fd;
    ucred cred{};
    socklen_t length = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
      close(fd);
      continue;
    }
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
    s->pid_ns = PidNamespaceOf(std::to_string(cred.pid));
    s->accepted_ns = NowNs();
    // Sessions not attached (yet) of uids other than root's and the
    // daemon's are bounded apart from attached ones: at most kMaxPending in
    // all and kMaxPendingPerUid per uid. Every unattached session is closed
    // after attach_timeout_ms. A session of root or of the daemon's own uid
    // gets in while the daemon has descriptors to spare, and then in place
    // of the oldest waiting one of another uid: no group member can lock
    // the administrator out of STATS.
    size_t pending = 0, pending_of_uid = 0;
    Session* oldest_other = nullptr;
    for (const auto& other : sessions_) {
      if (other->slot != 0 || other->fd < 0) continue;
      ++pending;
      if (OwnerOf(*other) == OwnerOf(*s)) ++pending_of_uid;
      if (!Exempt(*other) && (oldest_other == nullptr || other->accepted_ns < oldest_other->accepted_ns)) {
        oldest_other = other.get();
      }
    }
    const char* refusal = nullptr;
    if (!Exempt(*s)) {
      if (pending_of_uid >= kMaxPendingPerUid) {
        refusal = "ERROR too many sessions waiting to attach for this uid";
      } else if (pending >= kMaxPending) {
        refusal = "ERROR too many sessions";
      }
    } else if (sessions_.size() >= config_.max_processes + kMaxPending) {
      // Exempt sessions are bounded only by the descriptors the daemon
      // keeps (many ranks of a job may connect at once), and make room.
      if (oldest_other != nullptr) {
        close(oldest_other->fd);
        oldest_other->fd = -1;  // released by ServeControl's next look
        ++sessions_refused_;
      } else {
        refusal = "ERROR too many sessions";
      }
    }
    if (refusal != nullptr) {
      send(fd, refusal, std::strlen(refusal), MSG_NOSIGNAL);
      close(fd);
      ++sessions_refused_;
      continue;
    }
    sessions_.push_back(std::move(s));
  }
}

// A reply with file descriptors as SCM_RIGHTS ancillary data (unix(7)).
void SwitchDaemon::ReplyWithFiles(Session& s, const std::string& text, const std::vector<int>& files) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxUplinks)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = CMSG_SPACE(sizeof(int) * files.size());
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * files.size());
  std::memcpy(CMSG_DATA(c), files.data(), sizeof(int) * files.size());
  if (sendmsg(s.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    close(s.fd);
    s.fd = -1;  // released by the caller
  }
}

void SwitchDaemon::Reply(Session& s, const std::string& text) {
  if (send(s.fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    close(s.fd);
    s.fd = -1;  // released by the caller
  }
}

void SwitchDaemon::HandleMessage(Session& s) {
  std::vector<char> buf(kMaxControlMessage + 1);
  // PEER/UNPEER (no reply) come in bursts when a process connects many QPs:
  // up to 64 messages per look, so its socket does not fill up.
  for (int i = 0; i < 64 && s.fd >= 0; ++i) {
    const ssize_t n = recv(s.fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close(s.fd);
      s.fd = -1;
      return;
    }
    if (n < 0) return;
    const std::string_view message(buf.data(), static_cast<size_t>(n));
    if (message == "STATS") {
      Reply(s, StatsText(s));
      continue;
    }
    if (message == "DEVICES") {
      Reply(s, DevicesText());
      continue;
    }
    if (message.rfind("PEER ", 0) == 0 || message.rfind("UNPEER ", 0) == 0) {
      // Fire and forget (host/daemon_protocol.h): a bad one is counted, the
      // first few logged, never answered.
      const bool peer = message[0] == 'P';
      PeerRecord record;
      Status status = Status::Ok();
      if (peer) {
        auto parsed = ParsePeer(message);
        if (parsed.ok()) record = *parsed;
        status = parsed.status();
      } else {
        auto parsed = ParseUnpeer(message);
        if (parsed.ok()) record.qpn = *parsed;
        status = parsed.status();
      }
      const uint32_t qpn = record.qpn;
      if (!status.ok()) {
        // malformed: logged below
      } else if (s.slot == 0) {
        status = FailedPrecondition("PEER/UNPEER: not attached");
      } else if (FrameSwitch::SlotOfQpn(qpn) != s.slot) {
        status = PermissionDenied("PEER/UNPEER: QPN " + std::to_string(qpn) + " is not of its lease");
      } else if (!peer) {
        ErasePeer(s, qpn);
      } else if (!IsHostAddress(record.dest)) {
        status = InvalidArgument("PEER: " + transport::GidToString(record.dest) + " is not one of this host's addresses");
      } else if (s.peers.size() >= (size_t{1} << kDaemonQpnShift) && s.peers.count(qpn) == 0) {
        status = ResourceExhausted("PEER: 65536 records already");  // cannot happen: keys are its lease
      } else if (!Exempt(s) && s.peers.count(qpn) == 0 &&
                 peers_of_owner_[OwnerOf(s)] >= config_.max_peers_per_uid) {
        // Its QP still works; only a peer's end is not told to it (the QP
        // then ends by retry exhaustion, as with a peer on another host).
        status = ResourceExhausted("PEER: its " + OwnerText(s) + " has " + std::to_string(config_.max_peers_per_uid) +
                                   " records already ([daemon] max_peers_per_uid)");
      } else {
        const uint32_t dest_slot = FrameSwitch::SlotOfQpn(record.dest_qpn);
        if (dest_slot < kSwitchFirstSlot || dest_slot > kSwitchLastSlot || !uplinks_.front()->sw->attached(dest_slot)) {
          // Its peer's process ended before this record came (or never
          // was): told at once, as if it had been there.
          ErasePeer(s, qpn);
          for (const std::string& m : FormatPeersGone({{qpn, record.dest_qpn}})) {
            if (send(s.fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(m.size())) {
              s.peers_gone_told++;
            }
          }
        } else {
          SetPeer(s, qpn, record.dest_qpn);
        }
      }
      if (!status.ok() && ++s.peer_messages_refused <= 8) {
        Log("pid %lld: ignored: %s%s", static_cast<long long>(s.pid), status.message().c_str(),
            s.peer_messages_refused == 8 ? " (no more of these logged for it)" : "");
      }
      continue;
    }
    if (IsLinkChange(message)) {
      // UNLINK U S (fire and forget): the process declines its link to S.
      auto change = ParseLinkChange(message);
      Status status = !change.ok()                        ? change.status()
                      : s.slot == 0                       ? FailedPrecondition("UNLINK: not attached")
                      : change->add                       ? InvalidArgument("LINK: only the daemon makes links")
                      : change->uplink >= uplinks_.size() ? InvalidArgument("UNLINK: no such uplink")
                                                          : Status::Ok();
      if (status.ok()) {
        DeclineLink(s, change->uplink, change->slot);
      } else if (++s.peer_messages_refused <= 8) {
        Log("pid %lld: ignored: %s", static_cast<long long>(s.pid), status.message().c_str());
      }
      continue;
    }
    if (message.rfind("LISTEN ", 0) == 0 || message.rfind("UNLISTEN ", 0) == 0) {
      auto claim = ParsePortClaim(message);
      // A port is claimed on every uplink's switch, or on none.
      Status status = !claim.ok() ? claim.status() : s.slot == 0 ? FailedPrecondition("not attached") : Status::Ok();
      if (status.ok() && claim->listen && !Exempt(s) && ListensOf(OwnerOf(s)) >= config_.max_listens_per_uid) {
        status = ResourceExhausted(OwnerText(s) + " listens on " +
                                   std::to_string(config_.max_listens_per_uid) +
                                   " ports already ([daemon] max_listens_per_uid)");
      }
      for (size_t k = 0; status.ok() && k < uplinks_.size(); ++k) {
        if (!claim->listen) {
          uplinks_[k]->sw->Unlisten(claim->port, s.slot);
          continue;
        }
        status = uplinks_[k]->sw->Listen(claim->port, s.slot);
        if (!status.ok()) {
          for (size_t j = 0; j < k; ++j) uplinks_[j]->sw->Unlisten(claim->port, s.slot);
        }
      }
      if (!status.ok()) Log("pid %lld: %s", static_cast<long long>(s.pid), status.message().c_str());
      Reply(s, status.ok() ? "OK" : "ERROR " + status.message());
      continue;
    }
    auto request = ParseAttachRequest(message);
    Status status = request.ok() ? (s.slot != 0 ? FailedPrecondition("already attached") : AttachSession(s, *request))
                                 : request.status();
    if (!status.ok()) {
      Log("refused a control message (%zd bytes): %s", n, status.message().c_str());
      Reply(s, "ERROR " + status.message());
    }
  }
}

SwitchPortCounters SwitchDaemon::SlotCounters(uint32_t slot) const {
  SwitchPortCounters sum;
  for (const auto& u : uplinks_) {
    const SwitchPortCounters& c = u->sw->port_counters(slot);
    sum.rx_frames += c.rx_frames;
    sum.rx_bytes += c.rx_bytes;
    sum.tx_frames += c.tx_frames;
    sum.tx_bytes += c.tx_bytes;
    sum.rx_dropped += c.rx_dropped;
    sum.tx_full += c.tx_full;
    for (size_t k = 0; k < kSwitchCmKinds; ++k) {
      sum.cm_sent[k] += c.cm_sent[k];
      sum.cm_received[k] += c.cm_received[k];
    }
  }
  return sum;
}

uint32_t SwitchDaemon::FreeSlot() {
  // A slot released less than slot_quarantine_ms ago is given to nobody:
  // its QPNs and CM IDs were a process's that ended, and its peers may
  // still retransmit to them (RC retries, RNR waits and CM resends of
  // uroce's defaults end within seconds). Among the others one is drawn at
  // random, so that nobody can walk a round robin to a given slot by
  // attaching and detaching.
  const uint64_t now = NowNs();
  const uint64_t quarantine_ns = uint64_t{config_.slot_quarantine_ms} * 1000000;
  uint32_t candidates[kSwitchLastSlot + 1];
  uint32_t count = 0;
  for (uint32_t slot = kSwitchFirstSlot; slot <= kSwitchLastSlot; ++slot) {
    if (uplinks_.front()->sw->attached(slot)) continue;
    if (released_ns_[slot] != 0 && now - released_ns_[slot] < quarantine_ns) continue;
    candidates[count++] = slot;
  }
  if (count == 0) return 0;
  return candidates[std::uniform_int_distribution<uint32_t>(0, count - 1)(slot_random_)];
}

Status SwitchDaemon::AttachSession(Session& s, const AttachRequest& request) {
  uint32_t attached = 0;
  for (const auto& other : sessions_) attached += other->slot != 0;
  if (attached >= config_.max_processes) {
    return ResourceExhausted("the daemon serves " + std::to_string(attached) + " processes already ([daemon] max_processes)");
  }
  if (!Exempt(s)) {
    uint32_t of_uid = 0;
    for (const auto& other : sessions_) of_uid += other->slot != 0 && OwnerOf(*other) == OwnerOf(s);
    if (of_uid >= config_.max_processes_per_uid) {
      return ResourceExhausted(OwnerText(s) + " has " + std::to_string(of_uid) +
                               " processes attached already ([daemon] max_processes_per_uid)");
    }
  }
  const uint32_t slot = FreeSlot();
  if (slot == 0) {
    return ResourceExhausted("every free slot was released less than " +
                             std::to_string(config_.slot_quarantine_ms) +
                             " ms ago ([daemon] slot_quarantine_ms): try again shortly");
  }
  // The process's ports, one per uplink: two rings in a sealed memory file
  // that only this session's reply carries (SCM_RIGHTS), so no other process
  // can reach it. Jumbo frames get fewer slots: the file's pages are real
  // memory once the rings have gone round.
  AttachGrant grant;
  grant.slot = slot;
  std::vector<int> files;
  // A session whose earlier ATTACH failed part-way may ask again: its ports
  // are made anew, so port K is uplink K's.
  s.ios.clear();
  s.channels.clear();
  for (const auto& u : uplinks_) {
    const uint32_t max_frame = u->config.mtu + 18;  // Ethernet header and a VLAN tag
    auto channel = ShmChannel::Create(u->config.mtu > 4096 ? 256 : 1024, max_frame);
    if (!channel.ok()) return channel.status();
    s.channels.push_back(std::move(*channel));
    s.ios.push_back(std::make_unique<ShmPortIo>(s.channels.back().get(), pool_.get()));
    files.push_back(s.channels.back()->fd());
    grant.endpoints.push_back({u->config.name, u->mac, u->config.gids, u->config.mtu});
  }
  // Every switch has the slot, or none (what was attached is detached again).
  for (size_t k = 0; k < uplinks_.size(); ++k) {
    Status attached_here = uplinks_[k]->sw->Attach(slot, s.ios[k].get());
    if (!attached_here.ok()) {
      for (size_t j = 0; j < k; ++j) uplinks_[j]->sw->Detach(slot);
      s.ios.clear();
      s.channels.clear();
      return attached_here;
    }
  }
  s.slot = slot;
  // A process in another pid namespace (a container) knows itself by
  // another number: the claim is logged, never taken.
  if (request.pid != s.pid) {
    Log("pid %lld says it is pid %lld (another pid namespace, or a lie)", static_cast<long long>(s.pid),
        static_cast<long long>(request.pid));
  }
  s.program = request.program;
  ReplyWithFiles(s, FormatAttachReply(grant), files);
  Log("attached pid %lld uid %u (%s): slot %u, QPNs 0x%06x-0x%06x", static_cast<long long>(s.pid),
      static_cast<unsigned>(s.uid), s.program.c_str(), slot,
      slot << kSwitchQpnShift, ((slot + 1) << kSwitchQpnShift) - 1);
  return Status::Ok();
}

void SwitchDaemon::Release(Session& s) {
  if (s.fd >= 0) {
    close(s.fd);
    s.fd = -1;
  }
  if (s.slot != 0) {
    const SwitchPortCounters c = SlotCounters(s.slot);
    Log("released pid %lld (%s): slot %u; frames from it %llu, to it %llu, dropped %llu",
        static_cast<long long>(s.pid), s.program.c_str(), s.slot, static_cast<unsigned long long>(c.rx_frames),
        static_cast<unsigned long long>(c.tx_frames),
        static_cast<unsigned long long>(c.rx_dropped + c.tx_full));
    // What it sent before it ended still leaves (a REJ or DREQ written just
    // before exit), as a NIC sends what was posted: one round of every
    // switch takes its rings before the slot goes.
    for (auto& u : uplinks_) u->sw->Poll();
    for (auto& u : uplinks_) u->sw->Detach(s.slot);
    released_ns_[s.slot] = NowNs();
    CloseLinksOf(s.slot);
    // Its local peers: every other process's QP connected to one
    // of its QPs is told, and moves to the error state at once instead of
    // retrying into the void (or waiting for ever for a message). Not when
    // the daemon stops: every session closes then, which tells them more.
    for (const auto& other : sessions_) {
      if (stopped_ || other.get() == &s || other->slot == 0 || other->fd < 0) continue;
      std::vector<PeerGone> gone;
      auto& by_slot = other->peers_by_slot;
      for (auto it = by_slot.lower_bound({s.slot, 0}); it != by_slot.end() && it->first == s.slot; ++it) {
        gone.push_back({it->second, other->peers.at(it->second)});
      }
      if (gone.empty()) continue;
      for (const PeerGone& g : gone) ErasePeer(*other, g.qpn);
      size_t lost = 0;
      for (const std::string& m : FormatPeersGone(gone)) {
        // Never blocks the switch: a process that does not read its socket
        // loses the notification (its QPs then end by retry exhaustion).
        if (send(other->fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(m.size()) &&
            (errno == EAGAIN || errno == EWOULDBLOCK)) {
          lost++;  // (any other error: that process is gone too)
        }
      }
      other->peers_gone_told += gone.size();
      Log("told pid %lld (%s) that %zu of its QPs lost their peer in pid %lld%s", static_cast<long long>(other->pid),
          other->program.c_str(), gone.size(), static_cast<long long>(s.pid),
          lost != 0 ? " (its socket was full: some notifications lost)" : "");
    }
    ClearPeers(s);
    s.slot = 0;
  }
  // Detached from the switches first: nothing reads the rings any more when
  // they are unmapped, whenever and however the process ended.
  s.ios.clear();
  s.channels.clear();
}

Session* SwitchDaemon::SessionOfSlot(uint32_t slot) {
  for (const auto& s : sessions_) {
    if (s->slot == slot && s->fd >= 0) return s.get();
  }
  return nullptr;
}

bool SwitchDaemon::Notify(Session& s, const std::string& text, int file) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (file >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &file, sizeof(int));
  }
  return sendmsg(s.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(text.size());
}

// Processes whose frames to each other went through uplink k's switch get a
// link of their own (host/local_links.h): a file like a process's port, sent
// to both. If the second cannot be told, the first is told UNLINK and the
// file is marked closed, so nobody sends into a link nobody reads.
void SwitchDaemon::ServeLinkRequests(size_t k) {
  Uplink& u = *uplinks_[k];
  FrameSwitch::LinkRequest requests[FrameSwitch::kLinkRequests];
  const size_t n = u.sw->TakeLinkRequests(requests, FrameSwitch::kLinkRequests);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = requests[i].a, b = requests[i].b;
    Session* sa = SessionOfSlot(a);
    Session* sb = SessionOfSlot(b);
    if (sa == nullptr || sb == nullptr) continue;
    if (links_.size() >= kMaxLinks) {
      if (links_refused_++ == 0) Log("%zu local links made: further pairs of processes go through the switch", kMaxLinks);
      continue;
    }
    if (LinksOf(a) >= kMaxLinksPerProcess || LinksOf(b) >= kMaxLinksPerProcess) {
      if (links_refused_++ == 0) {
        Log("a process has %zu local links: its further peers go through the switch", kMaxLinksPerProcess);
      }
      continue;
    }
    if ((!Exempt(*sa) && LinksOfOwner(OwnerOf(*sa)) >= kMaxLinksPerUid) ||
        (!Exempt(*sb) && LinksOfOwner(OwnerOf(*sb)) >= kMaxLinksPerUid)) {
      if (links_refused_++ == 0) {
        Log("a uid's processes have %zu local links: their further peers go through the switch", kMaxLinksPerUid);
      }
      continue;
    }
    const uint32_t max_frame = u.config.mtu + 18;
    auto file = ShmChannel::Create(u.config.mtu > 4096 ? 256 : 1024, max_frame, kLinkStageChunks, kLinkAckEntries);
    if (!file.ok()) {
      Log("no local link for slots %u and %u: %s", a, b, file.status().message().c_str());
      continue;
    }
    // Each is told who the other is in the kernel's word (SO_PEERCRED), for
    // reading its memory (transport/peer_memory.h).
    if (!Notify(*sa, FormatLinkChange({static_cast<uint32_t>(k), b, true, sb->pid, sb->uid}), (*file)->fd())) {
      continue;
    }
    if (!Notify(*sb, FormatLinkChange({static_cast<uint32_t>(k), a, true, sa->pid, sa->uid}), (*file)->fd())) {
      (*file)->MarkClosed();
      Notify(*sa, FormatLinkChange({static_cast<uint32_t>(k), b, false}), -1);
      continue;
    }
    links_made_++;
    links_.push_back({k, a, b, std::move(*file)});
  }
}

size_t SwitchDaemon::LinksOf(uint32_t slot) const {
  return static_cast<size_t>(
      std::count_if(links_.begin(), links_.end(), [slot](const LocalLink& l) { return l.a == slot || l.b == slot; }));
}

size_t SwitchDaemon::LinksOfOwner(const Owner& owner) const {
  std::array<bool, kSwitchLastSlot + 1> of_uid{};
  for (const auto& s : sessions_) {
    if (s->slot != 0 && OwnerOf(*s) == owner) of_uid[s->slot] = true;
  }
  return static_cast<size_t>(
      std::count_if(links_.begin(), links_.end(), [&](const LocalLink& l) { return of_uid[l.a] || of_uid[l.b]; }));
}

// A process sent UNLINK U S: it could not map the link we sent it (or does
// not take links, UROCE_LOCAL_LINKS=no). The file is marked closed, so the
// other side goes back to the switch at once, and is told to let go of it.
void SwitchDaemon::DeclineLink(Session& s, size_t uplink, uint32_t other) {
  for (size_t i = 0; i < links_.size(); ++i) {
    LocalLink& l = links_[i];
    const bool pair = (l.a == s.slot && l.b == other) || (l.b == s.slot && l.a == other);
    if (l.uplink != uplink || !pair) continue;
    l.file->MarkClosed();
    if (Session* so = SessionOfSlot(other)) {
      Notify(*so, FormatLinkChange({static_cast<uint32_t>(uplink), s.slot, false}), -1);
    }
    links_[i] = std::move(links_.back());
    links_.pop_back();
    links_declined_++;
    return;
  }
}

// The process of `slot` ended: its links are marked closed (the other side
// sends through the switch again at once) and the other side is told to
// let go of them.
void SwitchDaemon::CloseLinksOf(uint32_t slot) {
  for (size_t i = 0; i < links_.size();) {
    LocalLink& l = links_[i];
    if (l.a != slot && l.b != slot) {
      ++i;
      continue;
    }
    l.file->MarkClosed();
    const uint32_t other = l.a == slot ? l.b : l.a;
    if (Session* so = SessionOfSlot(other)) {
      Notify(*so, FormatLinkChange({static_cast<uint32_t>(l.uplink), slot, false}), -1);
    }
    links_[i] = std::move(links_.back());
    links_.pop_back();
  }
}

// DEVICES (host/daemon_client.h): each device's kernel interface (a shared
// kernel port's) and GIDs, for `uroce exec` to present as its files.
std::string SwitchDaemon::DevicesText() const {
  std::string out = "OK\n";
  for (size_t i = 0; i < uplinks_.size(); ++i) {
    const EndpointPortConfig& ec = uplinks_[i]->config;
    out += "device " + uplinks_[i]->device + " netdev=";
    out += ec.kind == PortKind::kKernel && !ec.interface.empty() ? ec.interface : "-";
    out += " gids=";
    for (size_t g = 0; g < ec.gids.size(); ++g) {
      char hex[33];
      for (size_t b = 0; b < 16; ++b) std::snprintf(hex + 2 * b, 3, "%02x", ec.gids[g][b]);
      out += (g == 0 ? "" : ",") + std::string(hex, 32);
    }
    out += "\n";
  }
  return out;
}

void SwitchDaemon::SetPeer(Session& s, uint32_t qpn, uint32_t peer_qpn) {
  auto [it, added] = s.peers.try_emplace(qpn, peer_qpn);
  if (!added) {
    s.peers_by_slot.erase({FrameSwitch::SlotOfQpn(it->second), qpn});
    it->second = peer_qpn;
  } else {
    peers_of_owner_[OwnerOf(s)]++;
  }
  s.peers_by_slot.insert({FrameSwitch::SlotOfQpn(peer_qpn), qpn});
}

void SwitchDaemon::ErasePeer(Session& s, uint32_t qpn) {
  auto it = s.peers.find(qpn);
  if (it == s.peers.end()) return;
  s.peers_by_slot.erase({FrameSwitch::SlotOfQpn(it->second), qpn});
  s.peers.erase(it);
  if (--peers_of_owner_[OwnerOf(s)] == 0) peers_of_owner_.erase(OwnerOf(s));
}

void SwitchDaemon::ClearPeers(Session& s) {
  auto count = peers_of_owner_.find(OwnerOf(s));
  if (count != peers_of_owner_.end()) {
    count->second -= std::min(count->second, s.peers.size());
    if (count->second == 0) peers_of_owner_.erase(count);
  }
  s.peers.clear();
  s.peers_by_slot.clear();
}

std::string SwitchDaemon::OwnerText(const Session& s) const {
  std::string text = "uid " + std::to_string(s.uid);
  if (s.pid_ns != own_pid_ns_) text += " in pid namespace " + std::to_string(s.pid_ns);
  return text;
}

uint32_t SwitchDaemon::ListensOf(const Owner& owner) const {
  std::array<bool, kSwitchLastSlot + 1> of_uid{};
  for (const auto& s : sessions_) {
    if (s->slot != 0 && OwnerOf(*s) == owner) of_uid[s->slot] = true;
  }
  uint32_t count = 0;
  for (uint32_t port = 1; port <= 65535; ++port) {
    const uint32_t slot = uplinks_.front()->sw->listener(static_cast<uint16_t>(port));
    count += slot != 0 && slot <= kSwitchLastSlot && of_uid[slot];
  }
  return count;
}

std::string SwitchDaemon::StatsText(const Session& viewer) const {
  std::string out = "OK\n";
  char line[512];
  size_t pending = 0;
  for (const auto& s : sessions_) pending += s->slot == 0;
  std::snprintf(line, sizeof(line), "daemon sessions=%zu waiting=%zu refused=%llu attach_timeouts=%llu\n",
                sessions_.size(), pending, static_cast<unsigned long long>(sessions_refused_),
                static_cast<unsigned long long>(attach_timeouts_));
  out += line;
  for (const auto& s : sessions_) {
    if (s->slot == 0) continue;
    // Another user's, or another container's: not theirs to see.
    if (!Exempt(viewer) && OwnerOf(*s) != OwnerOf(viewer)) continue;
    const SwitchPortCounters c = SlotCounters(s->slot);
    std::snprintf(line, sizeof(line),
                  "process pid=%lld program=%s slot=%u qpns=0x%06x-0x%06x rx_frames=%llu rx_bytes=%llu "
                  "tx_frames=%llu tx_bytes=%llu dropped=%llu peers=%zu peers_gone=%llu uid=%u gid=%u\n",
                  static_cast<long long>(s->pid), s->program.c_str(), s->slot, s->slot << kSwitchQpnShift,
                  ((s->slot + 1) << kSwitchQpnShift) - 1, static_cast<unsigned long long>(c.rx_frames),
                  static_cast<unsigned long long>(c.rx_bytes), static_cast<unsigned long long>(c.tx_frames),
                  static_cast<unsigned long long>(c.tx_bytes),
                  static_cast<unsigned long long>(c.rx_dropped + c.tx_full), s->peers.size(),
                  static_cast<unsigned long long>(s->peers_gone_told), static_cast<unsigned>(s->uid),
                  static_cast<unsigned>(s->gid));
    out += line;
    // Its CM messages by kind (IBTA 12.6), sent and received through the
    // switch: a connection made cleanly costs a REQ, a REP and an RTU;
    // resent REQs, MRAs and REJs show a set-up's trouble.
    const auto kinds = [](const std::array<uint64_t, kSwitchCmKinds>& counts) {
      std::string text;
      for (size_t k = 0; k < kSwitchCmKinds; ++k) {
        text += std::string(k == 0 ? "" : ",") + SwitchCmKindName(k) + ":" + std::to_string(counts[k]);
      }
      return text;
    };
    out += "cm pid=" + std::to_string(s->pid) + " sent=" + kinds(c.cm_sent) + " received=" + kinds(c.cm_received) +
           "\n";
  }
  // Per uplink (device uroceK): its port's counters and its switch's.
  for (const auto& up : uplinks_) {
    const SwitchPortCounters& u = up->sw->port_counters(0);
    const SwitchCounters& k = up->sw->counters();
    std::snprintf(line, sizeof(line),
                  "uplink rx_frames=%llu tx_frames=%llu rx_dropped=%llu tx_full=%llu device=%s name=%s\n"
                  "switch local_frames=%llu cross_frames=%llu unknown_qpn=%llu not_for_us=%llu malformed=%llu spoofed=%llu "
                  "cm_routed=%llu cm_no_listener=%llu cm_rejects=%llu cm_unrouted=%llu neighbor_answers=%llu "
                  "neighbor_copies=%llu neighbor_questions=%llu alloc_failures=%llu device=%s\n",
                  static_cast<unsigned long long>(u.rx_frames), static_cast<unsigned long long>(u.tx_frames),
                  static_cast<unsigned long long>(u.rx_dropped), static_cast<unsigned long long>(u.tx_full),
                  up->device.c_str(), up->config.name.c_str(), static_cast<unsigned long long>(k.local_frames),
                  static_cast<unsigned long long>(k.cross_frames),
                  static_cast<unsigned long long>(k.unknown_qpn), static_cast<unsigned long long>(k.not_for_us),
                  static_cast<unsigned long long>(k.malformed), static_cast<unsigned long long>(k.spoofed),
                  static_cast<unsigned long long>(k.cm_routed), static_cast<unsigned long long>(k.cm_no_listener),
                  static_cast<unsigned long long>(k.cm_rejects), static_cast<unsigned long long>(k.cm_unrouted),
                  static_cast<unsigned long long>(k.neighbor_answers),
                  static_cast<unsigned long long>(k.neighbor_copies),
                  static_cast<unsigned long long>(k.neighbor_questions),
                  static_cast<unsigned long long>(k.alloc_failures), up->device.c_str());
    out += line;
    // Frames the switch refused for what they claim, and the processes'
    // neighbour questions it asked in its own words (host/frame_switch.h), on
    // a line of their own: the lines above keep their fields.
    std::snprintf(line, sizeof(line),
                  "drops device=%s wire_own_source=%llu wire_bad_source=%llu neighbor_rebuilt=%llu "
                  "neighbor_refused=%llu cm_bad_qp=%llu neighbor_over_quota=%llu\n",
                  up->device.c_str(), static_cast<unsigned long long>(k.wire_own_source),
                  static_cast<unsigned long long>(k.wire_bad_source),
                  static_cast<unsigned long long>(k.neighbor_rebuilt),
                  static_cast<unsigned long long>(k.neighbor_refused),
                  static_cast<unsigned long long>(k.cm_bad_qp),
                  static_cast<unsigned long long>(k.neighbor_over_quota + up->questions_over_quota));
    out += line;
    // [impair] on the uplink: what it did each way (tx: leaving the host).
    if (up->impaired) {
      const pmd::ImpairedPortCounters f = up->impaired->counters();
      std::snprintf(line, sizeof(line),
                    "impair device=%s tx_frames=%llu tx_dropped=%llu tx_queue_dropped=%llu tx_ce_marked=%llu "
                    "rx_frames=%llu rx_dropped=%llu rx_queue_dropped=%llu rx_ce_marked=%llu\n",
                    up->device.c_str(), static_cast<unsigned long long>(f.tx.sent),
                    static_cast<unsigned long long>(f.tx.dropped), static_cast<unsigned long long>(f.tx.queue_dropped),
                    static_cast<unsigned long long>(f.tx.ce_marked), static_cast<unsigned long long>(f.rx.sent),
                    static_cast<unsigned long long>(f.rx.dropped), static_cast<unsigned long long>(f.rx.queue_dropped),
                    static_cast<unsigned long long>(f.rx.ce_marked));
      out += line;
    }
    // af_xdp: what the XDP program did with RoCE before the switch saw it
    // (xdp/uroce_steer.bpf.c); all CPUs together.
    if (up->kernel && up->kernel->af_xdp()) {
      const auto x = up->kernel->ReadXdpCounters();
      if (x.ok()) {
        std::snprintf(line, sizeof(line),
                      "xdp device=%s steered=%llu not_ours=%llu no_socket=%llu bad_mac=%llu unconfigured=%llu\n",
                      up->device.c_str(), static_cast<unsigned long long>((*x)[xdp::kSteered]),
                      static_cast<unsigned long long>((*x)[xdp::kNotOurs]),
                      static_cast<unsigned long long>((*x)[xdp::kNoSocket]),
                      static_cast<unsigned long long>((*x)[xdp::kBadMac]),
                      static_cast<unsigned long long>((*x)[xdp::kUnconfigured]));
        out += line;
      }
    }
  }
  // Direct links between processes (their frames pass no switch): the
  // frames each way as the files' indices say (the processes write them).
  for (const LocalLink& l : links_) {
    const ShmChannelTraffic t = l.file->Traffic();
    std::snprintf(line, sizeof(line), "link device=%s slots=%u,%u frames=%u,%u\n",
                  uplinks_[l.uplink]->device.c_str(), l.a, l.b, t.to_process, t.from_process);
    out += line;
  }
  std::snprintf(line, sizeof(line), "links now=%zu made=%llu refused=%llu declined=%llu\n", links_.size(),
                static_cast<unsigned long long>(links_made_), static_cast<unsigned long long>(links_refused_),
                static_cast<unsigned long long>(links_declined_));
  out += line;
  return out;
}

void SwitchDaemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // Closing the sessions tells every process (its progress thread moves its
  // QPs to the error state).
  for (auto& s : sessions_) Release(*s);
  sessions_.clear();
  // DPDK 22.11's af_xdp driver never takes back the buffers it gave the
  // kernel: its fill ring (ETH_AF_XDP_DFLT_NUM_DESCS, 2048 per queue,
  // refilled after every receive) and sends not yet completed (up to the
  // ring size per queue). They stay out until the pool is freed.
  unsigned af_xdp_held = 0;
  for (auto& u : uplinks_) {
    if (u->impaired) Log("%s impairments: %s", u->device.c_str(), pmd::ImpairmentSummary(u->impaired->counters()).c_str());
    u->sw.reset();
    u->impaired.reset();  // what it held goes back to the pool
    u->io.reset();
    u->pending.clear();
    u->neighbors.reset();
    if (u->kernel && u->kernel->af_xdp()) af_xdp_held += u->kernel->queues() * (2048u + u->config.rx_descriptors);
    u->kernel.reset();  // stops and removes the port; af_xdp detaches its program
    if (u->started) {
      Status closed = pmd::ClosePort(u->port);
      if (!closed.ok()) Log("closing %s's uplink: %s", u->device.c_str(), closed.message().c_str());
    }
  }
  uplinks_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(socket_path_.c_str());
    listen_fd_ = -1;
  }
  if (pool_) {
    const unsigned back = pmd::AvailableMbufs(pool_.get());
    if (af_xdp_held != 0 && back < pool_size_ && pool_size_ - back <= af_xdp_held) {
      Log("stopped; mbufs back in the pool: %u of %u; the other %u were given to the kernel by DPDK's af_xdp driver "
          "(at most %u), which returns them only with the pool",
          back, pool_size_, pool_size_ - back, af_xdp_held);
    } else {
      Log("stopped; mbufs back in the pool: %u of %u", back, pool_size_);
    }
  }
}

}  // namespace

std::unique_ptr<Daemon> Daemon::Create(const DaemonConfig& config, const std::vector<EndpointPortConfig>& uplinks,
                                       DaemonReport report, std::optional<pmd::PortImpairment> uplink_faults) {
  return std::make_unique<SwitchDaemon>(config, uplinks, std::move(report), std::move(uplink_faults));
}


}  // namespace uroce::host
