// A process's side of `uroce daemon`: attaching over the control socket and
// noticing when the daemon is gone. The verbs provider attaches when the
// program has no configuration of its own (no UROCE_CONFIG).
//
// Threads: Attach on the control path; DaemonGone and TakePeersGone from any
// one thread (the provider's progress thread); the rest from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "host/daemon_protocol.h"

namespace uroce::host {

// UROCE_DAEMON (read with secure_getenv(3)), or the default socket.
std::string DaemonSocketPath();

// Whom a process takes a configuration from. Whoever answers on the
// daemon's socket chooses the ports, addresses and QPNs the program uses,
// so the answer is taken only from a daemon run by root, by this process's
// own effective user (no boundary: it could ptrace us anyway) or by the uid
// in UROCE_DAEMON_UID (secure_getenv(3); a daemon run by a service user).
// Pure, for tests: `daemon_uid_env` is the variable's value or null.
Status CheckDaemonPeer(uid_t peer_uid, pid_t peer_pid, uid_t self, const char* daemon_uid_env,
                       const std::string& socket_path);
// The socket's own file and its directory, before connecting: the socket
// must be a socket, owned by an allowed uid (CheckDaemonPeer), and the
// directory must not let other users replace it (writable by group or
// others only with the sticky bit, as /tmp). A failure names the path and
// what is wrong. The peer's credentials are checked after connecting as
// well: the directory check only turns a misconfiguration into a clear
// error early.
Status CheckDaemonSocketPath(const std::string& socket_path, uid_t self, const char* daemon_uid_env);

// The daemon's STATS answer (attached processes, uplink, switch counters),
// without attaching. kNotFound when nobody listens at `socket_path`.
StatusOr<std::string> QueryDaemonStats(const std::string& socket_path);
// The daemon's DEVICES answer, without attaching: one line per device,
// "device uroceK netdev=IFNAME|- gids=HEX32[,HEX32...]" (what `uroce exec`
// presents as the devices' files, tools/device_files.h).
StatusOr<std::string> QueryDaemonDevices(const std::string& socket_path);

// How long a process waits for the daemon's reply to one request; it
// answers at once (it only starts a port or claims one).
constexpr int kDaemonReplyTimeoutMs = 10000;

// Waits until `fd` has something to read, for at most `timeout_ms` in all:
// true if it has, false on timeout (errno ETIMEDOUT) or error. A signal
// does not cut the wait short. signal(7): whatever SA_RESTART says, poll(2)
// fails with EINTR when a handler runs, and recv(2) on a socket with a
// receive timeout also when the process is stopped and continued (a
// debugger attaching, job control); an unmodified program may take signals
// at any time, and a wait cut short would cost it its device.
bool WaitReadable(int fd, int timeout_ms);

class DaemonSession {
 public:
  // Connects to the daemon at `socket_path`, attaches as this process and
  // returns the configuration it hands out. kNotFound when nobody listens
  // there (the message says how to start a daemon).
  static StatusOr<std::unique_ptr<DaemonSession>> Attach(const std::string& socket_path);
  ~DaemonSession();
  DaemonSession(const DaemonSession&) = delete;
  DaemonSession& operator=(const DaemonSession&) = delete;

  uint32_t slot() const { return slot_; }
  const std::string& config_text() const { return config_text_; }
  const std::string& socket_path() const { return socket_path_; }
  // The shared-memory files of the handed-out ports (host/shm_channel.h), in
  // the order of the configuration's `port = shm:daemon:K`; they came with
  // the reply and belong to the session.
  const std::vector<int>& shm_fds() const { return shm_fds_; }
  // True once the daemon closed the session (it stopped or died). Reads
  // what the daemon sent unasked (PEER_GONE, queued for TakePeersGone) and
  // sends what RegisterPeer/UnregisterPeer could not send at once. A few
  // non-blocking system calls: for a progress thread, never the fast path.
  bool DaemonGone();
  // Claims (listen) or releases a CM port host-wide: kAlreadyExists when
  // another process on the host listens on it; kUnavailable when the daemon
  // is gone or did not answer in time (its late answer is then skipped,
  // never taken for a later request's). Control path; any thread.
  Status ClaimPort(uint16_t port, bool listen);
  // How long a request waits for each message of its answer (default
  // kDaemonReplyTimeoutMs).
  void set_reply_timeout_ms(int timeout_ms) { reply_timeout_ms_ = timeout_ms; }

  // Our QP `record.qpn` is connected to a QP at one of the host's addresses
  // (PEER), or no longer (UNPEER). Fire and forget, never blocks: a message
  // the socket cannot take now waits, in order, for the next DaemonGone.
  // Control path; any thread.
  void RegisterPeer(const PeerRecord& record);
  void UnregisterPeer(uint32_t qpn);
  // The PEER_GONE notifications received so far (our QPs whose peer's
  // process ended), oldest first; only QPNs of our own lease.
  std::vector<PeerGone> TakePeersGone();
  // The LINK / UNLINK notifications received so far, oldest first; a LINK's
  // file (fd) is the taker's to close.
  struct QueuedLinkChange {
    LinkChange change;
    int fd = -1;
  };
  std::vector<QueuedLinkChange> TakeLinkChanges();
  // We let go of (or could not map) the link on `uplink` to `slot`: the
  // daemon closes it for both (UNLINK U S, fire and forget, as PEER), and
  // our frames to that process go through the switch.
  void DeclineLink(uint32_t uplink, uint32_t slot);
  // UROCE_LOCAL_LINKS=no in the environment at attach: this process takes
  // no direct links (every frame to another process goes through the
  // daemon's switch, where its counters see it). Default: takes them.
  bool takes_links() const { return takes_links_; }

  // In the child of a fork(2), for the copy of its parent's session: closes
  // the copies of the parent's socket and files, and says nothing to the
  // daemon. The parent's session ends when the parent closes its socket,
  // whatever its children do, and the child attaches as a process of its
  // own. Touches no lock (another thread of the parent may have held one
  // at the fork): the child is single-threaded then. The object is not to
  // be used or destroyed afterwards; the caller lets go of it.
  void CloseInheritedFilesAfterFork();

 private:
  DaemonSession() = default;
  void Send(std::string message);
  // One message into read_buffer_ (request_mutex_), with the files that
  // came with it (truncated: some did not fit); recvmsg(2)'s result.
  ssize_t ReadMessage(int flags, std::vector<int>* files, bool* truncated = nullptr);
  // The next message, waiting for it up to reply_timeout_ms_
  // (WaitReadable); ReadMessage's result, or -1 with errno ETIMEDOUT.
  ssize_t ReadReply(std::vector<int>* files, bool* truncated = nullptr);
  static void CloseAll(std::vector<int>* files);
  // A message the daemon sent: a notification is queued (true; its files
  // taken); anything else is a reply (false; its files left).
  bool QueueIfNotification(std::string_view message, std::vector<int>* files);
  void QueueLinkChange(std::string_view message, std::vector<int>* files);
  int fd_ = -1;
  std::vector<int> shm_fds_;  // one per uplink, in order
  uint32_t slot_ = 0;
  bool takes_links_ = true;
  std::string config_text_;
  std::string socket_path_;
  std::atomic<bool> gone_{false};
  std::mutex request_mutex_;  // one request and its reply at a time; whoever reads the socket
  std::vector<char> read_buffer_;  // request_mutex_
  // Answers still to come to requests that stopped waiting for them, in
  // order, before the answer to the next request (request_mutex_).
  unsigned replies_owed_ = 0;
  std::atomic<int> reply_timeout_ms_{kDaemonReplyTimeoutMs};

  std::mutex outbox_mutex_;  // PEER/UNPEER not sent yet, in order (bounded)
  std::deque<std::string> outbox_;
  bool outbox_overflowed_ = false;
  std::mutex gone_mutex_;  // PEER_GONE received, not taken yet (bounded)
  std::vector<PeerGone> peers_gone_;
  bool peers_gone_overflowed_ = false;
  static constexpr size_t kMaxQueuedLinkChanges = 1024;
  std::vector<QueuedLinkChange> link_changes_;  // gone_mutex_
};

}  // namespace uroce::host
