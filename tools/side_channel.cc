#include "tools/side_channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace uroce::tools {
namespace {

using Clock = std::chrono::steady_clock;

// The address an empty HOST means. The channel carries a writable rkey, so
// it is reachable from this host only unless the user names another
// address.
constexpr char kDefaultHost[] = "127.0.0.1";

constexpr char kHello[] = "HELLO token=";

// The hello lines of a token (hex): the client sends the first half, the
// server the second, so neither line gives away the half it is checked
// against.
std::string ClientHello(const std::string& token) { return kHello + token.substr(0, token.size() / 2); }
std::string ServerHello(const std::string& token) { return kHello + token.substr(token.size() / 2); }

// `a == b` in a time that depends on the lengths only (which are no secret:
// every hello line has the same), so the time a refusal takes does not say
// how many leading digits were right.
bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  // volatile: the compiler may not turn the loop into one that stops at the
  // first difference.
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// What a peer sent, fit for a terminal: control characters (escapes) as '?'.
std::string Tamed(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

// "127.0.0.1:PORT", "[::1]:PORT" or the socket path; "" if it has no name.
std::string FormatAddress(const sockaddr_storage& ss, socklen_t len) {
  if (ss.ss_family == AF_UNIX) return reinterpret_cast<const sockaddr_un*>(&ss)->sun_path;
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

Status Errno(const std::string& what) { return IoError(what + ": " + std::strerror(errno)); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Milliseconds left until `deadline`, at least 0 and at most `slice`: poll(2)
// waits in slices so that `idle` still runs often.
int PollSlice(Clock::time_point deadline, int slice) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, slice));
}

// "HOST:PORT" (HOST may be "[v6]") split; an empty HOST is kDefaultHost.
StatusOr<addrinfo*> Resolve(const std::string& address, bool passive) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("--control " + address + ": expected PATH or HOST:PORT");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = kDefaultHost;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("--control " + address + ": " + gai_strerror(rc));
  return res;
}

StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr = {};
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("--control path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  return addr;
}

// One non-blocking connect(2), waited for with poll(2) until `deadline`.
// Returns the connected socket, or -1 with errno set.
// The process at the other end of a connected UNIX socket must run as our
// effective user (SO_PEERCRED, unix(7)).
Status CheckSameUser(int fd, const std::string& address, const char* role) {
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) return Errno("SO_PEERCRED on " + address);
  if (peer.uid == geteuid()) return Status::Ok();
  return PermissionDenied("the perf " + std::string(role) + " on " + address + " is uid " + std::to_string(peer.uid) +
                          " (pid " + std::to_string(peer.pid) + "), not this user (uid " + std::to_string(geteuid()) +
                          "): refused");
}

int ConnectOnce(int family, const sockaddr* addr, socklen_t length, Clock::time_point deadline,
                const std::function<bool()>& idle) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, addr, length) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  // connect(2), EINPROGRESS: poll for writability, then SO_ERROR says how it
  // ended. A SYN nobody answers would otherwise block for minutes.
  for (;;) {
    pollfd p = {fd, POLLOUT, 0};
    const int n = poll(&p, 1, PollSlice(deadline, 20));
    if (n > 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == 0) return fd;
      close(fd);
      errno = err;
      return -1;
    }
    if (Clock::now() >= deadline || (idle && !idle())) {
      close(fd);
      errno = ETIMEDOUT;
      return -1;
    }
  }
}

}  // namespace

bool SideChannel::IsPath(const std::string& address) { return address.find('/') != std::string::npos; }

StatusOr<std::string> SideChannel::NewToken() {
  unsigned char bytes[kTokenBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    // getrandom(2) with no flags: the kernel's CSPRNG, blocking only until
    // it is first seeded at boot. Up to 256 bytes never come back short
    // once it is, but a signal may interrupt the wait (EINTR).
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("getrandom");
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 0xf];
  }
  return hex;
}

StatusOr<std::string> SideChannel::ParseToken(const std::string& text) {
  // The message does not repeat what it was given: it may be a secret with
  // a typo in it.
  const Status bad = InvalidArgument("a perf token is " + std::to_string(2 * kTokenBytes) + " hex digits (" +
                                     std::to_string(kTokenBytes) + " bytes), as the server prints it, or none");
  if (text.size() != 2 * kTokenBytes) return bad;
  std::string hex;
  for (char c : text) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
      hex += c;
    } else if (c >= 'A' && c <= 'F') {
      hex += static_cast<char>(c - 'A' + 'a');
    } else {
      return bad;
    }
  }
  return hex;
}

StatusOr<SideChannel> SideChannel::Listen(const std::string& address) {
  int fd = -1;
  std::string unlink_path;
  if (IsPath(address)) {
    auto addr = UnixAddress(address);
    if (!addr.ok()) return addr.status();
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    // A socket file left by an earlier run goes; anything else at that path
    // (a typo, a real file) is the user's and stays: bind then fails.
    struct stat st;
    if (lstat(address.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(address.c_str());
    // No access for group or others from the start (the umask applies to
    // bind, unix(7)): only this user (and root) may connect. Accept checks
    // who did as well.
    const mode_t old_mask = umask(077);
    const int bound = bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr));
    const int bind_errno = errno;
    umask(old_mask);
    if (bound != 0) {
      errno = bind_errno;
      Status s = Errno("bind " + address);
      close(fd);
      return s;
    }
    unlink_path = address;
  } else {
    auto res = Resolve(address, true);
    if (!res.ok()) return res.status();
    addrinfo* ai = *res;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      Status s = Errno("bind " + address);
      if (fd >= 0) close(fd);
      freeaddrinfo(ai);
      return s;
    }
    freeaddrinfo(ai);
  }
  // Room for as many queued clients as may wait for their hello at once:
  // with a backlog of 1 a few wrong clients would make the right one's SYN
  // wait for a retransmission (listen(2): the queue of completed
  // connections).
  if (listen(fd, static_cast<int>(kMaxPendingHellos)) != 0) {
    Status s = Errno("listen " + address);
    close(fd);
    return s;
  }
  SetNonBlocking(fd);
  return SideChannel(fd, unlink_path);
}

StatusOr<SideChannel> SideChannel::Connect(const std::string& address, unsigned timeout_ms,
                                           const std::function<bool()>& idle, const std::string& token) {
  if (!token.empty() && token.size() != 2 * kTokenBytes) return InvalidArgument("a perf token of the wrong length");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const bool path = IsPath(address);
  sockaddr_un unix_addr = {};
  addrinfo* ai = nullptr;
  if (path) {
    auto addr = UnixAddress(address);
    if (!addr.ok()) return addr.status();
    unix_addr = *addr;
  } else {
    // Once: getaddrinfo may ask DNS, which has its own (resolv.conf) bounds.
    auto res = Resolve(address, false);
    if (!res.ok()) return res.status();
    ai = *res;
  }
  std::string last_error;
  for (;;) {
    const int fd = path ? ConnectOnce(AF_UNIX, reinterpret_cast<const sockaddr*>(&unix_addr), sizeof(unix_addr),
                                      deadline, idle)
                        : ConnectOnce(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline, idle);
    if (fd >= 0) {
      if (ai != nullptr) freeaddrinfo(ai);
      if (path) {
        // Whoever listens on the path gets our QPNs, PSNs and a writable
        // rkey: only a server of our own user.
        if (Status peer = CheckSameUser(fd, address, "server"); !peer.ok()) {
          close(fd);
          return peer;
        }
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on UNIX sockets
      SideChannel channel(fd);
      if (token.empty()) return channel;
      // The hello. The server may be slow to take the connection (it runs
      // `idle` between looks), so the answer gets the rest of the deadline,
      // and at least kHelloTimeoutMs however long connecting took.
      if (Status sent = channel.Send(ClientHello(token)); !sent.ok()) return sent;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      auto answer = channel.Receive(static_cast<unsigned>(std::max<long long>(left, kHelloTimeoutMs)), idle);
      if (!answer.ok() && answer.status().code() == StatusCode::kNotFound) {
        return PermissionDenied("the perf server at " + address +
                                " closed the connection at the hello: it expects another token (the one it "
                                "printed), or none (started with --token none)");
      }
      if (!answer.ok()) return answer.status();
      if (answer->rfind("ERROR ", 0) == 0) {
        return PermissionDenied("the perf server at " + address +
                                " refused the hello (was it started with --token none?): " +
                                Tamed(answer->substr(6, 200)));
      }
      if (!SameSecret(*answer, ServerHello(token))) {
        return PermissionDenied("the perf server at " + address +
                                " did not answer the hello with the token's other half: it does not know the "
                                "token, refused");
      }
      return channel;
    }
    last_error = std::strerror(errno);
    if (Clock::now() >= deadline) {
      if (ai != nullptr) freeaddrinfo(ai);
      return Unavailable("cannot reach the perf server at " + address + " within " + std::to_string(timeout_ms) +
                         " ms: " + last_error + " (start `uroce perf --role server` first)");
    }
    if (idle && !idle()) {
      if (ai != nullptr) freeaddrinfo(ai);
      return Unavailable("interrupted while connecting to " + address);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20, PollSlice(deadline, 20))));
  }
}

SideChannel::SideChannel(SideChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      unlink_path_(std::move(other.unlink_path_)),
      buffer_(std::move(other.buffer_)),
      eof_(other.eof_),
      too_long_(other.too_long_),
      refused_(other.refused_) {
  other.unlink_path_.clear();
}

SideChannel& SideChannel::operator=(SideChannel&& other) noexcept {
  if (this != &other) {
    // Release, not ~SideChannel(): assigning to members whose lifetime a
    // destructor call ended is undefined, and a std::string freed that way
    // is freed again later (heap corruption when Accept erases a refused
    // client from the middle of its waiting list).
    Release();
    fd_ = std::exchange(other.fd_, -1);
    unlink_path_ = std::move(other.unlink_path_);
    other.unlink_path_.clear();
    buffer_ = std::move(other.buffer_);
    eof_ = other.eof_;
    too_long_ = other.too_long_;
    refused_ = other.refused_;
  }
  return *this;
}

SideChannel::~SideChannel() { Release(); }

void SideChannel::Release() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!unlink_path_.empty()) unlink(unlink_path_.c_str());
  unlink_path_.clear();
}

std::string SideChannel::LocalAddress() const {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return FormatAddress(ss, len);
}

StatusOr<SideChannel> SideChannel::Accept(unsigned timeout_ms, const std::function<bool()>& idle,
                                          const std::string& token) {
  if (!token.empty() && token.size() != 2 * kTokenBytes) return InvalidArgument("a perf token of the wrong length");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // Clients connected but not through the hello yet. They wait side by
  // side, each until its own deadline, so a client that connects and says
  // nothing does not hold up the right one behind it.
  struct Waiting {
    SideChannel channel;
    std::string peer;
    Clock::time_point until;
  };
  std::vector<Waiting> waiting;
  auto refuse = [this](const std::string& why) {
    ++refused_;
    std::fprintf(stderr, "uroce perf: %s (%u refused so far)\n", why.c_str(), refused_);
  };
  for (;;) {
    // The connections queued now, a bounded number per round, so that a
    // stream of them cannot keep this loop from its deadline.
    for (size_t round = 0; round <= kMaxPendingHellos; ++round) {
      sockaddr_storage from{};
      socklen_t from_length = sizeof(from);
      const int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&from), &from_length, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Errno("accept");
        break;
      }
      if (from.ss_family == AF_UNIX) {
        // A client of another user (root may reach any socket) is turned
        // away and the wait goes on: the first comer cannot take the run.
        if (Status peer = CheckSameUser(fd, LocalAddress(), "client"); !peer.ok()) {
          close(fd);
          refuse(peer.message());
          continue;
        }
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on UNIX sockets
      if (token.empty()) return SideChannel(fd);
      if (waiting.size() >= kMaxPendingHellos) {
        refuse("closed the client at " + waiting.front().peer + " before its hello, to make room");
        waiting.erase(waiting.begin());
      }
      std::string peer = from.ss_family == AF_UNIX ? "a process of this user" : FormatAddress(from, from_length);
      waiting.push_back({SideChannel(fd), std::move(peer),
                         std::min(deadline, Clock::now() + std::chrono::milliseconds(kHelloTimeoutMs))});
    }
    for (size_t i = 0; i < waiting.size();) {
      Waiting& w = waiting[i];
      std::string line;
      Status error;
      std::string why;
      if (w.channel.TryReceive(&line, &error)) {
        if (SameSecret(line, ClientHello(token))) {
          Status answered = w.channel.Send(ServerHello(token), kHelloTimeoutMs);
          if (answered.ok()) return std::move(w.channel);
          why = "cannot answer its hello: " + answered.message();
        } else {
          // What it sent stays out of the log: it may be a real token with
          // a typo, or terminal escapes.
          const bool hello = line.rfind(kHello, 0) == 0;
          why = hello ? "a wrong token" : "no hello";
          // A client without a token (a RUN first) learns why it is turned
          // away; one with a wrong token only sees the connection close.
          // One try (timeout 0): a short line into an empty socket buffer.
          if (!hello) {
            (void)w.channel.Send("ERROR this perf server expects a hello with its token first (--token or "
                                 "UROCE_PERF_TOKEN)",
                                 0);
          }
        }
      } else if (!error.ok()) {
        why = "no hello (" + error.message() + ")";
      } else if (Clock::now() >= w.until) {
        why = "no hello within " + std::to_string(kHelloTimeoutMs) + " ms";
      } else {
        ++i;
        continue;
      }
      refuse("refused the client at " + w.peer + ": " + why);
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (Clock::now() >= deadline) {
      return Unavailable("no perf client within " + std::to_string(timeout_ms) + " ms" +
                         (refused_ == 0 ? std::string()
                                        : " (" + std::to_string(refused_) +
                                              " refused: of another user, or with a wrong or no hello)"));
    }
    if (idle && !idle()) return Unavailable("interrupted while waiting for a client");
    if (!idle) {
      std::vector<pollfd> fds = {{fd_, POLLIN, 0}};
      for (const Waiting& w : waiting) fds.push_back({w.channel.fd_, POLLIN, 0});
      poll(fds.data(), fds.size(), PollSlice(deadline, 100));
    }
  }
}

Status SideChannel::Send(const std::string& line, unsigned timeout_ms) {
  // The peer refuses lines over kMaxLineBytes; refusing them here names the
  // real culprit.
  if (line.size() > kMaxLineBytes) {
    return InvalidArgument("a control line of " + std::to_string(line.size()) + " bytes is over the limit of " +
                           std::to_string(kMaxLineBytes));
  }
  if (line.find('\n') != std::string::npos) return InvalidArgument("a control line with a newline in it");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      // A peer that does not read fills the socket buffer: wait for room,
      // but not past the deadline.
      if (Clock::now() >= deadline) {
        return Unavailable("the perf peer did not take a control line within " + std::to_string(timeout_ms) + " ms");
      }
      pollfd p = {fd_, POLLOUT, 0};
      poll(&p, 1, PollSlice(deadline, 100));
    } else {
      return Errno("sending to the perf peer");
    }
  }
  return Status::Ok();
}

bool SideChannel::TakeLine(std::string* line, Status* error) {
  const size_t nl = buffer_.find('\n');
  if (nl == std::string::npos ? buffer_.size() > kMaxLineBytes : nl > kMaxLineBytes) {
    // A line this long is no message of ours; stop reading rather than
    // buffer whatever the peer sends.
    too_long_ = true;
    buffer_.clear();
    buffer_.shrink_to_fit();
  }
  if (too_long_) {
    *error = InvalidArgument("the perf peer sent a control line longer than " + std::to_string(kMaxLineBytes) +
                             " bytes");
    return false;
  }
  if (nl == std::string::npos) return false;
  *line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  return true;
}

bool SideChannel::TryReceive(std::string* line, Status* error) {
  if (TakeLine(line, error)) return true;
  if (!error->ok()) return false;
  if (eof_) {
    *error = NotFound("the perf peer closed the control connection");
    return false;
  }
  char buf[4096];
  const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
  if (n > 0) {
    buffer_.append(buf, static_cast<size_t>(n));
    return TakeLine(line, error);
  }
  if (n == 0) {
    eof_ = true;
    *error = NotFound("the perf peer closed the control connection");
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    *error = Errno("reading from the perf peer");
  }
  return false;
}

StatusOr<std::string> SideChannel::Receive(unsigned timeout_ms, const std::function<bool()>& idle) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string line;
  for (;;) {
    Status error;
    if (TryReceive(&line, &error)) return line;
    if (!error.ok()) return error;
    if (Clock::now() >= deadline) {
      return Unavailable("the perf peer did not answer within " + std::to_string(timeout_ms) + " ms");
    }
    if (idle && !idle()) return Unavailable("interrupted");
    if (!idle) {
      pollfd p = {fd_, POLLIN, 0};
      poll(&p, 1, PollSlice(deadline, 100));
    }
  }
}

}  // namespace uroce::tools
