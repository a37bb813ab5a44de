// A process's side of `uroce daemon`: attaching over the control socket and
// noticing when the daemon is gone. The verbs provider attaches when the
// program has no configuration of its own (no UROCE_CONFIG).
//
// Threads: Attach on the control path; DaemonGone from any one thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "pmd/daemon_protocol.h"

namespace uroce::pmd {

// UROCE_DAEMON (read with secure_getenv(3)), or the default socket.
std::string DaemonSocketPath();

// The daemon's STATS answer (attached processes, uplink, switch counters),
// without attaching. kNotFound when nobody listens at `socket_path`.
StatusOr<std::string> QueryDaemonStats(const std::string& socket_path);

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
  // True once the daemon closed the session (it stopped or died). One
  // non-blocking system call: for a progress thread, never the fast path.
  bool DaemonGone();
  // Claims (listen) or releases a CM port host-wide: kAlreadyExists when
  // another process on the host listens on it. Control path; any thread.
  Status ClaimPort(uint16_t port, bool listen);

 private:
  DaemonSession() = default;
  int fd_ = -1;
  uint32_t slot_ = 0;
  std::string config_text_;
  std::string socket_path_;
  std::atomic<bool> gone_{false};
  std::mutex request_mutex_;  // one request and its reply at a time
};

}  // namespace uroce::pmd
