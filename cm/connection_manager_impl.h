// ConnectionManager's private state (cm/connection_manager.h), shared by
// the files it is made of, one per concern:
// - cm/mad_io.cc: QP1, the GSI QP (IBTA 13.4.8): receive slots, address
//   handles, sending MADs and draining their completions;
// - cm/qp_transitions.cc: the caller's QP moved through INIT, RTR/RTS and ERR
//   as the protocol decides;
// - cm/protocol.cc: the IB CM protocol (IBTA 12.6, 12.9): the messages, the
//   connection states (cm/cm_state.h) and the timers;
// - cm/connection_manager.cc: the public calls.
// The public calls take Impl::mutex before they touch any of it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/cm_state.h"
#include "cm/connection_manager.h"
#include "common/check.h"

namespace uroce::cm {

using transport::CompletionQueue;
using transport::Engine;
using transport::Gid;
using transport::Ipv4MappedGid;
using transport::IsIpv4MappedGid;
using transport::MacAddress;
using transport::MrKeys;
using transport::MtuBytes;
using transport::PdHandle;
using transport::QpInitAttr;
using transport::QpLimits;
using transport::QueuePair;

constexpr size_t kRecvSlotBytes = transport::kGrhBytes + kMadBytes;
constexpr uint32_t kSendQueueDepth = 256;
// IBTA 12.6.7 table 112: reason 3, "No resources available" (also what a
// listener whose backlog is full answers).
constexpr uint16_t kRejNoResources = 3;
constexpr uint16_t kRejUnsupported = 5;
constexpr uint16_t kRejInvalidTransport = 9;
// Our ACK delay as the REP's Target ACK Delay (rxe announces 15 too).
constexpr uint8_t kTargetAckDelay = 15;

using State = CmState;

struct ConnectionManager::Impl {
  struct Connection {
    CmConnectionId local_id = 0;
    uint32_t remote_id = 0;
    bool active = false;
    State state = State::kClosed;
    uint64_t tag = 0, listen_tag = 0;
    CmAddress local, peer;
    // The caller's QP: never dereferenced after Connect/Accept (the caller
    // may destroy it at any time); the engine checks it is still the QP of
    // `qpn` whenever the CM moves it.
    QueuePair* qp = nullptr;
    uint32_t qpn = 0;
    CmQpParams params;
    uint64_t transaction_id = 0;
    uint32_t remote_qpn = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    CmReq req;  // active: the REQ sent; passive: the REQ received
    // The MAD that waits for an answer, resent until then.
    std::array<uint8_t, kMadBytes> outstanding{};
    bool waiting = false;
    uint64_t deadline_ns = 0;
    unsigned retries_left = 0;
    uint64_t resend_ns = 0;  // until the next resend of `outstanding`
    uint64_t max_resend_ns = 0;  // resend_ns doubles after each resend up to this
    // The last answer, repeated when the peer's message comes again.
    std::array<uint8_t, kMadBytes> answer{};
    bool have_answer = false;
    // Where MADs to the peer go: the REQ's Ethernet source (passive), the
    // MAC Connect resolved (active). Never looked up on the receive path.
    MacAddress peer_mac{};
    // Passive: counted in its listener's backlog while kReqReceived, and
    // forgotten at expires_ns if still unanswered.
    bool in_backlog = false;
    bool mra_sent = false;  // passive: an MRA extended the request's life
    uint64_t expires_ns = 0;
    // MRAs honoured and the time they added (IBTA 12.6.6; bounded).
    unsigned mras = 0;
    uint64_t mra_extension_ns = 0;
  };
  struct Listener {
    uint64_t tag = 0;
    unsigned backlog = kCmDefaultBacklog;
    bool claimed = false;  // the host's daemon gave us the port (listen_hook), or there is none
  };
  struct CachedAh {
    uint32_t handle = 0;
    uint64_t last_used_ns = 0;
  };
  // An address handle out of the cache, destroyed once every send posted
  // before it left has completed (QP1's sends complete in order, and the
  // engine reads the handle when it builds the frame, not at post time).
  struct RetiredAh {
    uint32_t handle = 0;
    uint64_t posted_before = 0;
  };

  Engine* engine = nullptr;
  PdHandle pd = 0;
  Options options;
  uint64_t ca_guid = 0;
  ibv_mtu port_mtu = IBV_MTU_1024;

  // Orders Listen and StopListening, whose daemon requests are made
  // without `mutex`; taken before it, never under it.
  std::mutex listen_mutex;
  mutable std::mutex mutex;
  CompletionQueue* cq = nullptr;
  QueuePair* gsi = nullptr;
  std::vector<uint8_t> recv_memory;
  MrKeys recv_keys{};
  bool mr_registered = false;
  std::mt19937_64 random;
  uint32_t tid_high = 0;
  std::map<uint16_t, Listener> listeners;
  std::map<uint16_t, unsigned> pending_by_port;  // requests in kReqReceived, by listened port
  std::map<CmConnectionId, Connection> connections;
  std::map<std::pair<Gid, uint32_t>, CmConnectionId> by_remote;  // (peer GID, remote comm ID)
  std::map<std::pair<Gid, MacAddress>, CachedAh> address_handles;
  std::deque<RetiredAh> retired_ahs;
  uint64_t sends_posted = 0, sends_completed = 0;
  uint64_t next_ah_scan_ns = 0;
  std::deque<CmEvent> events;
  CmCounters counters;

  uint64_t Now() const {
    if (options.clock_ns) return options.clock_ns();
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }

  Status Init();
  void Teardown();
  Status PostRecvSlot(uint64_t slot);

  // An address handle to (gid, mac), from the cache or made without any
  // neighbour resolution (Engine::CreateAhToMac).
  StatusOr<uint32_t> AddressHandleFor(const Gid& gid, const MacAddress& mac);
  void RetireAh(uint32_t handle);
  void DestroyRetiredAhs();
  void AgeAddressHandles(uint64_t now);
  // The ibv_ah_attr for MADs to `peer` (from our GID of its IP version).
  bool AhAttrFor(const Gid& peer, ibv_ah_attr* attr) const;
  // A request leaves kReqReceived (answered, withdrawn, expired): its place
  // in the listener's backlog is free again.
  void LeaveBacklog(Connection& c);
  // Forgets connection `it` (and its by_remote entry).
  void Erase(std::map<CmConnectionId, Connection>::iterator it);
  // The engine's GID table index of `gid`, or -1.
  int GidIndex(const Gid& gid) const;
  // This side's address for talking to `peer`: options.local_gid when it is
  // of the peer's IP version, else the table's first GID of that version.
  bool LocalGidFor(const Gid& peer, Gid* local) const;
  bool SendMad(const Gid& to, const MacAddress& mac, const uint8_t* mad);
  bool SendMad(const Gid& to, const MacAddress& mac, const CmMad& mad) {
    uint8_t bytes[kMadBytes];
    EncodeCmMad(mad, bytes);
    return SendMad(to, mac, bytes);
  }
  bool SendToPeer(const Connection& c, const uint8_t* mad) { return SendMad(c.peer.gid, c.peer_mac, mad); }
  // Passive side, while the user decides on a request: MRA for the REQ, and
  // the request lives as long as the caller now waits (bounded).
  void SendMra(Connection& c);
  // Sends `mad` and resends it after resend_ns (0: response_timeout_ns), each
  // later wait twice the last up to max_resend_ns (0: resend_ns, a flat
  // schedule), up to `retries` times (-1: max_retries) until answered.
  void SendAndWait(Connection& c, const CmMad& mad, uint64_t resend_ns = 0, int retries = -1,
                   uint64_t max_resend_ns = 0);
  void SendAnswer(Connection& c, const CmMad& mad);
  void SendRej(const Gid& to, const MacAddress& mac, uint64_t tid, uint32_t local_id, uint32_t remote_id, CmMessageKind kind,
               uint16_t reason, const uint8_t* data, size_t length);

  CmConnectionId NewLocalId();
  uint16_t NewPort();
  uint32_t NewPsn() { return static_cast<uint32_t>(random() & 0xFFFFFF); }
  CmMad MadFor(const Connection& c) const {
    CmMad mad;
    mad.header.transaction_id = c.transaction_id;
    return mad;
  }

  Status ToInit(QueuePair* qp, int access_flags);
  Status ToRtrRts(const Connection& c, uint32_t rq_psn, uint32_t sq_psn, uint8_t max_dest_rd_atomic,
                  uint8_t max_rd_atomic, uint8_t retry_count, uint8_t rnr_retry);
  void ToError(Connection& c);
  void Emit(const Connection& c, CmEventType type, std::vector<uint8_t> private_data = {}, uint16_t reason = 0);

  void DrainCompletions();
  // `source_mac`: the frame's Ethernet source, where answers go.
  void HandleMad(const Gid& source, const MacAddress& source_mac, const uint8_t* data, size_t length);
  void HandleReq(const Gid& source, const MacAddress& source_mac, const MadHeader& header, const CmReq& req);
  void HandleRep(const Gid& source, const MacAddress& source_mac, const MadHeader& header, const CmRep& rep);
  void HandleRtu(const Gid& source, const CmRtu& rtu);
  void HandleRej(const Gid& source, const CmRej& rej);
  void HandleMra(const Gid& source, const CmMra& mra);
  void HandleDreq(const Gid& source, const MacAddress& source_mac, const MadHeader& header, const CmDreq& dreq);
  void HandleDrep(const Gid& source, const CmDrep& drep);
  void RunTimers();
  void TimedOut(Connection& c);
  // Every change of a connection's state: checked against cm_state.h's
  // table where UROCE_DCHECKS is on.
  static void MoveTo(Connection& c, State to) {
    if constexpr (kDchecksEnabled) {
      if (!CmTransitionAllowed(c.state, to)) {
        std::fprintf(stderr, "CM connection %u: %s -> %s is not in the state table\n", c.local_id,
                     CmStateName(c.state), CmStateName(to));
      }
    }
    UROCE_DCHECK(CmTransitionAllowed(c.state, to));
    c.state = to;
  }

  Connection* Find(uint32_t local_id) {
    auto it = connections.find(local_id);
    return it == connections.end() ? nullptr : &it->second;
  }
};

}  // namespace uroce::cm
