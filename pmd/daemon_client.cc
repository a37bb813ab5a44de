#include "pmd/daemon_client.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "pmd/config.h"

namespace uroce::pmd {
namespace {

std::string ProgramName() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "unknown" : TameProgramName(name);
}

}  // namespace

std::string DaemonSocketPath() {
  const char* env = secure_getenv("UROCE_DAEMON");
  return env != nullptr && *env != '\0' ? env : DaemonConfig{}.socket;
}

StatusOr<std::unique_ptr<DaemonSession>> DaemonSession::Attach(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("daemon socket path '" + socket_path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  std::unique_ptr<DaemonSession> session(new DaemonSession());
  session->socket_path_ = socket_path;
  session->fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (session->fd_ < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  if (connect(session->fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    if (e == ENOENT || e == ECONNREFUSED) {
      return NotFound("no uroce daemon at " + socket_path +
                      " (start one: `uroce daemon --config FILE`; or give this program a configuration of its own: "
                      "`uroce exec --config FILE -- PROGRAM`)");
    }
    return IoError("cannot reach uroce daemon at " + socket_path + ": " + std::strerror(e));
  }
  // The daemon answers at once (it only starts a port): bound the wait.
  timeval limit{10, 0};
  setsockopt(session->fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(session->fd_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  AttachRequest request;
  request.pid = getpid();
  request.program = ProgramName();
  const std::string message = FormatAttachRequest(request);
  if (send(session->fd_, message.data(), message.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(message.size())) {
    return IoError("uroce daemon at " + socket_path + ": cannot send: " + std::strerror(errno));
  }
  std::vector<char> reply(kMaxControlMessage + 1);
  const ssize_t n = recv(session->fd_, reply.data(), reply.size(), 0);
  if (n <= 0) {
    return IoError("uroce daemon at " + socket_path + " did not answer" +
                   (n < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (it closed the session)")));
  }
  auto parsed = ParseAttachReply(std::string_view(reply.data(), static_cast<size_t>(n)));
  if (!parsed.ok()) {
    return Status(parsed.status().code(), "uroce daemon at " + socket_path + ": " + parsed.status().message());
  }
  session->slot_ = parsed->slot;
  session->config_text_ = std::move(parsed->config_text);
  return session;
}

DaemonSession::~DaemonSession() {
  if (fd_ >= 0) close(fd_);
}

bool DaemonSession::DaemonGone() {
  if (gone_) return true;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  // 0: the daemon closed its end (orderly stop or death); an error other
  // than "nothing to read" means the same.
  gone_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  return gone_;
}

}  // namespace uroce::pmd
