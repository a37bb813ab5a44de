// Connection management over the fabric itself, as RoCE does it: IB CM MADs
// (IBTA vol. 1 ch. 12: REQ, REP, RTU, REJ, DREQ, DREP, MRA) sent as UD
// datagrams to QP1 (the GSI QP, Q_Key 0x80010000, IBTA 13.5.1), addressed by
// IP as the "RDMA IP CM Service" does (IBTA Annex A11): the service ID of a
// listener is 0x0000000001060000 | port (RDMA_PS_TCP), and the first 36 bytes
// of a REQ's private data are the IP CM header (version, IP version, source
// port, source and destination IP), so a REQ carries 56 bytes of the user's
// data. This is the exchange the Linux kernel's rdma_cm makes over rxe
// (testdata/captures/rping_rdma_cm.pcap).
//
// One ConnectionManager per engine (port), speaking for every GID of the
// engine's table (IPv4-mapped and IPv6 alike). It owns QP 1 on that engine (a UD
// QP with its own CQ and registered MAD buffers) and drives the QPs it is
// given through INIT -> RTR -> RTS (active side: on REP; passive side: at
// Accept) and to ERR at disconnect, so its users never modify a connected
// QP's state themselves.
//
// Reliability: every MAD that expects an answer (REQ -> REP/REJ, REP -> RTU,
// DREQ -> DREP) is resent after response_timeout_ns (REQ and REP: each
// wait twice the last, up to max_response_timeout_ns), up to max_retries times
// (the REQ's "Max CM Retries"); duplicates are answered again (a duplicate
// REQ repeats the REP, a duplicate REP repeats the RTU, a duplicate DREQ
// repeats the DREP) so that any single lost MAD is survived. An active
// connect that gets no answer ends in kUnreachable; a REQ for a port nobody
// listens on is answered with REJ "invalid service ID" (reason 8).
//
// Hostile peers (the peer is never trusted, docs/architecture.md,
// "Untrusted input"): every table a peer can grow is bounded and aged. A listener
// holds at most `backlog` requests nobody has accepted or rejected yet; one
// more is answered with REJ "no resources" (IBTA 12.6.7 table 112, reason 3)
// and leaves no state. A request nobody answers expires after the time the
// caller itself waits for it (its REQ's Remote CM Response Timeout times
// Max CM Retries + 1, IBTA 12.6.5), at most Options::max_request_lifetime_ns:
// it is withdrawn with REJ "timeout" (reason 4) and forgotten (a later
// Accept/Reject is NotFound; no event follows, and its kConnectRequest event,
// if not taken yet, is removed). Nothing on the receive path resolves an
// address (ARP/ND): answers go to the Ethernet source of the MAD they answer,
// and a connection keeps the MAC of its peer (the REQ's source; on the active
// side the one Connect resolved, outside the CM's lock). The address handles
// for those MACs are a bounded cache (Options::max_address_handles, least
// recently used evicted, idle ones aged out). An MRA (IBTA 12.6.6) counts only
// from the connection's peer and extends a wait by at most
// Options::max_mra_extension_ns in all.
//
// Threads: every method may be called from any thread; they serialize on one
// internal mutex (control path: this allocates and locks, never on the data
// path). Poll() must be called regularly (every ~1 ms) by one thread of the
// user's choice; it receives MADs, resends what is due and queues events.
// The engine itself must be polled as usual (engine lcore or inline
// progress) for MADs to move.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cm/cm_mad.h"
#include "common/status.h"
#include "transport/engine.h"
#include "transport/headers.h"

namespace uroce::cm {

// IBTA Annex A11: the RDMA IP CM service ID of TCP-like port `port`.
// The service timeout of the MRA a passive side sends for a request its user
// has not answered (4.096 us * 2^24, 69 s: the kernel's rdma_cm asks for the
// same, CMA_CM_MRA_SETTING). A uroce caller honours at most
// Options::max_mra_extension_ns of it.
inline constexpr uint8_t kMraServiceTimeout = 24;


// Private data sizes (IBTA 12.6.5 / 12.6.8 / 12.6.7 / 12.6.10 / 12.6.11): what
// is left for the user of each message.
inline constexpr size_t kCmReqUserDataSize = 92 - 36;  // after the IP CM header
inline constexpr size_t kCmRepPrivateDataSize = 196;
inline constexpr size_t kCmRejPrivateDataSize = 148;
inline constexpr size_t kCmRtuPrivateDataSize = 224;
inline constexpr size_t kCmDreqPrivateDataSize = 220;

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000u;

// An IP endpoint: the address as a GID (IPv4-mapped or IPv6) and a port.
struct CmAddress {
  transport::Gid gid{};
  uint16_t port = 0;
};

// Connection parameters both sides share. The CM takes the minimum of what
// the two sides offer for the MTU and the read/atomic depths.
struct CmQpParams {
  transport::QueuePair* qp = nullptr;   // RC, in RESET or INIT (the CM moves it on from there)
  int access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t responder_resources = 16;  // RDMA READ/atomic requests we accept at once
  uint8_t initiator_depth = 16;      // RDMA READ/atomic requests we issue at once
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t local_ack_timeout = 14;    // 4.096 us * 2^14 = 67 ms
  uint8_t min_rnr_timer = 12;        // 0.64 ms
  ibv_mtu max_mtu = IBV_MTU_4096;    // also capped by the port's MTU
};

// The local ACK timeout that uroce's connection libraries (librdmacm, the
// libfabric provider) give a QP the application sets none for: 4.096 us *
// 2^22 = 17.2 s per try, 137 s in all with retry_count 7 (IBTA 9.7.6.1.3).
// The kernel's rdma_cm gives a RoCE connection 17 (0.54 s, 4.3 s in all),
// sized for a NIC. Here the responder is a process, and a host can leave it
// without CPU for far longer: on a 2-core VM (Linux 6.18, cgroup v1) the
// ranks of one of two podman containers got no CPU for 7 s while the
// other's ran, and the VM's own kernel has reported stalls of the whole
// machine of 31 to 88 s (docs/containers.md). A QP that gives up during
// such a stall loses what it sends after it, and ofi_rxm's fi_inject()s
// have no completion to say so: the job waits for ever. So the budget
// outlasts the longest stall seen. Only the time to give up changes:
// a lost packet is still resent after the measured RTO
// (transport/retransmit_timer.h), and a QP whose peer process on the same
// host ends fails at once (runtime/peer_watch.h). A remote peer that
// vanishes without a word is given up on after 137 s instead of 4.3 s.
inline constexpr uint8_t kLibraryLocalAckTimeout = 22;

// Who decides what (IBTA 12.6.5 / 12.6.8): the path MTU is the REQ's (the
// caller's min(max_mtu, port MTU)); the REP has no MTU field, so Accept
// refuses (REJ reason 26, "invalid path MTU", and an error) a REQ whose MTU is
// above its own min(max_mtu, port MTU). The passive side's retry_count and
// rnr_retry_count come from the REQ (the caller's params); the caller's RNR
// retry count from the REP (the acceptor's rnr_retry_count). local_ack_timeout
// and min_rnr_timer are each side's own.
struct CmConnectParams : CmQpParams {
  CmAddress remote;           // the listener's IP and port
  uint16_t local_port = 0;    // 0: the CM picks an unused one
  // This side's address: a GID of the engine's table of the remote's IP
  // version. Zero: Options::local_gid when its version matches, else the
  // table's first GID of that version.
  transport::Gid local_gid{};
  std::vector<uint8_t> private_data;  // at most kCmReqUserDataSize bytes
  // The peer's MAC when the caller knows it already (resolved it itself).
  // Otherwise Connect takes it from the engine's neighbour table, resolving
  // (ARP/ND, through the engine's resolve_neighbor hook) in the caller's
  // thread without the CM's lock held, so Poll goes on meanwhile.
  bool has_remote_mac = false;
  transport::MacAddress remote_mac{};
};

struct CmAcceptParams : CmQpParams {
  std::vector<uint8_t> private_data;  // at most kCmRepPrivateDataSize bytes
};

using CmConnectionId = uint32_t;  // this side's Local Communication ID

enum class CmEventType {
  // Passive side: a REQ for a listening port. `id` names the request for
  // Accept/Reject; `listen_tag` is the listener's tag; `peer` the caller's
  // IP and source port; `private_data` the caller's user data (always
  // kCmReqUserDataSize bytes: IB CM private data has a fixed size, padded
  // with zeros).
  kConnectRequest,
  // Both sides: the QP is in RTS and may carry data (active: REP received and
  // RTU sent; passive: RTU received, or the first packet arrived on the QP).
  // `private_data`: the REP's on the active side (kCmRepPrivateDataSize
  // bytes), empty on the passive side.
  kEstablished,
  // Active side: the peer answered REJ. `reject_reason` (IBTA table 112; 28 is
  // "consumer reject", 8 "invalid service ID"), `private_data` the REJ's
  // (kCmRejPrivateDataSize bytes). Passive side: the caller sent REJ after
  // our REP, or withdrew a request not yet answered (reason 4, timeout, when
  // it gave up). The QP (if any) is in ERR.
  kRejected,
  // Active side: no answer after every retry. Passive side: the RTU never
  // came. The QP is in ERR.
  kUnreachable,
  // Either side: the peer sent DREQ, or our Disconnect finished (DREP or
  // timeout; at once for a Disconnect before the REP came, which sends REJ).
  // The QP is in ERR (its work flushed by the engine).
  kDisconnected,
};

struct CmEvent {
  CmEventType type = CmEventType::kConnectRequest;
  CmConnectionId id = 0;
  uint64_t tag = 0;         // the tag given to Connect / Accept (0 for a request)
  uint64_t listen_tag = 0;  // kConnectRequest: the listener's tag
  CmAddress local;          // this side's IP and port
  CmAddress peer;           // the other side's IP and port
  uint16_t reject_reason = 0;
  std::vector<uint8_t> private_data;
  // kConnectRequest: what the caller offered (the accepting side's
  // CmAcceptParams are capped by these).
  uint8_t peer_responder_resources = 0;
  uint8_t peer_initiator_depth = 0;
};

struct CmCounters {
  uint64_t mads_sent = 0, mads_received = 0, mads_dropped = 0;  // dropped: malformed/unknown
  uint64_t retransmits = 0, duplicates = 0;
  uint64_t send_failures = 0;  // no address handle for the peer, or QP1's send queue full
  uint64_t backlog_rejects = 0;   // REQs beyond a listener's backlog (REJ "no resources")
  uint64_t requests_expired = 0;  // requests nobody answered in time (REJ "timeout")
  uint64_t mras_ignored = 0;      // MRAs from another source, or beyond the bound
  uint64_t mras_sent = 0;         // MRAs for requests the user had not answered yet
  uint64_t mads_forged = 0;       // REP/REJ/RTU/DREQ/DREP of a known connection from another address or ID
  uint64_t address_handles_evicted = 0;
};

// How much state the CM holds (for tests and telemetry: every one is bounded
// by what this side does, never by what peers send).
struct CmStateSizes {
  size_t connections = 0;       // every connection and request not released
  size_t pending_requests = 0;  // requests not accepted or rejected yet
  size_t events = 0;            // events not taken by NextEvent
  size_t address_handles = 0;   // cached address handles
};

// The backlog a listener gets when its caller names none (rdma_listen with
// backlog <= 0, fi_listen); the most one may have.
inline constexpr unsigned kCmDefaultBacklog = 128;
inline constexpr unsigned kCmMaxBacklog = 4096;

class ConnectionManager {
 public:
  struct Options {
    // The preferred address (a GID of the engine's table; zero: its first).
    // The CM speaks for every GID of the table: a connection uses the GID of
    // its peer's IP version (this one when it is of that version), a request
    // is answered from the GID it was sent to.
    transport::Gid local_gid{};
    uint64_t response_timeout_ns = 50'000'000;  // 50 ms before the first resend
    unsigned max_retries = 15;
    // A REQ (and a REP) is resent ever later: each wait doubles, from
    // response_timeout_ns up to this (4.096 us * 2^20, 4.3 s, the Remote CM
    // Response Timeout the kernel's rdma_cm puts in its REQs). A lost MAD
    // still costs 50 ms, but a peer whose CM does not run for seconds (its
    // process, or the uroce daemon between them, starved of CPU on a busy
    // host) is waited for: 16 tries last 45 s, as against the 0.8 s of a
    // flat 50 ms. The REQ tells the passive side this longest wait, so it
    // keeps the request as long (IBTA 12.6.5). Equal to
    // response_timeout_ns: a flat schedule.
    uint64_t max_response_timeout_ns = uint64_t{4096} << 20;
    unsigned recv_buffers = 64;    // MAD receive buffers posted on QP 1
    // Empty: steady_clock. Tests give the EnginePair's virtual clock.
    std::function<uint64_t()> clock_ns;
    // Communication IDs, PSNs, ports and transaction IDs are drawn from a
    // generator seeded with this; 0: from std::random_device. Tests set it so
    // that runs replay.
    uint64_t random_seed = 0;
    // The longest an unanswered request is kept (its caller's own patience,
    // from its REQ, when that is shorter; see above). The Linux kernel's
    // rdma_cm waits 2^20 * 4.096 us * 16 tries, about 69 s.
    uint64_t max_request_lifetime_ns = 70'000'000'000;
    // Address handles cached for MAD answers; an unused one is destroyed
    // after address_handle_idle_ns.
    size_t max_address_handles = 256;
    uint64_t address_handle_idle_ns = 60'000'000'000;
    // MRAs (IBTA 12.6.6) may extend one wait by this much in all, in at most
    // max_mras messages; any beyond are ignored. 70 s: one MRA of the
    // kernel's rdma_cm (and of our own passive side, kMraServiceTimeout:
    // 4.096 us * 2^24, 69 s) is honoured whole, so a server that takes
    // seconds to fi_accept / rdma_accept still gets its caller, as between
    // two kernels; the same bound as a passive side's request lifetime.
    // (8 s before: a server slower than ~9 s lost the connection.)
    uint64_t max_mra_extension_ns = 70'000'000'000;
    unsigned max_mras = 4;
    // Attached to a uroce daemon, which routes CM MADs between the
    // processes that share the host's addresses: our local communication IDs
    // come from comm_id_base | (random & comm_id_mask) (the daemon routes
    // every answer by the receiver's ID), and `listen_hook` claims (true) or
    // releases (false) a port host-wide before Listen takes it or after
    // StopListening drops it (the daemon routes REQs by port). Defaults: any
    // 32-bit ID, no hook.
    uint32_t comm_id_base = 0;
    uint32_t comm_id_mask = 0xFFFFFFFF;
    std::function<Status(uint16_t port, bool listen)> listen_hook;
    // Called (with no lock of the CM held) after Listen, StopListening,
    // Accept, Reject, Connect, Disconnect and PeerGone: a caller that polls
    // the CM seldom while nothing happens (Poll returned false) polls it
    // soon again. Empty: nothing.
    std::function<void()> activity_hook;
  };

  // Creates QP 1 on `engine` (PD `pd`) and posts its receive buffers. One per
  // engine: a second one fails (QP 1 exists).
  static StatusOr<std::unique_ptr<ConnectionManager>> Create(transport::Engine* engine, transport::PdHandle pd,
                                                             const Options& options);
  // Destroys QP 1 (connections still up are not told: Disconnect them first).
  ~ConnectionManager();
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Passive side. kConnectRequest events for `port` carry `tag`. Error
  // (EADDRINUSE) if the port is taken; port 0 picks one (returned). At most
  // `backlog` requests wait for Accept/Reject at once (0: kCmDefaultBacklog;
  // capped at kCmMaxBacklog); more are refused with REJ "no resources".
  StatusOr<uint16_t> Listen(uint16_t port, uint64_t tag, unsigned backlog = kCmDefaultBacklog);
  Status StopListening(uint16_t port);
  Status Accept(CmConnectionId request, const CmAcceptParams& params, uint64_t tag);
  Status Reject(CmConnectionId request, const uint8_t* private_data, size_t length);

  // Active side: sends REQ. The result arrives as kEstablished, kRejected or
  // kUnreachable with `tag`.
  StatusOr<CmConnectionId> Connect(const CmConnectParams& params, uint64_t tag);

  // Either side, once established (or while connecting: gives up): moves the
  // QP to ERR, sends DREQ; kDisconnected follows.
  Status Disconnect(CmConnectionId id);
  // The connection of our QP `qpn` to QP `remote_qpn` lost its peer for good
  // (a uroce daemon saw the peer's process end): as if the peer's side had
  // sent DREQ before it went (the kernel's rdma_cm does so for a process
  // that exits), the QP moves to ERR and kDisconnected follows, with no DREQ
  // to a peer that cannot answer. False if no live connection matches.
  bool PeerGone(uint32_t qpn, uint32_t remote_qpn);
  // Forgets a connection that has ended (after kDisconnected, kRejected or
  // kUnreachable, or a request the user will not answer). Until then the CM
  // keeps answering duplicates for it.
  void Release(CmConnectionId id);

  // One round: receive MADs, resend what is due, queue events. True while
  // something needs polling soon: a MAD came in, events wait for NextEvent,
  // or a connection waits for an answer (its resend timer runs). False: the
  // CM is quiet; only a MAD from a peer (a new REQ, a DREQ) or a call of
  // this side (see Options::activity_hook) changes that, and the lifetimes
  // of unanswered requests and cached address handles are seconds long.
  bool Poll();
  bool NextEvent(CmEvent* event);

  CmCounters counters() const;
  CmStateSizes state_sizes() const;

 private:
  ConnectionManager() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uroce::cm
