#include "host/daemon_client.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "host/host_config.h"
#include "pmd/log.h"

namespace uroce::host {


namespace {

// PEER/UNPEER messages waiting for room in the socket, and PEER_GONE
// notifications waiting for the progress thread: a lease has 65536 QPNs, so
// twice that is more than any well-behaved process or daemon queues.
constexpr size_t kMaxQueued = 2 * (size_t{1} << kDaemonQpnShift);
// Messages DaemonGone reads at most per call (the rest wait for the next).
constexpr int kMaxReadsPerCheck = 64;

bool WouldBlock(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

// send(2) of one whole message (SOCK_SEQPACKET sends all or nothing),
// again after a signal: the socket's send timeout makes an interrupted
// send fail with EINTR even under SA_RESTART (signal(7)).
ssize_t SendMessage(int fd, const std::string& message) {
  ssize_t n;
  do {
    n = send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

std::string ProgramName() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "unknown" : TameProgramName(name);
}

bool AllowedDaemonUid(uid_t uid, uid_t self, const char* daemon_uid_env, bool* env_bad) {
  *env_bad = false;
  if (uid == 0 || uid == self) return true;
  if (daemon_uid_env == nullptr || *daemon_uid_env == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long allowed = std::strtoull(daemon_uid_env, &end, 10);
  if (errno != 0 || *end != '\0' || allowed > 0xFFFFFFFEull) {
    *env_bad = true;
    return false;
  }
  return uid == static_cast<uid_t>(allowed);
}

std::string AllowedText(const char* daemon_uid_env) {
  return daemon_uid_env != nullptr && *daemon_uid_env != '\0'
             ? std::string("root, this user or UROCE_DAEMON_UID=") + daemon_uid_env
             : std::string("root or this user (a daemon of another user: set UROCE_DAEMON_UID to its uid)");
}

// A connected SOCK_SEQPACKET socket to the daemon, replies bounded by 10 s.
StatusOr<int> ConnectToDaemon(const std::string& socket_path) {
  const char* daemon_uid_env = secure_getenv("UROCE_DAEMON_UID");
  if (Status path = CheckDaemonSocketPath(socket_path, geteuid(), daemon_uid_env);
      !path.ok() && path.code() != StatusCode::kNotFound) {
    return path;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("daemon socket path '" + socket_path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    close(fd);
    if (e == ENOENT || e == ECONNREFUSED) {
      return NotFound("no uroce daemon at " + socket_path +
                      " (start one: `uroce daemon --config FILE`; or give this program a configuration of its own: "
                      "`uroce exec --config FILE -- PROGRAM`)");
    }
    return IoError("cannot reach uroce daemon at " + socket_path + ": " + std::strerror(e));
  }
  // Who answered (unix(7), SO_PEERCRED: the credentials of the process
  // that created the listening socket, fixed at connect).
  ucred peer{};
  socklen_t peer_length = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0) {
    const int e = errno;
    close(fd);
    return IoError("uroce daemon at " + socket_path + ": cannot learn who it is: " + std::strerror(e));
  }
  if (Status who = CheckDaemonPeer(peer.uid, peer.pid, geteuid(), daemon_uid_env, socket_path); !who.ok()) {
    close(fd);
    return who;
  }
  // The daemon answers at once (it only starts a port): bound the waits.
  // Replies are awaited with WaitReadable, which keeps its own deadline.
  timeval limit{kDaemonReplyTimeoutMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  return fd;
}

}  // namespace

bool WaitReadable(int fd, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    // Rounded up, so that a wait with less than 1 ms left still polls once.
    const int ready = poll(&p, 1, left > 0 ? static_cast<int>(left) + 1 : 0);
    if (ready > 0) return true;  // readable, or hung up or failed: the read says which
    if (ready < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) {
      errno = ETIMEDOUT;
      return false;
    }
  }
}

Status CheckDaemonPeer(uid_t peer_uid, pid_t peer_pid, uid_t self, const char* daemon_uid_env,
                       const std::string& socket_path) {
  bool env_bad = false;
  if (AllowedDaemonUid(peer_uid, self, daemon_uid_env, &env_bad)) return Status::Ok();
  if (env_bad) {
    return InvalidArgument(std::string("UROCE_DAEMON_UID='") + daemon_uid_env + "' is not a uid");
  }
  return PermissionDenied("uroce daemon at " + socket_path + " is run by uid " + std::to_string(peer_uid) + " (pid " +
                          std::to_string(peer_pid) + "), not " + AllowedText(daemon_uid_env) +
                          ": refusing its configuration");
}

Status CheckDaemonSocketPath(const std::string& socket_path, uid_t self, const char* daemon_uid_env) {
  struct stat socket_stat{};
  if (lstat(socket_path.c_str(), &socket_stat) != 0) {
    if (errno == ENOENT) return NotFound("no socket at " + socket_path);
    return IoError("cannot look at " + socket_path + ": " + std::strerror(errno));
  }
  bool env_bad = false;
  if (!S_ISSOCK(socket_stat.st_mode)) return FailedPrecondition(socket_path + " is not a socket");
  if (!AllowedDaemonUid(socket_stat.st_uid, self, daemon_uid_env, &env_bad)) {
    if (env_bad) return InvalidArgument(std::string("UROCE_DAEMON_UID='") + daemon_uid_env + "' is not a uid");
    return PermissionDenied(socket_path + " belongs to uid " + std::to_string(socket_stat.st_uid) + ", not " +
                            AllowedText(daemon_uid_env) + ": refusing it");
  }
  const size_t slash = socket_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : socket_path.substr(0, slash);
  struct stat dir_stat{};
  if (stat(dir.c_str(), &dir_stat) != 0) return IoError("cannot look at " + dir + ": " + std::strerror(errno));
  if ((dir_stat.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (dir_stat.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(dir_stat.st_mode & 07777));
    return PermissionDenied("the directory of " + socket_path + " (mode " + mode +
                            ") lets other users replace the daemon's socket: refusing it (make it 0755)");
  }
  return Status::Ok();
}

namespace {

// STATS has two lines per attached process (up to 254) and one per local
// link: far more than a request's kMaxControlMessage. A SOCK_SEQPACKET
// message longer than the reader's buffer is cut short without a word
// (unix(7)); the daemon's socket sends up to its send buffer (208 KiB by
// default) in one.
constexpr size_t kMaxQueryReply = size_t{1} << 20;

// One request that needs no session (STATS, DEVICES) and its answer.
StatusOr<std::string> QueryDaemon(const std::string& socket_path, const std::string& request) {
  auto fd = ConnectToDaemon(socket_path);
  if (!fd.ok()) return fd.status();
  std::vector<char> reply(kMaxQueryReply);
  ssize_t n = -1;
  if (SendMessage(*fd, request) == static_cast<ssize_t>(request.size()) &&
      WaitReadable(*fd, kDaemonReplyTimeoutMs)) {
    n = recv(*fd, reply.data(), reply.size(), MSG_DONTWAIT);
  }
  close(*fd);
  const std::string text(reply.data(), n > 0 ? static_cast<size_t>(n) : 0);
  if (text.rfind("OK\n", 0) != 0) return IoError("uroce daemon at " + socket_path + " did not answer " + request);
  return text.substr(3);
}

}  // namespace

StatusOr<std::string> QueryDaemonStats(const std::string& socket_path) { return QueryDaemon(socket_path, "STATS"); }

StatusOr<std::string> QueryDaemonDevices(const std::string& socket_path) {
  return QueryDaemon(socket_path, "DEVICES");
}

std::string DaemonSocketPath() {
  const char* env = secure_getenv("UROCE_DAEMON");
  return env != nullptr && *env != '\0' ? env : DaemonConfig{}.socket;
}

StatusOr<std::unique_ptr<DaemonSession>> DaemonSession::Attach(const std::string& socket_path) {
  auto fd = ConnectToDaemon(socket_path);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<DaemonSession> session(new DaemonSession());
  session->socket_path_ = socket_path;
  session->fd_ = *fd;
  if (const char* links = secure_getenv("UROCE_LOCAL_LINKS"); links != nullptr) {
    const std::string_view v(links);
    session->takes_links_ = !(v == "no" || v == "0" || v == "off" || v == "false");
  }
  AttachRequest request;
  request.pid = getpid();
  request.program = ProgramName();
  const std::string message = FormatAttachRequest(request);
  if (SendMessage(session->fd_, message) != static_cast<ssize_t>(message.size())) {
    return IoError("uroce daemon at " + socket_path + ": cannot send: " + std::strerror(errno));
  }
  // The reply, and the ports' shared-memory files as SCM_RIGHTS (unix(7)),
  // closed with the session, even when refused below.
  bool truncated = false;
  const ssize_t n = session->ReadReply(&session->shm_fds_, &truncated);
  if (n <= 0) {
    return IoError("uroce daemon at " + socket_path + " did not answer" +
                   (n < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (it closed the session)")));
  }
  auto parsed = ParseAttachReply(std::string_view(session->read_buffer_.data(), static_cast<size_t>(n)));
  if (!parsed.ok()) {
    return Status(parsed.status().code(), "uroce daemon at " + socket_path + ": " + parsed.status().message());
  }
  // Only the configuration a daemon writes is taken (ParseAttachGrant), and
  // what gets loaded is our own text of it.
  auto grant = ParseAttachGrant(parsed->config_text, parsed->slot);
  if (!grant.ok()) {
    return Status(grant.status().code(), "uroce daemon at " + socket_path +
                                             ": refusing the configuration it handed out: " + grant.status().message());
  }
  if (session->shm_fds_.size() != grant->endpoints.size() || truncated) {
    return IoError("uroce daemon at " + socket_path + ": the reply carried " +
                   std::to_string(session->shm_fds_.size()) + " ports for " + std::to_string(grant->endpoints.size()) +
                   " uplinks");
  }
  session->slot_ = parsed->slot;
  session->config_text_ = FormatGrantConfig(*grant);
  return session;
}

DaemonSession::~DaemonSession() {
  for (int fd : shm_fds_) close(fd);
  for (const QueuedLinkChange& c : link_changes_) {
    if (c.fd >= 0) close(c.fd);
  }
  if (fd_ >= 0) close(fd_);
}

void DaemonSession::CloseInheritedFilesAfterFork() {
  for (int& fd : shm_fds_) {
    close(fd);
    fd = -1;
  }
  for (QueuedLinkChange& c : link_changes_) {
    if (c.fd >= 0) close(c.fd);
    c.fd = -1;
  }
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  gone_ = true;
}

Status DaemonSession::ClaimPort(uint16_t port, bool listen) {
  std::lock_guard<std::mutex> lock(request_mutex_);
  if (gone_) return Unavailable("the uroce daemon is gone");
  const std::string message = FormatPortClaim({port, listen});
  if (SendMessage(fd_, message) != static_cast<ssize_t>(message.size())) {
    return Unavailable(std::string("uroce daemon: cannot send: ") + std::strerror(errno));
  }
  read_buffer_.resize(kMaxControlMessage + 1);
  for (;;) {
    // Bounded by kDaemonReplyTimeoutMs per message.
    std::vector<int> files;
    const ssize_t n = ReadReply(&files);
    if (n == 0) gone_ = true;
    if (n < 0) {
      // The daemon answers every request, in order: this answer may still
      // come (a daemon that gets no CPU for seconds), and must not be taken
      // for the next request's.
      ++replies_owed_;
      return Unavailable("uroce daemon did not answer within " + std::to_string(reply_timeout_ms_) + " ms");
    }
    if (n == 0) return Unavailable("uroce daemon is gone");
    const std::string_view text(read_buffer_.data(), static_cast<size_t>(n));
    if (QueueIfNotification(text, &files)) continue;  // not ours to answer: kept, and read on
    CloseAll(&files);
    if (replies_owed_ > 0) {  // the late answer to a request that gave up waiting
      --replies_owed_;
      continue;
    }
    if (text == "OK") return Status::Ok();
    if (text.rfind("ERROR ", 0) == 0) return AlreadyExists(std::string(text.substr(6)));
    return Internal("uroce daemon: unexpected answer");
  }
}

ssize_t DaemonSession::ReadReply(std::vector<int>* files, bool* truncated) {
  if (!WaitReadable(fd_, reply_timeout_ms_)) return -1;
  return ReadMessage(MSG_DONTWAIT, files, truncated);
}

ssize_t DaemonSession::ReadMessage(int flags, std::vector<int>* files, bool* truncated) {
  read_buffer_.resize(kMaxControlMessage + 1);
  iovec iov{read_buffer_.data(), read_buffer_.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxUplinks)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd_, &mh, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  if (truncated != nullptr) *truncated = (mh.msg_flags & MSG_CTRUNC) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int file;
      std::memcpy(&file, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      files->push_back(file);
    }
  }
  return n;
}

void DaemonSession::CloseAll(std::vector<int>* files) {
  for (int f : *files) close(f);
  files->clear();
}

bool DaemonSession::QueueIfNotification(std::string_view message, std::vector<int>* files) {
  if (!IsNotification(message)) return false;
  if (IsLinkChange(message)) {
    QueueLinkChange(message, files);
    return true;
  }
  CloseAll(files);  // nothing else comes with a file
  auto gone = ParsePeersGone(message);
  if (!gone.ok()) {
    UROCE_LOG(ERR, kHost, "ignored a malformed notification from the uroce daemon: %s\n",
                 gone.status().message().c_str());
    return true;
  }
  std::lock_guard<std::mutex> lock(gone_mutex_);
  for (const PeerGone& g : *gone) {
    if ((g.qpn >> kDaemonQpnShift) != slot_) continue;  // not one of our QPs
    if (peers_gone_.size() >= kMaxQueued) {
      if (!peers_gone_overflowed_) UROCE_LOG(ERR, kHost, "too many PEER_GONE notifications queued: some lost\n");
      peers_gone_overflowed_ = true;
      break;
    }
    peers_gone_.push_back(g);
  }
  return true;
}

void DaemonSession::QueueLinkChange(std::string_view message, std::vector<int>* files) {
  auto change = ParseLinkChange(message);
  // A LINK carries exactly one file, an UNLINK none.
  if (!change.ok() || files->size() != (change->add ? 1u : 0u)) {
    UROCE_LOG(ERR, kHost, "ignored a malformed link notification from the uroce daemon\n");
    CloseAll(files);
    return;
  }
  std::unique_lock<std::mutex> lock(gone_mutex_);
  if (change->add && (!takes_links_ || link_changes_.size() >= kMaxQueuedLinkChanges)) {
    // Not made: the switch carries the traffic, for the other side too.
    lock.unlock();
    CloseAll(files);
    DeclineLink(change->uplink, change->slot);
    return;
  }
  if (link_changes_.size() >= kMaxQueuedLinkChanges) return;  // an UNLINK: the file's closed flag says it too
  link_changes_.push_back({*change, change->add ? files->front() : -1});
  files->clear();
}

std::vector<DaemonSession::QueuedLinkChange> DaemonSession::TakeLinkChanges() {
  std::lock_guard<std::mutex> lock(gone_mutex_);
  std::vector<QueuedLinkChange> out;
  out.swap(link_changes_);
  return out;
}

std::vector<PeerGone> DaemonSession::TakePeersGone() {
  std::lock_guard<std::mutex> lock(gone_mutex_);
  std::vector<PeerGone> out;
  out.swap(peers_gone_);
  return out;
}

void DaemonSession::Send(std::string message) {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  if (gone_) return;
  // In order: nothing overtakes a message that waits.
  if (outbox_.empty()) {
    if (send(fd_, message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
        static_cast<ssize_t>(message.size())) {
      return;
    }
    if (!WouldBlock(errno)) return;  // the daemon is gone: DaemonGone says so
  }
  if (outbox_.size() >= kMaxQueued) {
    if (!outbox_overflowed_) UROCE_LOG(ERR, kHost, "the uroce daemon does not read its socket: PEER records lost\n");
    outbox_overflowed_ = true;
    return;
  }
  outbox_.push_back(std::move(message));
}

void DaemonSession::RegisterPeer(const PeerRecord& record) { Send(FormatPeer(record)); }

void DaemonSession::UnregisterPeer(uint32_t qpn) { Send(FormatUnpeer(qpn)); }

void DaemonSession::DeclineLink(uint32_t uplink, uint32_t slot) { Send(FormatLinkChange({uplink, slot, false})); }

bool DaemonSession::DaemonGone() {
  if (gone_) return true;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    while (!outbox_.empty()) {
      const std::string& m = outbox_.front();
      if (send(fd_, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(m.size())) {
        if (!WouldBlock(errno)) outbox_.clear();  // the daemon is gone: the read below says so
        break;
      }
      outbox_.pop_front();
    }
  }
  // A thread waiting for a reply reads the socket now: it queues what it
  // finds and notices the end of the session itself.
  std::unique_lock<std::mutex> lock(request_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return gone_;
  for (int i = 0; i < kMaxReadsPerCheck; ++i) {
    std::vector<int> files;
    const ssize_t n = ReadMessage(MSG_DONTWAIT, &files);
    // 0: the daemon closed its end (orderly stop or death); an error other
    // than "nothing to read" means the same.
    if (n == 0 || (n < 0 && !WouldBlock(errno))) {
      gone_ = true;
      break;
    }
    if (n < 0) break;
    // Anything but a notification is a late reply to a request that gave up
    // waiting: nobody wants it.
    if (!QueueIfNotification(std::string_view(read_buffer_.data(), static_cast<size_t>(n)), &files)) {
      CloseAll(&files);
      if (replies_owed_ > 0) --replies_owed_;
    }
  }
  return gone_;
}

}  // namespace uroce::host
