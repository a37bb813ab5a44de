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
//   process -> daemon   PEER qpn=Q dest=IP dest_qpn=D   (no reply)
//                       UNPEER qpn=Q                     (no reply)
//   daemon  -> process  PEER_GONE Q:D[ Q:D ...]          (a notification)
//   daemon  -> process  LINK U S pid=P uid=N + one file (SCM_RIGHTS) (a notification)
//                       UNLINK U S                        (a notification)
//   process -> daemon   UNLINK U S                        (no reply)
//
// Connections between processes on the host (isolation): when a
// process connects an RC or UC QP Q of its own lease to QP D at one of the
// host's addresses, it tells the daemon (PEER); when it destroys or resets Q,
// UNPEER. When the process that holds D's slot ends (exit, kill -9: its
// session closes), the daemon tells every other process with such a record
// PEER_GONE Q:D, and that process moves Q to the error state (its work
// completes as flushed) instead of waiting for retry exhaustion, or for
// ever. PEER and UNPEER get no reply: a reply could be taken for the answer
// to a request of another thread (LISTEN); the daemon logs and ignores a bad
// one. PEER_GONE is the only message the daemon sends unasked: a reader
// waiting for a reply queues it (IsNotification) and reads on.
//
// Local links (host/local_links.h): when the switch of uplink U has moved
// frames between two processes, the daemon makes a shared-memory file for
// the two and sends each LINK U S (S: the other's slot) with the file; their
// engines then exchange frames through it, past the switch. When either
// process ends, the daemon marks the file closed and tells the other UNLINK
// U S. A process that gets no LINK (its socket was full, or the daemon has
// made as many links as it makes, overall or for one process) keeps going
// through the switch. A process that cannot map a LINK's file, or takes no
// links (UROCE_LOCAL_LINKS=no), sends UNLINK U S back: the daemon marks the
// file closed and tells the other side UNLINK, so that nobody sends into a
// ring nobody reads. LINK names the other process as the kernel told the
// daemon (SO_PEERCRED, unix(7)): its pid, in the daemon's pid namespace,
// and uid. A process reads the other's memory for large messages only with
// these (transport/peer_memory.h), never with anything the other said.
//
// The daemon routes connection management MADs (QP 1) between the
// processes: a REQ to the process that listens on its port (the rdma_cm IP
// service, IBTA A11), every other CM message to the process whose
// communication ID it names as the receiver's: an attached process draws its
// IDs from slot << kDaemonCommIdShift.
//
// The configuration the daemon hands out is an ordinary uroce configuration
// (runtime/config.h): per uplink, a shared-memory port to the daemon (`port =
// shm:daemon:K`, host/shm_channel.h; the files travel with the OK reply as
// SCM_RIGHTS ancillary data, K-th for K), the uplink's addresses and MAC,
// loopback off and the leased QPN range. So an attached process
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

namespace uroce::host {

constexpr size_t kMaxControlMessage = 16384;
constexpr uint32_t kDaemonCommIdShift = 24;
constexpr uint32_t kDaemonQpnShift = 16;  // a slot's QPNs: slot << 16 .. + 0xFFFF
constexpr uint32_t kMaxQpn = 0xFFFFFF;    // QPNs are 24 bits (IBTA 9.2, BTH DestQP)

// PEER / UNPEER: a process's connection to a QP on the host.
struct PeerRecord {
  uint32_t qpn = 0;       // the process's own QP
  transport::Gid dest{};  // the peer's address (one of the host's)
  uint32_t dest_qpn = 0;  // the peer's QP
};
std::string FormatPeer(const PeerRecord& record);
StatusOr<PeerRecord> ParsePeer(std::string_view message);
std::string FormatUnpeer(uint32_t qpn);
StatusOr<uint32_t> ParseUnpeer(std::string_view message);

// PEER_GONE: QP `qpn` of the receiver was connected to `dest_qpn`, whose
// process ended.
struct PeerGone {
  uint32_t qpn = 0;
  uint32_t dest_qpn = 0;
  bool operator==(const PeerGone& o) const { return qpn == o.qpn && dest_qpn == o.dest_qpn; }
};
constexpr size_t kMaxPeersGonePerMessage = 512;  // 512 * 18 bytes, well under kMaxControlMessage
// As many messages as it takes (kMaxPeersGonePerMessage each); none for none.
std::vector<std::string> FormatPeersGone(const std::vector<PeerGone>& gone);
StatusOr<std::vector<PeerGone>> ParsePeersGone(std::string_view message);
// LINK / UNLINK: a local link on uplink `uplink` to the process of `slot`.
struct LinkChange {
  uint32_t uplink = 0;
  uint32_t slot = 0;
  bool add = true;  // LINK (a file comes with it), else UNLINK
  // LINK: the process of `slot`, in the kernel's word to the daemon; pid 0
  // (and no pid= uid= in the message) when the daemon does not say.
  int64_t pid = 0;
  uint32_t uid = 0;
  bool operator==(const LinkChange& o) const {
    return uplink == o.uplink && slot == o.slot && add == o.add && pid == o.pid && uid == o.uid;
  }
};
std::string FormatLinkChange(const LinkChange& change);
StatusOr<LinkChange> ParseLinkChange(std::string_view message);
bool IsLinkChange(std::string_view message);
// True for a message the daemon sends unasked (PEER_GONE, LINK, UNLINK),
// never a reply.
bool IsNotification(std::string_view message);

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

// What the daemon tells a process about the devices it attaches to: one
// per uplink, in order (device uroceK, `port = shm:daemon:K`, the K-th file
// of the reply's SCM_RIGHTS).
struct GrantEndpoint {
  std::string name;  // the uplink's [endpoint.NAME]
  transport::MacAddress mac{};
  std::vector<transport::Gid> gids;  // the uplink's, GID table order
  uint32_t mtu = 1500;
};
constexpr size_t kMaxUplinks = 8;
struct AttachGrant {
  uint32_t slot = 0;  // QPNs slot<<16 .. (slot<<16)+0xFFFF, on every device
  std::vector<GrantEndpoint> endpoints;
};

// "OK slot=S\n" and the process's configuration (FormatGrantConfig).
std::string FormatAttachReply(const AttachGrant& grant);
// The configuration the daemon hands a process: EAL without hugepages,
// inline progress, and per uplink K `port = shm:daemon:K`, its addresses,
// MAC and MTU, loopback off, the slot's QPN range, the host's addresses as
// neighbours at the uplink's MAC.
std::string FormatGrantConfig(const AttachGrant& grant);
// The grant in a configuration text the daemon sent for `slot`, accepted
// only when it is exactly what FormatGrantConfig writes for it: whoever
// answers on the daemon's socket could otherwise choose any port (a vdev
// that writes files), EAL arguments (-d loads a shared object) or
// impairments for the program. kInvalidArgument names the first line that
// differs. To give processes something new, the daemon must write it and
// this parser learn it together.
StatusOr<AttachGrant> ParseAttachGrant(std::string_view config_text, uint32_t slot);

// A network interface name as the kernel allows one (netdevice(7): at most
// IFNAMSIZ - 1 bytes; no '/', ':' or white space; not "." or ".."), so that
// it is safe as one component of a path.
bool ValidInterfaceName(std::string_view name);

// The DEVICES answer: "device uroceK netdev=NAME|- gids=HEX32[,HEX32...]",
// one line per uplink in order. Names are checked (ValidInterfaceName), at
// most kMaxUplinks devices and kMaxGrantGids addresses each.
constexpr size_t kMaxGrantGids = 16;
struct DeviceLine {
  unsigned index = 0;
  std::string netdev;  // empty for "-" (no kernel interface)
  std::vector<transport::Gid> gids;
};
StatusOr<std::vector<DeviceLine>> ParseDevicesReply(std::string_view text);
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

}  // namespace uroce::host
