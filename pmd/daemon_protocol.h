// The control protocol between `uroce daemon` and the processes that attach
// to it, over a UNIX SOCK_SEQPACKET socket (one message per datagram, and the
// kernel tells the daemon when a process is gone, however it died).
//
//   process -> daemon   ATTACH pid=PID program=NAME
//   daemon  -> process  OK slot=S\n<the process's configuration, INI>
//                       ERROR <why>
//   process -> daemon   STATS
//   daemon  -> process  OK\n<one line per attached process, then the switch>
//   process -> daemon   LISTEN PORT | UNLISTEN PORT   (an attached process)
//   daemon  -> process  OK | ERROR <why>
//
// The daemon routes connection management MADs (QP 1) between the
// processes: a REQ to the process that listens on its port (the rdma_cm IP
// service, IBTA A11), every other CM message to the process whose
// communication ID it names as the receiver's: an attached process draws its
// IDs from slot << kDaemonCommIdShift.
//
// The configuration the daemon hands out is an ordinary uroce configuration
// (pmd/config.h): a memif client port to the daemon, the uplink's addresses
// and MAC, loopback off and the leased QPN range. So an attached process
// runs exactly the runtime a process-private one does.
//
// Messages from either side are bounded (kMaxControlMessage) and parsed
// strictly: a malformed one is an error, never trusted.
//
// Thread-safety: plain functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/headers.h"

namespace uroce::pmd {

constexpr size_t kMaxControlMessage = 16384;
constexpr uint32_t kDaemonCommIdShift = 24;

// LISTEN/UNLISTEN PORT.
struct PortClaim {
  uint16_t port = 0;
  bool listen = true;
};
std::string FormatPortClaim(const PortClaim& claim);
StatusOr<PortClaim> ParsePortClaim(std::string_view message);

struct AttachRequest {
  int64_t pid = 0;
  std::string program;  // letters, digits and ._- only, at most 64
};

std::string FormatAttachRequest(const AttachRequest& request);
// kInvalidArgument with the reason for anything but a well-formed ATTACH.
StatusOr<AttachRequest> ParseAttachRequest(std::string_view message);

// What the daemon tells a process about the device it attaches to.
struct AttachGrant {
  uint32_t slot = 0;  // QPNs slot<<16 .. (slot<<16)+0xFFFF
  std::string endpoint_name;
  std::string memif_socket;  // the process is this memif socket's client
  // memif's connection secret (at most 24 characters): memif sockets are
  // abstract (anyone in the network namespace may connect), the secret
  // travels only over the control socket (mode 0660), so only the process
  // it was handed to can take the slot's port.
  std::string memif_secret;
  transport::MacAddress mac{};
  std::vector<transport::Gid> gids;  // the uplink's, GID table order
  uint32_t mtu = 1500;
};

// "OK slot=S\n" and the process's configuration.
std::string FormatAttachReply(const AttachGrant& grant);
// The slot and the configuration text of an OK reply; an ERROR reply is
// kFailedPrecondition with the daemon's reason; anything else kInvalidArgument.
struct AttachReply {
  uint32_t slot = 0;
  std::string config_text;
};
StatusOr<AttachReply> ParseAttachReply(std::string_view message);

// A program name as a process reports it, made safe to log and to put in a
// message (other bytes become '_', at most 64).
std::string TameProgramName(std::string_view name);

}  // namespace uroce::pmd
