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
#include <cstring>
#include <optional>
#include <string>

#include "cm/connection_manager_impl.h"
#include "transport/qp_state.h"

namespace uroce::cm {
namespace {

// 4.096 us * 2^x >= ns (IBTA 12.6.5 "CM Response Timeout").
uint8_t TimeoutExponent(uint64_t ns) {
  uint8_t x = 0;
  while (x < 31 && (4096ull << x) < ns) ++x;
  return x;
}

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
  // The claim (listen_hook: a request to the host's daemon) can wait
  // seconds for a daemon that gets no CPU: it is made without the CM's
  // mutex, so that the CM thread goes on answering peers meanwhile. The port
  // is held by an unclaimed listener until then: taken for NewPort and
  // Listen, refused to requests (kRejInvalidServiceId).
  std::lock_guard<std::mutex> listening(impl_->listen_mutex);
  const bool any_port = port == 0;
  // A port taken by another process on the host (listen_hook) is taken:
  // with port 0, try a few others.
  for (int tries = 0; tries < (any_port ? 16 : 1); ++tries) {
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      if (any_port) port = impl_->NewPort();
      if (port == 0) return ResourceExhausted("no free port");
      if (impl_->listeners.count(port) != 0) {
        return AlreadyExists("port " + std::to_string(port) + " is already listened on");
      }
      Impl::Listener listener;
      listener.tag = tag;
      listener.backlog = backlog == 0 ? kCmDefaultBacklog : std::min(backlog, kCmMaxBacklog);
      listener.claimed = !impl_->options.listen_hook;
      impl_->listeners.emplace(port, listener);
      if (listener.claimed) return port;
    }
    const Status claimed = impl_->options.listen_hook(port, true);
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->listeners.find(port);  // still there: listen_mutex
    if (claimed.ok()) {
      it->second.claimed = true;
      return port;
    }
    impl_->listeners.erase(it);
    if (any_port && claimed.code() == StatusCode::kAlreadyExists) continue;
    return claimed;
  }
  return ResourceExhausted("no free port on the host");
}

Status ConnectionManager::StopListening(uint16_t port) {
  const ActivityNotice notice(impl_->options.activity_hook);
  std::lock_guard<std::mutex> listening(impl_->listen_mutex);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->listeners.erase(port) == 0) return NotFound("nobody listens on port " + std::to_string(port));
  }
  if (impl_->options.listen_hook) {
    Status released = impl_->options.listen_hook(port, false);  // as Listen's claim: without the CM's mutex
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
  // and uroce send 20, ~4.3 s) and how often to try (Max CM Retries): the
  // REP is resent after response_timeout_ns, each wait twice the last up to
  // that (and to our own max_response_timeout_ns), so that a lost REP costs
  // 50 ms and a caller that does not run for seconds (rxe under qemu, a
  // starved process) is still waited for.
  const uint64_t peer_ns = uint64_t{4096} << std::min<uint8_t>(c->req.local_cm_response_timeout, 31);
  const uint64_t max_resend_ns = std::clamp<uint64_t>(peer_ns, m.options.response_timeout_ns,
                                                      std::max(m.options.response_timeout_ns,
                                                               m.options.max_response_timeout_ns));
  const int retries = std::max<int>(static_cast<int>(m.options.max_retries), c->req.max_cm_retries);
  m.SendAndWait(*c, mad, m.options.response_timeout_ns, retries, max_resend_ns);
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
  // The longest we wait for an answer (IBTA 12.7.24): the passive side keeps
  // the request for that times 1 + Max CM Retries, and waits as long for our
  // RTU.
  req.remote_cm_response_timeout =
      TimeoutExponent(std::max(m.options.response_timeout_ns, m.options.max_response_timeout_ns));
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
  m.SendAndWait(stored, mad, m.options.response_timeout_ns, -1, m.options.max_response_timeout_ns);
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
