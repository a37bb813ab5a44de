// IB CM over RoCE (IBTA vol. 1 ch. 12, Annex A11); see connection_manager.h.
//
// Connection states: cm_state.h, whose table every change of state is
// checked against (Impl::MoveTo):
//   active:  kReqSent --REP--> kEstablished (RTU sent)
//            kReqSent --REJ / timeout--> kClosed
//   passive: kReqReceived --Accept--> kRepSent --RTU--> kEstablished
//            kReqReceived --Reject--> kClosed
//            kRepSent --timeout / REJ--> kClosed
//   both:    kEstablished --Disconnect--> kDreqSent --DREP / timeout--> kTimewait
//            kEstablished --DREQ (DREP sent)--> kTimewait
// A connection stays (answering duplicates) until Release.
#include "cm/connection_manager.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <variant>

#include "cm/cm_mad.h"
#include "cm/cm_state.h"
#include "common/check.h"
#include "transport/qp_state.h"

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

namespace {

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

// 4.096 us * 2^x >= ns (IBTA 12.6.5 "CM Response Timeout").
uint8_t TimeoutExponent(uint64_t ns) {
  uint8_t x = 0;
  while (x < 31 && (4096ull << x) < ns) ++x;
  return x;
}

// EUI-64 from the port's MAC (RFC 4291 appendix A), as rxe makes its node GUID.
uint64_t GuidFromMac(const MacAddress& mac) {
  const uint8_t b[8] = {uint8_t(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  uint64_t guid = 0;
  for (uint8_t x : b) guid = (guid << 8) | x;
  return guid;
}

// The GRH the engine places before a UD datagram: an IPv6 header, or 20 zero
// bytes and the IPv4 header (IBTA A17.4.5.2). The IP version decides, and it
// is read first: byte 20 of an IPv6 header is byte 12 of its source address,
// which may well start with 0x4 (fd00::4000:2).
bool SourceFromGrh(const uint8_t* grh, Gid* source) {
  if ((grh[0] >> 4) == 6) {
    std::memcpy(source->data(), grh + 8, 16);
    return true;
  }
  for (size_t i = 0; i < 20; ++i) {
    if (grh[i] != 0) return false;
  }
  if ((grh[20] >> 4) == 4) {
    *source = Ipv4MappedGid(grh + 20 + 12);
    return true;
  }
  return false;
}

template <size_t N>
std::vector<uint8_t> ToVector(const std::array<uint8_t, N>& a, size_t from = 0) {
  return std::vector<uint8_t>(a.begin() + from, a.end());
}

}  // namespace

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
    uint64_t resend_ns = 0;  // between resends of `outstanding`
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
  // Sends `mad` and resends it every resend_ns (0: response_timeout_ns) up
  // to `retries` times (-1: max_retries) until answered.
  void SendAndWait(Connection& c, const CmMad& mad, uint64_t resend_ns = 0, int retries = -1);
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

namespace {

// Calls the activity hook when it goes out of scope: declared before a
// method's lock, it runs after the lock is released.
class ActivityNotice {
 public:
  explicit ActivityNotice(const std::function<void()>& hook) : hook_(hook) {}
  ~ActivityNotice() {
    if (hook_) hook_();
  }
  ActivityNotice(const ActivityNotice&) = delete;
  ActivityNotice& operator=(const ActivityNotice&) = delete;

 private:
  const std::function<void()>& hook_;
};

}  // namespace

Status ConnectionManager::Impl::Init() {
  const auto& gids = engine->config().gids;
  if (gids.empty()) return InvalidArgument("the engine has no GID");
  if (options.local_gid == Gid{}) options.local_gid = gids[0];
  if (GidIndex(options.local_gid) < 0) return InvalidArgument("local_gid is not in the engine's GID table");
  ca_guid = GuidFromMac(engine->config().mac);
  port_mtu = engine->limits().max_mtu;
  if (options.recv_buffers == 0) return InvalidArgument("recv_buffers must be at least 1");
  if (options.random_seed != 0) {
    random.seed(options.random_seed);
  } else {
    std::random_device device;
    random.seed((uint64_t{device()} << 32) | device());
  }
  tid_high = static_cast<uint32_t>(random());

  auto new_cq = engine->CreateCq(kSendQueueDepth + options.recv_buffers);
  if (!new_cq.ok()) return new_cq.status();
  cq = *new_cq;
  QpInitAttr init;
  init.type = IBV_QPT_UD;
  init.pd = pd;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = kSendQueueDepth;
  init.cap.max_recv_wr = options.recv_buffers;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kMadBytes;  // MADs are copied at post time
  init.sq_sig_all = true;
  init.fixed_qpn = kGsiQpn;
  auto qp = engine->CreateQp(init);
  if (!qp.ok()) return qp.status();
  gsi = *qp;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = kGsiQkey;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE));
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE | IBV_QP_SQ_PSN));

  recv_memory.assign(size_t{options.recv_buffers} * kRecvSlotBytes, 0);
  auto keys = engine->RegMr(pd, recv_memory.data(), recv_memory.size(),
                            reinterpret_cast<uint64_t>(recv_memory.data()), IBV_ACCESS_LOCAL_WRITE);
  if (!keys.ok()) return keys.status();
  recv_keys = *keys;
  mr_registered = true;
  for (uint64_t slot = 0; slot < options.recv_buffers; ++slot) UROCE_RETURN_IF_ERROR(PostRecvSlot(slot));
  return Status::Ok();
}

void ConnectionManager::Impl::Teardown() {
  if (gsi != nullptr) (void)engine->DestroyQp(gsi);
  gsi = nullptr;
  if (cq != nullptr) (void)engine->DestroyCq(cq);
  cq = nullptr;
  if (mr_registered) (void)engine->DeregMr(recv_keys.lkey);
  mr_registered = false;
  for (const auto& [key, ah] : address_handles) (void)engine->DestroyAh(ah.handle);
  address_handles.clear();
  for (const RetiredAh& ah : retired_ahs) (void)engine->DestroyAh(ah.handle);
  retired_ahs.clear();
}

Status ConnectionManager::Impl::PostRecvSlot(uint64_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(recv_memory.data() + slot * kRecvSlotBytes),
              static_cast<uint32_t>(kRecvSlotBytes), recv_keys.lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  const int error = engine->PostRecv(gsi, &wr, &bad);
  if (error != 0) return Status(StatusCode::kInternal, "posting a MAD receive buffer: errno " + std::to_string(error));
  return Status::Ok();
}

int ConnectionManager::Impl::GidIndex(const Gid& gid) const {
  const auto& gids = engine->config().gids;
  auto at = std::find(gids.begin(), gids.end(), gid);
  return at == gids.end() ? -1 : static_cast<int>(at - gids.begin());
}

bool ConnectionManager::Impl::LocalGidFor(const Gid& peer, Gid* local) const {
  // The configured local GID wins when it is of the peer's IP version.
  if (IsIpv4MappedGid(options.local_gid) == IsIpv4MappedGid(peer)) {
    *local = options.local_gid;
    return true;
  }
  const auto& gids = engine->config().gids;
  const std::optional<size_t> index = transport::SourceGidFor(gids, peer);
  if (!index) return false;
  *local = gids[*index];
  return true;
}

bool ConnectionManager::Impl::AhAttrFor(const Gid& peer, ibv_ah_attr* attr) const {
  // MADs to a peer leave from our address of its IP version (RoCEv2 puts
  // the source GID in the IP header, which must be of the same version).
  Gid local;
  if (!LocalGidFor(peer, &local)) return false;
  *attr = {};
  attr->is_global = 1;
  attr->port_num = 1;
  attr->grh.sgid_index = static_cast<uint8_t>(GidIndex(local));
  attr->grh.hop_limit = 64;
  std::memcpy(attr->grh.dgid.raw, peer.data(), 16);
  return true;
}

StatusOr<uint32_t> ConnectionManager::Impl::AddressHandleFor(const Gid& gid, const MacAddress& mac) {
  const uint64_t now = Now();
  auto it = address_handles.find({gid, mac});
  if (it != address_handles.end()) {
    it->second.last_used_ns = now;
    return it->second.handle;
  }
  ibv_ah_attr attr;
  if (!AhAttrFor(gid, &attr)) return InvalidArgument("no local GID of the peer's IP version");
  // Bounded: a storm of sources must not grow the engine's AH table. The
  // least recently used entry makes room (a peer still talking to us gets
  // a new one at its next MAD).
  if (options.max_address_handles > 0 && address_handles.size() >= options.max_address_handles) {
    auto oldest = address_handles.begin();
    for (auto at = address_handles.begin(); at != address_handles.end(); ++at) {
      if (at->second.last_used_ns < oldest->second.last_used_ns) oldest = at;
    }
    RetireAh(oldest->second.handle);
    address_handles.erase(oldest);
    counters.address_handles_evicted++;
  }
  // Never CreateAh here: that would resolve the neighbour (ARP/ND), waiting
  // with the CM locked on a peer's say-so (docs/architecture.md, "The fast
  // path": nothing on the receive path waits).
  auto handle = engine->CreateAhToMac(pd, attr, mac);
  if (!handle.ok()) return handle.status();
  address_handles[{gid, mac}] = CachedAh{*handle, now};
  return *handle;
}

void ConnectionManager::Impl::RetireAh(uint32_t handle) {
  retired_ahs.push_back(RetiredAh{handle, sends_posted});
  DestroyRetiredAhs();
}

void ConnectionManager::Impl::DestroyRetiredAhs() {
  while (!retired_ahs.empty() && retired_ahs.front().posted_before <= sends_completed) {
    (void)engine->DestroyAh(retired_ahs.front().handle);
    retired_ahs.pop_front();
  }
}

void ConnectionManager::Impl::AgeAddressHandles(uint64_t now) {
  if (now < next_ah_scan_ns) return;
  next_ah_scan_ns = now + options.address_handle_idle_ns / 4 + 1;
  for (auto it = address_handles.begin(); it != address_handles.end();) {
    if (now - it->second.last_used_ns >= options.address_handle_idle_ns) {
      RetireAh(it->second.handle);
      it = address_handles.erase(it);
    } else {
      ++it;
    }
  }
}

bool ConnectionManager::Impl::SendMad(const Gid& to, const MacAddress& mac, const uint8_t* mad) {
  auto handle = AddressHandleFor(to, mac);
  if (!handle.ok()) {
    counters.send_failures++;
    return false;
  }
  ibv_ah ah{};
  ah.handle = *handle;
  ibv_sge sge{reinterpret_cast<uint64_t>(mad), static_cast<uint32_t>(kMadBytes), 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud.ah = &ah;
  wr.wr.ud.remote_qpn = kGsiQpn;
  wr.wr.ud.remote_qkey = kGsiQkey;
  const ibv_send_wr* bad = nullptr;
  if (engine->PostSend(gsi, &wr, &bad) != 0) {
    // A full send queue: the retransmission timer (or the peer's) covers it.
    counters.send_failures++;
    return false;
  }
  sends_posted++;
  counters.mads_sent++;
  return true;
}

void ConnectionManager::Impl::SendAndWait(Connection& c, const CmMad& mad, uint64_t resend_ns, int retries) {
  EncodeCmMad(mad, c.outstanding.data());
  c.waiting = true;
  c.retries_left = retries < 0 ? options.max_retries : static_cast<unsigned>(retries);
  c.resend_ns = resend_ns != 0 ? resend_ns : options.response_timeout_ns;
  c.deadline_ns = Now() + c.resend_ns;
  c.mras = 0;
  c.mra_extension_ns = 0;
  SendToPeer(c, c.outstanding.data());
}

void ConnectionManager::Impl::SendAnswer(Connection& c, const CmMad& mad) {
  EncodeCmMad(mad, c.answer.data());
  c.have_answer = true;
  SendToPeer(c, c.answer.data());
}

void ConnectionManager::Impl::SendRej(const Gid& to, const MacAddress& mac, uint64_t tid, uint32_t local_id, uint32_t remote_id,
                                      CmMessageKind kind, uint16_t reason, const uint8_t* data, size_t length) {
  CmMad mad;
  mad.header.transaction_id = tid;
  CmRej rej;
  rej.local_comm_id = local_id;
  rej.remote_comm_id = remote_id;
  rej.message_rejected = kind;
  rej.reason = reason;
  if (length > 0) std::memcpy(rej.private_data.data(), data, std::min(length, rej.private_data.size()));
  mad.message = rej;
  SendMad(to, mac, mad);
}

void ConnectionManager::Impl::LeaveBacklog(Connection& c) {
  if (!c.in_backlog) return;
  c.in_backlog = false;
  auto it = pending_by_port.find(c.local.port);
  if (it == pending_by_port.end()) return;
  if (--it->second == 0) pending_by_port.erase(it);
}

void ConnectionManager::Impl::Erase(std::map<CmConnectionId, Connection>::iterator it) {
  Connection& c = it->second;
  LeaveBacklog(c);
  if (c.remote_id != 0) {
    auto known = by_remote.find({c.peer.gid, c.remote_id});
    if (known != by_remote.end() && known->second == c.local_id) by_remote.erase(known);
  }
  connections.erase(it);
}

CmConnectionId ConnectionManager::Impl::NewLocalId() {
  while (true) {
    const auto id = static_cast<CmConnectionId>(options.comm_id_base | (random() & options.comm_id_mask));
    if (id != 0 && connections.count(id) == 0) return id;
  }
}

uint16_t ConnectionManager::Impl::NewPort() {
  // The dynamic range (RFC 6335); a port is taken if a listener or one of our
  // connections uses it.
  for (int tries = 0; tries < 65536; ++tries) {
    const uint16_t port = static_cast<uint16_t>(0xC000 + random() % 0x4000);
    bool taken = listeners.count(port) != 0;
    for (const auto& [id, c] : connections) taken |= c.local.port == port;
    if (!taken) return port;
  }
  return 0;
}

Status ConnectionManager::Impl::ToInit(QueuePair* qp, int access_flags) {
  // A QP its owner moved to INIT already (to post receives before the
  // connection is up, as libfabric endpoints do) keeps its attributes.
  if (qp->state.load(std::memory_order_acquire) == IBV_QPS_INIT) return Status::Ok();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.pkey_index = 0;
  attr.qp_access_flags = static_cast<unsigned>(access_flags);
  return engine->ModifyQp(qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// IBTA 12.9.7 (and 11.2.5.2's RTR / RTS attributes): the path from the CM
// messages, the PSNs, the read/atomic depths both sides agreed.
Status ConnectionManager::Impl::ToRtrRts(const Connection& c, uint32_t rq_psn, uint32_t sq_psn,
                                         uint8_t max_dest_rd_atomic, uint8_t max_rd_atomic, uint8_t retry_count,
                                         uint8_t rnr_retry) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = c.mtu;
  attr.dest_qp_num = c.remote_qpn;
  attr.rq_psn = rq_psn;
  attr.max_dest_rd_atomic = max_dest_rd_atomic;
  attr.min_rnr_timer = c.params.min_rnr_timer;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  const int sgid_index = GidIndex(c.local.gid);
  if (sgid_index < 0) return Internal("connection's local GID left the engine's table");
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
  attr.ah_attr.grh.hop_limit = 64;
  std::memcpy(attr.ah_attr.grh.dgid.raw, c.peer.gid.data(), 16);
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(c.qp, attr,
                                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                                         c.qpn));
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn;
  attr.timeout = c.params.local_ack_timeout;
  attr.retry_cnt = retry_count;
  attr.rnr_retry = rnr_retry;
  attr.max_rd_atomic = max_rd_atomic;
  return engine->ModifyQp(c.qp, attr,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC,
                          c.qpn);
}

void ConnectionManager::Impl::ToError(Connection& c) {
  if (c.qp == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  // The engine flushes the QP's outstanding work (IBTA 10.3.1.8); a QP the
  // caller destroyed already is refused, untouched.
  (void)engine->ModifyQp(c.qp, attr, IBV_QP_STATE, c.qpn);
}

void ConnectionManager::Impl::Emit(const Connection& c, CmEventType type, std::vector<uint8_t> private_data,
                                   uint16_t reason) {
  CmEvent e;
  e.type = type;
  e.id = c.local_id;
  e.tag = c.tag;
  e.listen_tag = c.listen_tag;
  e.local = c.local;
  e.peer = c.peer;
  e.reject_reason = reason;
  e.private_data = std::move(private_data);
  if (type == CmEventType::kConnectRequest) {
    e.peer_responder_resources = c.req.responder_resources;
    e.peer_initiator_depth = c.req.initiator_depth;
  }
  events.push_back(std::move(e));
}

void ConnectionManager::Impl::DrainCompletions() {
  ibv_wc wc[16];
  while (true) {
    const int n = cq->Poll(16, wc);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) {
      if (!(wc[i].opcode & IBV_WC_RECV)) {
        // Our own sends (inline copies: nothing to free), in order: address
        // handles retired before them may go now.
        sends_completed++;
        continue;
      }
      const uint64_t slot = wc[i].wr_id;
      if (slot >= options.recv_buffers) continue;
      if (wc[i].status == IBV_WC_SUCCESS) {
        const uint8_t* buffer = recv_memory.data() + slot * kRecvSlotBytes;
        Gid source;
        MacAddress source_mac{};
        // CM MADs come from QP1 only (IBTA 13.5.1), with a GRH and a whole
        // MAD. Answers go to the frame's Ethernet source: without it, none
        // could be sent without resolving, so the MAD is dropped.
        if (wc[i].src_qp != kGsiQpn || !(wc[i].wc_flags & IBV_WC_GRH) || wc[i].byte_len < kRecvSlotBytes ||
            !SourceFromGrh(buffer, &source) || !engine->UdSourceMac(gsi, slot, &source_mac)) {
          counters.mads_dropped++;
        } else {
          counters.mads_received++;
          HandleMad(source, source_mac, buffer + transport::kGrhBytes, wc[i].byte_len - transport::kGrhBytes);
        }
      }
      if (wc[i].status != IBV_WC_WR_FLUSH_ERR) (void)PostRecvSlot(slot);
    }
    DestroyRetiredAhs();
  }
}

void ConnectionManager::Impl::HandleMad(const Gid& source, const MacAddress& source_mac, const uint8_t* data,
                                        size_t length) {
  CmMad mad;
  if (DecodeCmMad(data, length, &mad) != CmMadError::kOk) {
    counters.mads_dropped++;
    return;
  }
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, CmReq>) HandleReq(source, source_mac, mad.header, m);
        else if constexpr (std::is_same_v<T, CmRep>) HandleRep(source, source_mac, mad.header, m);
        else if constexpr (std::is_same_v<T, CmRtu>) HandleRtu(source, m);
        else if constexpr (std::is_same_v<T, CmRej>) HandleRej(source, m);
        else if constexpr (std::is_same_v<T, CmMra>) HandleMra(source, m);
        else if constexpr (std::is_same_v<T, CmDreq>) HandleDreq(source, source_mac, mad.header, m);
        else if constexpr (std::is_same_v<T, CmDrep>) HandleDrep(source, m);
      },
      mad.message);
}

void ConnectionManager::Impl::HandleReq(const Gid& source, const MacAddress& source_mac, const MadHeader& header,
                                        const CmReq& req) {
  auto known = by_remote.find({source, req.local_comm_id});
  if (known != by_remote.end()) {
    // A duplicate REQ (IBTA 12.9.6.1): our REP (or REJ) went missing; say it
    // again. While the user still decides, the caller is about to give up:
    // tell it to wait (MRA, IBTA 12.6.6), as the kernel's rdma_cm does (its
    // delayed MRA is sent for the first duplicate REQ, never for a REQ the
    // user answers at once, so a quick accept stays REQ/REP/RTU).
    counters.duplicates++;
    Connection* c = Find(known->second);
    if (c != nullptr && c->have_answer && (c->state == State::kRepSent || c->state == State::kEstablished ||
                                           c->state == State::kClosed)) {
      SendToPeer(*c, c->answer.data());
    } else if (c != nullptr && c->state == State::kReqReceived) {
      SendMra(*c);
    }
    return;
  }
  // Our REJ carries a communication ID of ours (IBTA 12.6.7: the sender's
  // ID; the kernel's CM always fills it), drawn like any other and kept
  // nowhere: on a host shared through uroce daemon, the switch passes a
  // process's CM message only with an ID of that process's own.
  auto reject = [&](uint16_t reason) {
    SendRej(source, source_mac, header.transaction_id, NewLocalId(), req.local_comm_id, CmMessageKind::kReq, reason,
            nullptr, 0);
  };
  if ((req.service_id & ~uint64_t{0xFFFF}) != kRdmaIpServiceIdBase) return reject(kRejInvalidServiceId);
  const uint16_t port = static_cast<uint16_t>(req.service_id & 0xFFFF);
  auto listener = listeners.find(port);
  if (listener == listeners.end()) return reject(kRejInvalidServiceId);
  // The backlog (rdma_listen's, fi_listen's): a full one refuses with "no
  // resources" (IBTA 12.6.7 table 112, reason 3) and keeps nothing, so a
  // storm of REQs costs at most `backlog` entries.
  {
    auto pending = pending_by_port.find(port);
    if (pending != pending_by_port.end() && pending->second >= listener->second.backlog) {
      counters.backlog_rejects++;
      return reject(kRejNoResources);
    }
  }
  if (req.transport_service_type != 0 || req.extended_transport_type != 0) return reject(kRejInvalidTransport);
  if (req.path_mtu < IBV_MTU_256 || req.path_mtu > IBV_MTU_4096) return reject(kRejInvalidPathMtu);
  IpCmHeader ip;
  if (DecodeIpCmHeader(req.private_data.data(), req.private_data.size(), &ip) != CmMadError::kOk ||
      ip.major_version != 0) {
    return reject(kRejUnsupported);
  }

  Connection c;
  c.local_id = NewLocalId();
  c.remote_id = req.local_comm_id;
  c.active = false;
  MoveTo(c, State::kReqReceived);
  c.listen_tag = listener->second.tag;
  // Answer from the address the caller called (the REQ's primary path
  // names it; the IP CM header too); one of the caller's IP version else.
  Gid local;
  if (GidIndex(req.primary.remote_gid) >= 0) {
    local = req.primary.remote_gid;
  } else if (GidIndex(ip.destination_ip) >= 0) {
    local = ip.destination_ip;
  } else if (!LocalGidFor(source, &local)) {
    return reject(kRejUnsupported);
  }
  c.local = {local, port};
  c.peer = {source, ip.source_port};
  c.transaction_id = header.transaction_id;  // every message of this connection reuses the REQ's
  c.remote_qpn = req.local_qpn;
  c.req = req;
  c.peer_mac = source_mac;
  // The caller waits Remote CM Response Timeout (4.096 us * 2^x) for each
  // of its 1 + Max CM Retries tries (IBTA 12.6.5); after that it has given
  // up, so an answer would be for nobody. Bounded: the fields are the
  // peer's to set (2^31 * 4.096 us is 2.4 hours).
  {
    const uint64_t per_try = 4096ull << std::min<uint8_t>(req.remote_cm_response_timeout, 31);
    const uint64_t patience = per_try * (uint64_t{req.max_cm_retries} + 1);
    const uint64_t lifetime =
        std::max(options.response_timeout_ns, std::min(patience, options.max_request_lifetime_ns));
    c.expires_ns = Now() + lifetime;
  }
  c.in_backlog = true;
  pending_by_port[port]++;
  by_remote[{source, req.local_comm_id}] = c.local_id;
  auto& stored = connections[c.local_id] = c;
  Emit(stored, CmEventType::kConnectRequest, ToVector(req.private_data, kIpCmHeaderBytes));
}

void ConnectionManager::Impl::HandleRep(const Gid& source, const MacAddress& source_mac, const MadHeader& header,
                                        const CmRep& rep) {
  Connection* c = Find(rep.remote_comm_id);
  if (c == nullptr || !c->active) {
    // A REP for nothing we know (we gave up, or it is stale): say so, so that
    // the passive side stops waiting for an RTU (IBTA 12.9.6.2).
    counters.mads_dropped++;
    const CmConnectionId ours = (rep.remote_comm_id & ~options.comm_id_mask) == options.comm_id_base &&
                                        rep.remote_comm_id != 0
                                    ? rep.remote_comm_id
                                    : NewLocalId();
    SendRej(source, source_mac, header.transaction_id, ours, rep.local_comm_id, CmMessageKind::kRep,
            kRejInvalidCommId, nullptr, 0);
    return;
  }
  // Only the peer we asked answers: a REP from another address is forged
  // (any host that guessed our 32-bit ID could otherwise pick the QP we
  // talk to). Dropped without an answer, so that we reflect nothing.
  if (source != c->peer.gid) {
    counters.mads_forged++;
    return;
  }
  if (c->state != State::kReqSent) {
    // A duplicate REP: our RTU went missing; send it again.
    counters.duplicates++;
    if (c->state == State::kEstablished && c->remote_id == rep.local_comm_id && c->have_answer) {
      SendToPeer(*c, c->answer.data());
    }
    return;
  }
  c->waiting = false;
  c->remote_id = rep.local_comm_id;
  c->remote_qpn = rep.local_qpn;
  by_remote[{c->peer.gid, c->remote_id}] = c->local_id;
  const QpLimits limits = engine->limits();
  const uint8_t max_dest_rd_atomic =
      std::min({c->params.responder_resources, rep.initiator_depth, limits.max_dest_rd_atomic});
  const uint8_t max_rd_atomic = std::min({c->params.initiator_depth, rep.responder_resources, limits.max_rd_atomic});
  // Retry count: ours (the REQ told the peer the same); RNR retry: what the
  // REP asks of us (IBTA 12.6.8).
  //
  // PSNs as the Linux kernel's CM (and so every RoCE peer) uses them: each
  // message's Starting PSN is the first PSN its sender will *receive*. The
  // REQ's is our receive queue's, the REP's our send queue's
  // (testdata/captures/rping_rdma_cm.pcap: the active side's first SEND
  // carries the REP's Starting PSN, the passive side's first READ the
  // REQ's).
  // ModifyQp with a path asks the resolver for a MAC the neighbour table
  // lacks; here, on the receive path, it must find it (Connect learnt it).
  MacAddress known;
  if (!engine->LookupNeighbor(c->peer.gid, &known)) engine->AddNeighbor(c->peer.gid, c->peer_mac);
  Status s = ToRtrRts(*c, c->req.starting_psn, rep.starting_psn, max_dest_rd_atomic, max_rd_atomic,
                      c->params.retry_count, rep.rnr_retry_count);
  if (!s.ok()) {
    SendRej(c->peer.gid, c->peer_mac, c->transaction_id, c->local_id, c->remote_id, CmMessageKind::kRep, kRejNoResources,
            nullptr, 0);
    ToError(*c);
    MoveTo(*c, State::kClosed);
    Emit(*c, CmEventType::kUnreachable);
    return;
  }
  CmMad mad = MadFor(*c);
  CmRtu rtu;
  rtu.local_comm_id = c->local_id;
  rtu.remote_comm_id = c->remote_id;
  mad.message = rtu;
  SendAnswer(*c, mad);
  MoveTo(*c, State::kEstablished);
  Emit(*c, CmEventType::kEstablished, ToVector(rep.private_data));
}

void ConnectionManager::Impl::HandleRtu(const Gid& source, const CmRtu& rtu) {
  Connection* c = Find(rtu.remote_comm_id);
  if (c == nullptr || c->active || c->remote_id != rtu.local_comm_id) {
    counters.mads_dropped++;
    return;
  }
  if (source != c->peer.gid) {
    counters.mads_forged++;
    return;
  }
  if (c->state != State::kRepSent) {
    counters.duplicates++;
    return;
  }
  c->waiting = false;
  MoveTo(*c, State::kEstablished);
  Emit(*c, CmEventType::kEstablished);
}

void ConnectionManager::Impl::HandleRej(const Gid& source, const CmRej& rej) {
  Connection* c = Find(rej.remote_comm_id);
  if (c == nullptr && rej.remote_comm_id == 0) {
    // A caller that gave up before our REP reached it does not know our ID:
    // find the request by its own (IBTA 12.6.7; the kernel's CM does so for
    // REJ "timeout").
    auto known = by_remote.find({source, rej.local_comm_id});
    if (known != by_remote.end()) c = Find(known->second);
  }
  if (c == nullptr) {
    counters.mads_dropped++;
    return;
  }
  // Only the peer rejects: from its address, and once its ID is known (its
  // REQ or REP) naming it. Before that (the REJ of our REQ) any ID of the
  // rejecter's goes; uroce's carry one of its own, a daemon's switch 0.
  if (source != c->peer.gid || (c->remote_id != 0 && rej.local_comm_id != c->remote_id)) {
    counters.mads_forged++;
    return;
  }
  switch (c->state) {
    case State::kReqSent:
    case State::kRepSent:
    case State::kReqReceived:
      LeaveBacklog(*c);
      c->waiting = false;
      c->have_answer = false;
      ToError(*c);
      MoveTo(*c, State::kClosed);
      Emit(*c, CmEventType::kRejected, ToVector(rej.private_data), rej.reason);
      return;
    default:
      counters.duplicates++;
      return;
  }
}

void ConnectionManager::Impl::SendMra(Connection& c) {
  CmMad mad;
  mad.header.transaction_id = c.transaction_id;
  CmMra mra;
  mra.local_comm_id = c.local_id;
  mra.remote_comm_id = c.remote_id;
  mra.message_mraed = CmMessageKind::kReq;
  mra.service_timeout = kMraServiceTimeout;
  mad.message = mra;
  if (SendMad(c.peer.gid, c.peer_mac, mad)) counters.mras_sent++;
  // The first MRA extends the request's life once (a later duplicate only
  // gets the MRA again, in case it was lost): a caller cannot keep a backlog
  // place for ever by repeating its REQ.
  if (c.mra_sent) return;
  c.mra_sent = true;
  const uint64_t asked = 4096ull << kMraServiceTimeout;
  c.expires_ns = std::max(c.expires_ns, Now() + std::min(asked + options.response_timeout_ns,
                                                         options.max_request_lifetime_ns));
}

void ConnectionManager::Impl::HandleMra(const Gid& source, const CmMra& mra) {
  // The peer needs longer (IBTA 12.6.6): wait its service timeout on top.
  Connection* c = Find(mra.remote_comm_id);
  if (c == nullptr || !c->waiting) return;
  const bool fits = (mra.message_mraed == CmMessageKind::kReq && c->state == State::kReqSent) ||
                    (mra.message_mraed == CmMessageKind::kRep && c->state == State::kRepSent);
  if (!fits) return;
  // Only the peer may ask for time: the MRA must come from its GID (and QP 1,
  // checked for every MAD), and once the peer's ID is known (after its REQ or
  // REP) name it. A forged one is ignored.
  if (source != c->peer.gid || (c->remote_id != 0 && mra.local_comm_id != c->remote_id)) {
    counters.mras_ignored++;
    return;
  }
  // The service timeout is 5 bits: 2^31 * 4.096 us is 2.4 hours. Honour at
  // most max_mras of them and max_mra_extension_ns in all, so that no one
  // wait grows without bound.
  if (c->mras >= options.max_mras || c->mra_extension_ns >= options.max_mra_extension_ns) {
    counters.mras_ignored++;
    return;
  }
  const uint64_t asked = 4096ull << std::min<uint8_t>(mra.service_timeout, 31);
  const uint64_t granted = std::min(asked, options.max_mra_extension_ns - c->mra_extension_ns);
  c->mras++;
  c->mra_extension_ns += granted;
  c->deadline_ns = Now() + options.response_timeout_ns + granted;
}

void ConnectionManager::Impl::HandleDreq(const Gid& source, const MacAddress& source_mac, const MadHeader& header,
                                         const CmDreq& dreq) {
  Connection* c = Find(dreq.remote_comm_id);
  CmMad mad;
  mad.header.transaction_id = header.transaction_id;
  CmDrep drep;
  drep.local_comm_id = dreq.remote_comm_id;
  drep.remote_comm_id = dreq.local_comm_id;
  mad.message = drep;
  if (c != nullptr && c->remote_id == dreq.local_comm_id && source != c->peer.gid) {
    counters.mads_forged++;
    return;
  }
  if (c == nullptr || c->remote_id != dreq.local_comm_id) {
    // Already forgotten (released): answer anyway so that the peer stops
    // asking (the kernel's CM does the same).
    counters.duplicates++;
    SendMad(source, source_mac, mad);
    return;
  }
  switch (c->state) {
    case State::kRepSent:
      // The RTU was lost but the active side is established: it says so now.
      c->waiting = false;
      Emit(*c, CmEventType::kEstablished);
      [[fallthrough]];
    case State::kEstablished:
    case State::kDreqSent:
      c->waiting = false;
      ToError(*c);
      MoveTo(*c, State::kTimewait);
      SendAnswer(*c, mad);
      Emit(*c, CmEventType::kDisconnected);
      return;
    case State::kTimewait:
      counters.duplicates++;
      SendMad(c->peer.gid, c->peer_mac, mad);
      return;
    default:
      counters.mads_dropped++;
      return;
  }
}

void ConnectionManager::Impl::HandleDrep(const Gid& source, const CmDrep& drep) {
  Connection* c = Find(drep.remote_comm_id);
  if (c == nullptr || c->remote_id != drep.local_comm_id) {
    counters.mads_dropped++;
    return;
  }
  if (source != c->peer.gid) {
    counters.mads_forged++;
    return;
  }
  if (c->state != State::kDreqSent) {
    counters.duplicates++;
    return;
  }
  c->waiting = false;
  MoveTo(*c, State::kTimewait);
  Emit(*c, CmEventType::kDisconnected);
}

void ConnectionManager::Impl::RunTimers() {
  const uint64_t now = Now();
  for (auto it = connections.begin(); it != connections.end();) {
    Connection& c = it->second;
    if (c.state == State::kReqReceived && now >= c.expires_ns) {
      // Nobody answered while the caller waited: withdraw (REJ "timeout",
      // IBTA 12.6.7 table 112 reason 4, as a passive side that gives up)
      // and forget it, with its event if nobody took it yet.
      counters.requests_expired++;
      SendRej(c.peer.gid, c.peer_mac, c.transaction_id, c.local_id, c.remote_id, CmMessageKind::kReq, kRejTimeout,
              nullptr, 0);
      const CmConnectionId id = c.local_id;
      events.erase(std::remove_if(events.begin(), events.end(),
                                  [id](const CmEvent& e) {
                                    return e.id == id && e.type == CmEventType::kConnectRequest;
                                  }),
                   events.end());
      auto gone = it++;
      Erase(gone);
      continue;
    }
    ++it;
    if (!c.waiting || now < c.deadline_ns) continue;
    if (c.retries_left > 0) {
      c.retries_left--;
      c.deadline_ns = now + c.resend_ns;
      counters.retransmits++;
      SendToPeer(c, c.outstanding.data());
    } else {
      c.waiting = false;
      TimedOut(c);
    }
  }
  AgeAddressHandles(now);
}

void ConnectionManager::Impl::TimedOut(Connection& c) {
  switch (c.state) {
    case State::kReqSent:
    case State::kRepSent:
      // No REP / no RTU: tell the peer (REJ "timeout", IBTA 12.9.6.1) in case
      // only our direction works, and give up.
      SendRej(c.peer.gid, c.peer_mac, c.transaction_id, c.local_id, c.remote_id,
              c.state == State::kReqSent ? CmMessageKind::kReq : CmMessageKind::kRep, kRejTimeout, nullptr, 0);
      ToError(c);
      c.have_answer = false;
      MoveTo(c, State::kClosed);
      Emit(c, CmEventType::kUnreachable);
      return;
    case State::kDreqSent:
      // No DREP: the QP is in ERR already; the connection is over anyway.
      MoveTo(c, State::kTimewait);
      Emit(c, CmEventType::kDisconnected);
      return;
    default:
      return;
  }
}

// ---- ConnectionManager ----

StatusOr<std::unique_ptr<ConnectionManager>> ConnectionManager::Create(Engine* engine, PdHandle pd,
                                                                        const Options& options) {
  if (engine == nullptr) return InvalidArgument("no engine");
  std::unique_ptr<ConnectionManager> cm(new ConnectionManager());
  cm->impl_ = std::make_unique<Impl>();
  cm->impl_->engine = engine;
  cm->impl_->pd = pd;
  cm->impl_->options = options;
  Status s = cm->impl_->Init();
  if (!s.ok()) {
    cm->impl_->Teardown();
    return s;
  }
  return cm;
}

ConnectionManager::~ConnectionManager() {
  if (impl_) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->Teardown();
  }
}

StatusOr<uint16_t> ConnectionManager::Listen(uint16_t port, uint64_t tag, unsigned backlog) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const bool any_port = port == 0;
  // A port taken by another process on the host (listen_hook) is taken:
  // with port 0, try a few others.
  for (int tries = 0; tries < (any_port ? 16 : 1); ++tries) {
    if (any_port) port = impl_->NewPort();
    if (port == 0) return ResourceExhausted("no free port");
    if (impl_->listeners.count(port) != 0) {
      return AlreadyExists("port " + std::to_string(port) + " is already listened on");
    }
    if (impl_->options.listen_hook) {
      Status claimed = impl_->options.listen_hook(port, true);
      if (!claimed.ok()) {
        if (any_port && claimed.code() == StatusCode::kAlreadyExists) continue;
        return claimed;
      }
    }
    Impl::Listener listener;
    listener.tag = tag;
    listener.backlog = backlog == 0 ? kCmDefaultBacklog : std::min(backlog, kCmMaxBacklog);
    impl_->listeners.emplace(port, listener);
    return port;
  }
  return ResourceExhausted("no free port on the host");
}

Status ConnectionManager::StopListening(uint16_t port) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->listeners.erase(port) == 0) return NotFound("nobody listens on port " + std::to_string(port));
  if (impl_->options.listen_hook) {
    Status released = impl_->options.listen_hook(port, false);
    (void)released;  // the daemon forgets it with the process anyway
  }
  return Status::Ok();
}

namespace {
Status CheckQp(const CmQpParams& params) {
  if (params.qp == nullptr) return InvalidArgument("no QP");
  if (params.qp->type != IBV_QPT_RC) return InvalidArgument("the CM connects RC QPs");
  // RESET, or INIT when its owner posts receives before the connection.
  const ibv_qp_state state = params.qp->state.load(std::memory_order_acquire);
  if (state != IBV_QPS_RESET && state != IBV_QPS_INIT) {
    return FailedPrecondition("the QP must be in RESET or INIT");
  }
  if (params.retry_count > 7 || params.rnr_retry_count > 7 || params.local_ack_timeout > 31 ||
      params.min_rnr_timer > 31) {
    return InvalidArgument("retry counts are 3 bits, timers 5 bits");
  }
  if (MtuBytes(params.max_mtu) == 0) return InvalidArgument("max_mtu is not an IB MTU");
  return Status::Ok();
}
}  // namespace

Status ConnectionManager::Accept(CmConnectionId request, const CmAcceptParams& params, uint64_t tag) {
  const ActivityNotice notice(impl_->options.activity_hook);
  Impl& m = *impl_;
  // The QP's path needs the peer's MAC in the neighbour table (ModifyQp
  // resolves a missing one, ARP/ND, and may wait seconds): resolve first,
  // in the caller's thread without our lock, so that Poll goes on.
  Gid peer{};
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    Impl::Connection* c = m.Find(request);
    if (c != nullptr && !c->active) peer = c->peer.gid;
  }
  bool resolved = true;
  MacAddress mac;
  if (peer != Gid{} && !m.engine->LookupNeighbor(peer, &mac)) {
    ibv_ah_attr attr;
    resolved = false;
    if (m.AhAttrFor(peer, &attr)) {
      auto ah = m.engine->CreateAh(m.pd, attr);
      if (ah.ok()) (void)m.engine->DestroyAh(*ah);
      resolved = m.engine->LookupNeighbor(peer, &mac);
    }
  }
  std::lock_guard<std::mutex> lock(m.mutex);
  Impl::Connection* c = m.Find(request);
  if (c == nullptr || c->active) return NotFound("no such connection request");
  if (c->state != State::kReqReceived) return FailedPrecondition("the request was answered or withdrawn");
  UROCE_RETURN_IF_ERROR(CheckQp(params));
  if (params.private_data.size() > kCmRepPrivateDataSize) return InvalidArgument("REP private data too long");
  if (!resolved || c->peer.gid != peer) {
    m.LeaveBacklog(*c);
    m.SendRej(c->peer.gid, c->peer_mac, c->transaction_id, c->local_id, c->remote_id, CmMessageKind::kReq,
              kRejNoResources, nullptr, 0);
    Impl::MoveTo(*c, State::kClosed);
    return Unavailable("the caller's address does not resolve (ARP/ND): rejected");
  }

  const CmReq& req = c->req;
  // The REP cannot carry an MTU (IBTA 12.6.8): the REQ's is the path's. If we
  // cannot take it, say so (REJ "invalid path MTU") rather than connect two
  // QPs that would refuse each other's packets.
  const ibv_mtu ours = std::min(params.max_mtu, m.port_mtu);
  if (static_cast<int>(req.path_mtu) > static_cast<int>(ours)) {
    m.LeaveBacklog(*c);
    m.SendRej(c->peer.gid, c->peer_mac, c->transaction_id, c->local_id, c->remote_id, CmMessageKind::kReq, kRejInvalidPathMtu,
              nullptr, 0);
    Impl::MoveTo(*c, State::kClosed);
    return InvalidArgument("the caller's path MTU is above this side's max_mtu / port MTU: rejected");
  }
  c->mtu = static_cast<ibv_mtu>(req.path_mtu);
  c->qp = params.qp;
  c->qpn = params.qp->qpn;
  c->params = params;
  c->tag = tag;
  const QpLimits limits = m.engine->limits();
  const uint8_t responder_resources =
      std::min({params.responder_resources, req.initiator_depth, limits.max_dest_rd_atomic});
  const uint8_t initiator_depth = std::min({params.initiator_depth, req.responder_resources, limits.max_rd_atomic});
  const uint32_t psn = m.NewPsn();
  Status s = m.ToInit(params.qp, params.access_flags);
  // Retry and RNR retry counts: what the REQ asks of us (IBTA 12.6.5).
  if (s.ok()) {
    // The REQ's Starting PSN is where our send queue starts, the REP's
    // (ours) where our receive queue does (see HandleRep).
    s = m.ToRtrRts(*c, psn, req.starting_psn, responder_resources, initiator_depth, req.retry_count,
                   req.rnr_retry_count);
  }
  if (!s.ok()) {
    m.LeaveBacklog(*c);
    m.ToError(*c);
    m.SendRej(c->peer.gid, c->peer_mac, c->transaction_id, c->local_id, c->remote_id, CmMessageKind::kReq, kRejNoResources,
              nullptr, 0);
    Impl::MoveTo(*c, State::kClosed);
    return s;
  }
  CmMad mad = m.MadFor(*c);
  CmRep rep;
  rep.local_comm_id = c->local_id;
  rep.remote_comm_id = c->remote_id;
  rep.local_qpn = params.qp->qpn;
  rep.starting_psn = psn;
  rep.responder_resources = responder_resources;
  rep.initiator_depth = initiator_depth;
  rep.target_ack_delay = kTargetAckDelay;
  rep.rnr_retry_count = params.rnr_retry_count;
  rep.srq = params.qp->srq != nullptr;
  rep.local_ca_guid = m.ca_guid;
  std::copy(params.private_data.begin(), params.private_data.end(), rep.private_data.begin());
  mad.message = rep;
  m.LeaveBacklog(*c);
  Impl::MoveTo(*c, State::kRepSent);
  // The REP is both what we wait an RTU for and the answer to a duplicate REQ.
  // The caller said how long its CM may take to answer (the REQ's Local CM
  // Response Timeout, 4.096 us * 2^t, IBTA 12.7.24; the kernel's rdma_cm
  // sends 20, ~4.3 s) and how often to try (Max CM Retries): wait that long
  // for the RTU, resending the REP at least every second, rather than our
  // own 50 ms * max_retries, which a slow peer (rxe under qemu) outlasts.
  const uint64_t peer_ns = uint64_t{4096} << std::min<uint8_t>(c->req.local_cm_response_timeout, 31);
  const uint64_t resend_ns = std::clamp<uint64_t>(peer_ns, m.options.response_timeout_ns, 1'000'000'000);
  const int retries = std::max<int>(static_cast<int>(m.options.max_retries), c->req.max_cm_retries);
  m.SendAndWait(*c, mad, resend_ns, retries);
  c->answer = c->outstanding;
  c->have_answer = true;
  return Status::Ok();
}

Status ConnectionManager::Reject(CmConnectionId request, const uint8_t* private_data, size_t length) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  Impl::Connection* c = m.Find(request);
  if (c == nullptr || c->active) return NotFound("no such connection request");
  if (c->state != State::kReqReceived) return FailedPrecondition("the request was answered or withdrawn");
  if (length > kCmRejPrivateDataSize || (length > 0 && private_data == nullptr)) {
    return InvalidArgument("REJ private data too long");
  }
  CmMad mad = m.MadFor(*c);
  CmRej rej;
  rej.local_comm_id = c->local_id;
  rej.remote_comm_id = c->remote_id;
  rej.message_rejected = CmMessageKind::kReq;
  rej.reason = kRejConsumer;
  if (length > 0) std::memcpy(rej.private_data.data(), private_data, length);
  mad.message = rej;
  m.LeaveBacklog(*c);
  Impl::MoveTo(*c, State::kClosed);
  m.SendAnswer(*c, mad);  // repeated for a duplicate REQ
  return Status::Ok();
}

StatusOr<CmConnectionId> ConnectionManager::Connect(const CmConnectParams& params, uint64_t tag) {
  const ActivityNotice notice(impl_->options.activity_hook);
  Impl& m = *impl_;
  // The peer's MAC, resolved (ARP/ND) here in the caller's thread and
  // without our lock: a peer that does not answer costs the caller the
  // resolver's timeout, never Poll (which would otherwise wait on every
  // resend, with every other connection set-up of the process behind it).
  MacAddress peer_mac = params.remote_mac;
  if (!params.has_remote_mac && !m.engine->LookupNeighbor(params.remote.gid, &peer_mac)) {
    ibv_ah_attr attr;
    if (!m.AhAttrFor(params.remote.gid, &attr)) {
      return InvalidArgument("this port has no address of the remote address's IP version");
    }
    auto ah = m.engine->CreateAh(m.pd, attr);
    if (!ah.ok()) return Unavailable("the peer's address does not resolve: " + ah.status().ToString());
    (void)m.engine->DestroyAh(*ah);
    if (!m.engine->LookupNeighbor(params.remote.gid, &peer_mac)) {
      return Unavailable("the peer's address does not resolve");
    }
  }
  std::lock_guard<std::mutex> lock(m.mutex);
  UROCE_RETURN_IF_ERROR(CheckQp(params));
  if (params.private_data.size() > kCmReqUserDataSize) return InvalidArgument("REQ private data too long");
  Gid local = params.local_gid;
  if (local == Gid{}) {
    if (!m.LocalGidFor(params.remote.gid, &local)) {
      return InvalidArgument("this port has no address of the remote address's IP version");
    }
  } else if (m.GidIndex(local) < 0) {
    return InvalidArgument("local_gid is not in the engine's GID table");
  } else if (IsIpv4MappedGid(local) != IsIpv4MappedGid(params.remote.gid)) {
    return InvalidArgument("local_gid and the remote address are of different IP versions");
  }
  Impl::Connection c;
  c.local_id = m.NewLocalId();
  c.active = true;
  c.tag = tag;
  c.local = {local, params.local_port ? params.local_port : m.NewPort()};
  c.peer = params.remote;
  c.qp = params.qp;
  c.qpn = params.qp->qpn;
  c.params = params;
  c.peer_mac = peer_mac;
  c.mtu = std::min(params.max_mtu, m.port_mtu);
  c.transaction_id = (uint64_t{m.tid_high} << 32) | c.local_id;
  UROCE_RETURN_IF_ERROR(m.ToInit(params.qp, params.access_flags));

  const QpLimits limits = m.engine->limits();
  CmReq& req = c.req;
  req.local_comm_id = c.local_id;
  req.service_id = IpServiceId(params.remote.port);
  req.local_ca_guid = m.ca_guid;
  req.local_qpn = params.qp->qpn;
  req.responder_resources = std::min(params.responder_resources, limits.max_dest_rd_atomic);
  req.initiator_depth = std::min(params.initiator_depth, limits.max_rd_atomic);
  req.remote_cm_response_timeout = TimeoutExponent(m.options.response_timeout_ns);
  req.local_cm_response_timeout = req.remote_cm_response_timeout;
  req.transport_service_type = 0;  // RC
  req.starting_psn = m.NewPsn();
  req.retry_count = params.retry_count;
  req.partition_key = 0xFFFF;
  req.path_mtu = static_cast<uint8_t>(c.mtu);
  req.rnr_retry_count = params.rnr_retry_count;
  req.max_cm_retries = static_cast<uint8_t>(std::min(m.options.max_retries, 15u));
  req.srq = params.qp->srq != nullptr;
  // RoCE path as rdma_cm over rxe fills it: permissive LIDs, the IP
  // addresses as GIDs, hop limit 64 (rping_rdma_cm.pcap).
  req.primary.local_lid = 0xFFFF;
  req.primary.remote_lid = 0xFFFF;
  req.primary.local_gid = local;
  req.primary.remote_gid = params.remote.gid;
  req.primary.hop_limit = 64;
  req.primary.local_ack_timeout = params.local_ack_timeout;
  IpCmHeader ip;
  ip.ip_version = IsIpv4MappedGid(local) ? 4 : 6;
  ip.source_port = c.local.port;
  ip.source_ip = local;
  ip.destination_ip = params.remote.gid;
  (void)EncodeIpCmHeader(ip, req.private_data.data());
  std::copy(params.private_data.begin(), params.private_data.end(), req.private_data.begin() + kIpCmHeaderBytes);

  Impl::MoveTo(c, State::kReqSent);
  auto& stored = m.connections[c.local_id] = c;
  CmMad mad = m.MadFor(stored);
  mad.message = req;
  m.SendAndWait(stored, mad);
  return stored.local_id;
}

Status ConnectionManager::Disconnect(CmConnectionId id) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  Impl::Connection* c = m.Find(id);
  if (c == nullptr) return NotFound("no such connection");
  switch (c->state) {
    case State::kEstablished:
    case State::kRepSent: {
      m.ToError(*c);
      CmMad mad = m.MadFor(*c);
      CmDreq dreq;
      dreq.local_comm_id = c->local_id;
      dreq.remote_comm_id = c->remote_id;
      dreq.remote_qpn = c->remote_qpn;
      mad.message = dreq;
      Impl::MoveTo(*c, State::kDreqSent);
      m.SendAndWait(*c, mad);
      return Status::Ok();
    }
    case State::kReqSent:
      // Giving up on a connect: REJ the REQ (as the kernel's CM does when a
      // connecting ID is destroyed) and end at once.
      c->waiting = false;
      m.ToError(*c);
      m.SendRej(c->peer.gid, c->peer_mac, c->transaction_id, c->local_id, 0, CmMessageKind::kReq, kRejTimeout,
                nullptr, 0);
      Impl::MoveTo(*c, State::kClosed);
      m.Emit(*c, CmEventType::kDisconnected);
      return Status::Ok();
    case State::kReqReceived:
      return FailedPrecondition("a request is answered with Accept or Reject");
    default:
      return FailedPrecondition("the connection has ended");
  }
}

bool ConnectionManager::PeerGone(uint32_t qpn, uint32_t remote_qpn) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  for (auto& [id, c] : m.connections) {
    if (c.qpn != qpn || c.remote_qpn != remote_qpn) continue;
    switch (c.state) {
      case State::kRepSent:
      case State::kEstablished:
      case State::kDreqSent:
        c.waiting = false;
        m.ToError(c);
        Impl::MoveTo(c, State::kTimewait);
        m.Emit(c, CmEventType::kDisconnected);
        return true;
      default:
        break;
    }
  }
  return false;
}

void ConnectionManager::Release(CmConnectionId id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  auto it = m.connections.find(id);
  if (it == m.connections.end()) return;
  m.Erase(it);
}

bool ConnectionManager::Poll() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  const uint64_t received = m.counters.mads_received + m.counters.mads_dropped;
  m.DrainCompletions();
  m.RunTimers();
  if (received != m.counters.mads_received + m.counters.mads_dropped || !m.events.empty()) return true;
  for (const auto& [id, c] : m.connections) {
    if (c.waiting) return true;
  }
  return false;
}

bool ConnectionManager::NextEvent(CmEvent* event) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->events.empty()) return false;
  *event = std::move(impl_->events.front());
  impl_->events.pop_front();
  return true;
}

CmCounters ConnectionManager::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counters;
}

CmStateSizes ConnectionManager::state_sizes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  CmStateSizes sizes;
  sizes.connections = impl_->connections.size();
  for (const auto& [port, count] : impl_->pending_by_port) sizes.pending_requests += count;
  sizes.events = impl_->events.size();
  sizes.address_handles = impl_->address_handles.size();
  return sizes;
}

}  // namespace uroce::cm
