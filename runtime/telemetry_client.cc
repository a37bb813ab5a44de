#include "runtime/telemetry_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace uroce::runtime {

std::string TelemetrySocketPath(const std::string& file_prefix) {
  // EAL's eal_get_runtime_dir rule (DPDK lib/eal/linux/eal.c).
  std::string base = "/var/run";
  if (getuid() != 0) {
    // secure_getenv(3): not the caller's choice of socket in a set-user-ID
    // program.
    const char* xdg = secure_getenv("XDG_RUNTIME_DIR");
    base = xdg != nullptr ? xdg : "/tmp";
  }
  return base + "/dpdk/" + file_prefix + "/dpdk_telemetry.v2";
}

StatusOr<TelemetryClient> TelemetryClient::Connect(const std::string& socket_path) {
  sockaddr_un addr = {};
  if (socket_path.size() >= sizeof(addr.sun_path)) return InvalidArgument("socket path too long: " + socket_path);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return Unavailable("cannot connect to " + socket_path + ": " + std::strerror(err) +
                       " (is a uroce process with this file prefix running, with telemetry on?)");
  }
  TelemetryClient client(fd);
  auto greeting = client.Receive();
  if (!greeting.ok()) return greeting.status();
  client.greeting_ = *greeting;
  return client;
}

TelemetryClient::TelemetryClient(TelemetryClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), greeting_(std::move(other.greeting_)) {}

TelemetryClient& TelemetryClient::operator=(TelemetryClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    greeting_ = std::move(other.greeting_);
  }
  return *this;
}

TelemetryClient::~TelemetryClient() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::string> TelemetryClient::Receive() {
  pollfd p = {fd_, POLLIN, 0};
  if (poll(&p, 1, 5000) <= 0) return Unavailable("no answer from the telemetry socket within 5 s");
  std::vector<char> buf(1 << 17);  // above telemetry's largest message
  const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
  if (n <= 0) return IoError("the telemetry socket closed");
  return std::string(buf.data(), static_cast<size_t>(n));
}

StatusOr<std::string> TelemetryClient::Query(const std::string& command) {
  if (send(fd_, command.data(), command.size(), 0) != static_cast<ssize_t>(command.size())) {
    return IoError(std::string("send to the telemetry socket: ") + std::strerror(errno));
  }
  return Receive();
}

}  // namespace uroce::runtime
