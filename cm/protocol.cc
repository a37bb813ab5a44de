// The IB CM protocol (IBTA 12.6, 12.9) of the connection manager
// (cm/connection_manager_impl.h): REQ, REP, RTU, REJ, MRA, DREQ and DREP,
// the connection states they move (cm/cm_state.h), resends and timeouts.
#include <algorithm>
#include <cstring>
#include <string>

#include "cm/connection_manager_impl.h"
#include "transport/qp_state.h"

namespace uroce::cm {
namespace {

template <size_t N>
std::vector<uint8_t> ToVector(const std::array<uint8_t, N>& a, size_t from = 0) {
  return std::vector<uint8_t>(a.begin() + from, a.end());
}

}  // namespace

void ConnectionManager::Impl::SendAndWait(Connection& c, const CmMad& mad, uint64_t resend_ns, int retries,
                                          uint64_t max_resend_ns) {
  EncodeCmMad(mad, c.outstanding.data());
  c.waiting = true;
  c.retries_left = retries < 0 ? options.max_retries : static_cast<unsigned>(retries);
  c.resend_ns = resend_ns != 0 ? resend_ns : options.response_timeout_ns;
  c.max_resend_ns = std::max(c.resend_ns, max_resend_ns);
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
  // A port still being claimed (Listen) is not listened on yet.
  if (listener == listeners.end() || !listener->second.claimed) return reject(kRejInvalidServiceId);
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
      c.resend_ns = std::min(c.resend_ns * 2, c.max_resend_ns);
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

}  // namespace uroce::cm
