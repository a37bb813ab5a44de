// The out-of-band channel `uroce perf` uses to exchange what RDMA needs
// before the first packet (QPN, PSN, GID, buffer address, rkey), the way
// perftest does with a TCP socket. Lines of text over a stream socket:
//   --control PATH        a UNIX socket file; crosses network namespaces,
//                         since a path lives in the file system (the veth
//                         test's two namespaces share /tmp)
//   --control HOST:PORT   TCP, for two hosts; an empty HOST (":PORT") is
//                         127.0.0.1, never every interface: the channel is
//                         unauthenticated and hands the peer a writable
//                         rkey, so reaching it from another host is asked
//                         for by name (0.0.0.0:PORT, or the host's address)
// A path socket gives group and others no access, and each side checks the other's
// credentials (SO_PEERCRED): a server or client of another user is refused
// (the server goes on waiting for its own). The default path is in the
// user's private directory (common/private_dir.h). TCP has no such check:
// it is for hosts and networks whose users are trusted.
// The server listens, the client connects (retrying until the server is up).
// Reads never block the caller for long: the caller keeps driving its engines
// (inline progress) between tries, or the peer's ARP requests would go
// unanswered.
//
// The peer is not trusted: every wait (connect, accept, send, receive) ends
// at a deadline (a timeout of 0 is one try, never "forever"), and a line
// longer than kMaxLineBytes is an error, so a peer cannot hold the caller or
// grow its buffer without bound.
//
// Threads: one thread (the application's).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace uroce::tools {

class SideChannel {
 public:
  // The longest line either side sends or accepts, '\n' excluded. The longest
  // real one is an INFO line with 256 QPs (about 4.8 KB: 256 times
  // "QPN:PSN," of up to 18 characters, plus the GID and buffer fields).
  static constexpr size_t kMaxLineBytes = 8192;
  // How long Send waits for the peer to take a line by default.
  static constexpr unsigned kSendTimeoutMs = 10000;

  // `address` is a path (with a '/') or HOST:PORT; an empty HOST is
  // 127.0.0.1 (see above). PORT 0 picks a free port (LocalAddress names it).
  static StatusOr<SideChannel> Listen(const std::string& address);
  // Retries until `timeout_ms`, calling `idle` between tries. Every try,
  // connect(2) included, is bounded by the same deadline.
  static StatusOr<SideChannel> Connect(const std::string& address, unsigned timeout_ms,
                                       const std::function<bool()>& idle);

  SideChannel(SideChannel&& other) noexcept;
  SideChannel& operator=(SideChannel&& other) noexcept;
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;
  ~SideChannel();

  // Listener: waits for one client until `timeout_ms` (0: one try), calling
  // `idle` between tries; `idle` returning false gives up (a signal).
  StatusOr<SideChannel> Accept(unsigned timeout_ms, const std::function<bool()>& idle);

  // Adds the '\n'. kInvalidArgument for a line over kMaxLineBytes (or with a
  // '\n' in it); kUnavailable when the peer does not take it within
  // `timeout_ms`.
  Status Send(const std::string& line, unsigned timeout_ms = kSendTimeoutMs);
  // The next line without its '\n', within `timeout_ms` (0: only if one is
  // complete now). `idle` runs between tries; returning false gives up
  // (kUnavailable). EOF is kNotFound ("peer closed"); a line over
  // kMaxLineBytes is kInvalidArgument, and the channel stays failed.
  StatusOr<std::string> Receive(unsigned timeout_ms, const std::function<bool()>& idle);
  // A line if one is complete now, without waiting.
  bool TryReceive(std::string* line, Status* error);

  // The bound address: "127.0.0.1:PORT", "[::1]:PORT", or the socket path.
  std::string LocalAddress() const;

 private:
  explicit SideChannel(int fd, std::string unlink_path = "") : fd_(fd), unlink_path_(std::move(unlink_path)) {}
  bool TakeLine(std::string* line, Status* error);
  int fd_ = -1;
  std::string unlink_path_;  // the listener's socket file
  std::string buffer_;
  bool eof_ = false;
  bool too_long_ = false;  // a peer's line went over kMaxLineBytes
};

}  // namespace uroce::tools
