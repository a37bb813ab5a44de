// The out-of-band channel `uroce perf` uses to exchange what RDMA needs
// before the first packet (QPN, PSN, GID, buffer address, rkey), the way
// perftest does with a TCP socket. Lines of text over a stream socket:
//   --control PATH        a UNIX socket file; crosses network namespaces,
//                         since a path lives in the file system (the veth
//                         test's two namespaces share /tmp)
//   --control HOST:PORT   TCP, for two hosts
// The server listens, the client connects (retrying until the server is up).
// Reads never block the caller for long: the caller keeps driving its engines
// (inline progress) between tries, or the peer's ARP requests would go
// unanswered.
//
// Threads: one thread (the application's).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace uroce::tools {

class SideChannel {
 public:
  // `address` is a path (with a '/') or HOST:PORT.
  static StatusOr<SideChannel> Listen(const std::string& address);
  // Retries until `timeout_ms`, calling `idle` between tries.
  static StatusOr<SideChannel> Connect(const std::string& address, unsigned timeout_ms,
                                       const std::function<bool()>& idle);

  SideChannel(SideChannel&& other) noexcept;
  SideChannel& operator=(SideChannel&& other) noexcept;
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;
  ~SideChannel();

  // Listener: waits for one client until `timeout_ms` (0: forever), calling
  // `idle` between tries; `idle` returning false gives up (a signal).
  StatusOr<SideChannel> Accept(unsigned timeout_ms, const std::function<bool()>& idle);

  Status Send(const std::string& line);  // adds the '\n'
  // The next line without its '\n'. `idle` runs between tries; returning
  // false gives up (kUnavailable). EOF is kNotFound ("peer closed").
  StatusOr<std::string> Receive(unsigned timeout_ms, const std::function<bool()>& idle);
  // A line if one is complete now, without waiting.
  bool TryReceive(std::string* line, Status* error);

 private:
  explicit SideChannel(int fd, std::string unlink_path = "") : fd_(fd), unlink_path_(std::move(unlink_path)) {}
  bool TakeLine(std::string* line);
  int fd_ = -1;
  std::string unlink_path_;  // the listener's socket file
  std::string buffer_;
  bool eof_ = false;
};

}  // namespace uroce::tools
