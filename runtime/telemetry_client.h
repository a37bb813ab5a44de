// A client for DPDK's telemetry socket (the protocol dpdk-telemetry.py
// speaks: a SOCK_SEQPACKET UNIX socket, one JSON message per command, the
// first one describing the process). `uroce stats` and the tests use it.
#pragma once

#include <string>

#include "common/status.h"

namespace uroce::runtime {

// Where EAL puts the socket of the process with `file_prefix`: its runtime
// directory (/var/run/dpdk/<prefix> as root; $XDG_RUNTIME_DIR/dpdk/<prefix>
// or /tmp/dpdk/<prefix> otherwise) plus dpdk_telemetry.v2.
std::string TelemetrySocketPath(const std::string& file_prefix);

class TelemetryClient {
 public:
  static StatusOr<TelemetryClient> Connect(const std::string& socket_path);
  TelemetryClient(TelemetryClient&& other) noexcept;
  TelemetryClient& operator=(TelemetryClient&& other) noexcept;
  TelemetryClient(const TelemetryClient&) = delete;
  TelemetryClient& operator=(const TelemetryClient&) = delete;
  ~TelemetryClient();

  // The greeting the process sent on connect ({"version": ..., "pid": ...}).
  const std::string& greeting() const { return greeting_; }
  // Sends "command[,params]" and returns the JSON answer, e.g.
  // {"/uroce/ports": ["a", "b"]}.
  StatusOr<std::string> Query(const std::string& command);

 private:
  explicit TelemetryClient(int fd) : fd_(fd) {}
  StatusOr<std::string> Receive();
  int fd_ = -1;
  std::string greeting_;
};

}  // namespace uroce::runtime
