// The out-of-band channel `uroce perf` uses to exchange what RDMA needs
// before the first packet (QPN, PSN, GID, buffer address, rkey), the way
// perftest does with a TCP socket. Lines of text over a stream socket:
//   --control PATH        a UNIX socket file; crosses network namespaces,
//                         since a path lives in the file system (the veth
//                         test's two namespaces share /tmp)
//   --control HOST:PORT   TCP, for two hosts; an empty HOST (":PORT") is
//                         127.0.0.1, never every interface: the channel
//                         hands the peer a writable rkey, so reaching it
//                         from another host is asked for by name
//                         (0.0.0.0:PORT, or the host's address)
// A path socket gives group and others no access, and each side checks the other's
// credentials (SO_PEERCRED): a server or client of another user is refused
// (the server goes on waiting for its own). The default path is in the
// user's private directory (common/private_dir.h).
//
// TCP has no credentials to check, so a one-time token stands in for them:
// 16 random bytes both sides know (the server makes them and prints them;
// the user hands them to the client). The first line on the stream is the
// client's "HELLO token=<first half>"; the server answers "HELLO
// token=<second half>", so each side shows the other it knows the token
// without sending the half it checks. A client with a wrong or no hello is
// closed and counted, and the server goes on waiting for the right one
// (the first comer cannot take the run); a client refuses a server that
// answers wrongly. A man in the middle can still relay both halves: TCP,
// token or not, is for networks whose hosts are trusted. On a path the
// token is optional (the credentials already say who the peer is).
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

  // The token: 16 bytes, written as 32 lowercase hex digits; each half
  // (16 digits) goes one way in the hello.
  static constexpr size_t kTokenBytes = 16;
  // How long the server waits for a connected client's hello (the client
  // sends it at once), and at most this many clients wait for theirs at a
  // time; beyond that the oldest is closed.
  static constexpr unsigned kHelloTimeoutMs = 5000;
  static constexpr size_t kMaxPendingHellos = 16;

  // True for a path (it has a '/'), false for HOST:PORT.
  static bool IsPath(const std::string& address);
  // A new token from getrandom(2), as hex.
  static StatusOr<std::string> NewToken();
  // `text` as a token: 32 hex digits of either case, returned in lowercase.
  // Anything else is kInvalidArgument (a message that does not repeat it).
  static StatusOr<std::string> ParseToken(const std::string& text);

  // `address` is a path (with a '/') or HOST:PORT; an empty HOST is
  // 127.0.0.1 (see above). PORT 0 picks a free port (LocalAddress names it).
  static StatusOr<SideChannel> Listen(const std::string& address);
  // Retries until `timeout_ms`, calling `idle` between tries. Every try,
  // connect(2) included, is bounded by the same deadline. With a `token`
  // (hex, from ParseToken or NewToken) the hello comes first: a server that
  // closes on it or answers wrongly is kPermissionDenied, not retried. An
  // empty `token`: no hello (the server must expect none either).
  static StatusOr<SideChannel> Connect(const std::string& address, unsigned timeout_ms,
                                       const std::function<bool()>& idle, const std::string& token = "");

  SideChannel(SideChannel&& other) noexcept;
  SideChannel& operator=(SideChannel&& other) noexcept;
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;
  ~SideChannel();

  // Listener: waits for one client until `timeout_ms` (0: one try), calling
  // `idle` between tries; `idle` returning false gives up (a signal). With a
  // `token` the client must send the hello (see above) and gets the answer
  // before Accept returns; clients that do not (wrong token, no hello, none
  // within kHelloTimeoutMs) are closed, logged on stderr and counted
  // (refused()), and the wait goes on. An empty `token`: no hello.
  StatusOr<SideChannel> Accept(unsigned timeout_ms, const std::function<bool()>& idle,
                               const std::string& token = "");
  // Clients this listener turned away so far (another user's, a wrong hello).
  unsigned refused() const { return refused_; }

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
  // Closes the socket and removes the listener's file; the members stay
  // alive (the destructor and move assignment share it).
  void Release();
  int fd_ = -1;
  std::string unlink_path_;  // the listener's socket file
  std::string buffer_;
  bool eof_ = false;
  bool too_long_ = false;  // a peer's line went over kMaxLineBytes
  unsigned refused_ = 0;   // the listener's count of turned-away clients
};

}  // namespace uroce::tools
