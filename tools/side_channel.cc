#include "tools/side_channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace uroce::tools {
namespace {

using Clock = std::chrono::steady_clock;

bool IsPath(const std::string& address) { return address.find('/') != std::string::npos; }

Status Errno(const std::string& what) { return IoError(what + ": " + std::strerror(errno)); }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

StatusOr<addrinfo*> Resolve(const std::string& address, bool passive) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("--control " + address + ": expected PATH or HOST:PORT");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
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

}  // namespace

StatusOr<SideChannel> SideChannel::Listen(const std::string& address) {
  int fd = -1;
  std::string unlink_path;
  if (IsPath(address)) {
    auto addr = UnixAddress(address);
    if (!addr.ok()) return addr.status();
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    unlink(address.c_str());  // a file left by an earlier run
    if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
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
  if (listen(fd, 1) != 0) {
    Status s = Errno("listen " + address);
    close(fd);
    return s;
  }
  SetNonBlocking(fd);
  return SideChannel(fd, unlink_path);
}

StatusOr<SideChannel> SideChannel::Connect(const std::string& address, unsigned timeout_ms,
                                           const std::function<bool()>& idle) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last_error;
  for (;;) {
    int fd = -1;
    int rc = -1;
    if (IsPath(address)) {
      auto addr = UnixAddress(address);
      if (!addr.ok()) return addr.status();
      fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return Errno("socket");
      rc = connect(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr));
    } else {
      auto res = Resolve(address, false);
      if (!res.ok()) return res.status();
      fd = socket((*res)->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        freeaddrinfo(*res);
        return Errno("socket");
      }
      rc = connect(fd, (*res)->ai_addr, (*res)->ai_addrlen);
      freeaddrinfo(*res);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (rc == 0) {
      SetNonBlocking(fd);
      return SideChannel(fd);
    }
    last_error = std::strerror(errno);
    close(fd);
    if (Clock::now() >= deadline) {
      return Unavailable("cannot reach the perf server at " + address + " within " + std::to_string(timeout_ms) +
                         " ms: " + last_error + " (start `uroce perf --role server` first)");
    }
    if (idle && !idle()) return Unavailable("interrupted while connecting to " + address);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

SideChannel::SideChannel(SideChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      unlink_path_(std::move(other.unlink_path_)),
      buffer_(std::move(other.buffer_)),
      eof_(other.eof_) {
  other.unlink_path_.clear();
}

SideChannel& SideChannel::operator=(SideChannel&& other) noexcept {
  if (this != &other) {
    this->~SideChannel();
    fd_ = std::exchange(other.fd_, -1);
    unlink_path_ = std::move(other.unlink_path_);
    other.unlink_path_.clear();
    buffer_ = std::move(other.buffer_);
    eof_ = other.eof_;
  }
  return *this;
}

SideChannel::~SideChannel() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!unlink_path_.empty()) unlink(unlink_path_.c_str());
  unlink_path_.clear();
}

StatusOr<SideChannel> SideChannel::Accept(unsigned timeout_ms, const std::function<bool()>& idle) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on UNIX sockets
      return SideChannel(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Errno("accept");
    if (timeout_ms != 0 && Clock::now() >= deadline) {
      return Unavailable("no perf client within " + std::to_string(timeout_ms) + " ms");
    }
    if (idle && !idle()) return Unavailable("interrupted while waiting for a client");
  }
}

Status SideChannel::Send(const std::string& line) {
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p = {fd_, POLLOUT, 0};
      poll(&p, 1, 100);
    } else {
      return Errno("sending to the perf peer");
    }
  }
  return Status::Ok();
}

bool SideChannel::TakeLine(std::string* line) {
  const size_t nl = buffer_.find('\n');
  if (nl == std::string::npos) return false;
  *line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  return true;
}

bool SideChannel::TryReceive(std::string* line, Status* error) {
  if (TakeLine(line)) return true;
  if (eof_) {
    *error = NotFound("the perf peer closed the control connection");
    return false;
  }
  char buf[4096];
  const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
  if (n > 0) {
    buffer_.append(buf, static_cast<size_t>(n));
    return TakeLine(line);
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
    if (timeout_ms != 0 && Clock::now() >= deadline) {
      return Unavailable("the perf peer did not answer within " + std::to_string(timeout_ms) + " ms");
    }
    if (idle && !idle()) return Unavailable("interrupted");
  }
}

}  // namespace uroce::tools
