// Responder (IBTA vol. 1, 9.7.5.1 "Responder side"): checks each request's PSN
// (new, duplicate or ahead), its opcode sequence, and its rkey, bounds, access
// and PD before any byte moves; places SEND and WRITE data; answers READs
// (from memory, also when asked again) and atomics (replayed from a result
// cache when duplicated); sends coalesced ACKs and NAKs. UD receives place the
// 40-byte GRH in front of the data (IBTA 11.4.1.1, RoCEv2 A17.4.5.2).
//
// Engine thread only.
#include "transport/responder.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "transport/link_ack.h"
#include "transport/on_demand_memory.h"
#include "transport/opcode.h"
#include "transport/pull_descriptor.h"

namespace uroce::transport {
namespace {

// The largest message (ibv_query_device max_msg_sz, 2^31): a RETH asking for
// more is an invalid request, whatever its key.
constexpr uint64_t kMaxMessageBytes = 1ull << 31;

bool IsSend(Operation op) { return op == Operation::kSend; }

// The AETH carries the MSN in 24 bits (IBTA 9.3.5), counted modulo 2^24:
// the responder's count goes on past 2^24 messages, the field wraps (the
// builder refuses a wider value, which once made every ACK after the
// 16,777,216th message of a connection unbuildable).
uint32_t AethMsn(uint32_t messages) { return messages & 0xFFFFFF; }

// A READ response job names the region by key and address (checked again for
// every packet), never by a pointer.
ReadResponseJob ReadJob(Psn psn, const RethFields& reth, bool duplicate) {
  ReadResponseJob job;
  job.next_psn = psn;
  job.first_psn = psn;
  job.rkey = reth.rkey;
  job.virtual_address = reth.virtual_address;
  job.length = reth.dma_length;
  job.duplicate = duplicate;
  return job;
}

ReadResponseJob AtomicJob(Psn psn, uint64_t original, bool duplicate) {
  ReadResponseJob job;
  job.next_psn = psn;
  job.first_psn = psn;
  job.atomic = true;
  job.original = original;
  job.duplicate = duplicate;
  return job;
}

// What a UD receive completion carries in wc.sl on a RoCE NIC. IBTA A17.4.5.1:
// for RoCEv2 a UD completion tells the receiver whether the frame was IPv4 or
// IPv6, so that it knows where in the 40-byte GRH area the addresses are.
// Verbs has no field for it; RoCE NICs put it in sl (mlx5: bit 3 "UDP header
// present", bits 2:0 the L3 type, 1 IPv6, 2 IPv4), and UCX's UD transport
// reads it there: with 0 it takes an IPv4 frame's addresses for IPv6 ones and
// drops every datagram.
constexpr uint8_t kSlUdpHeader = 0x8;
constexpr uint8_t kSlIpv6 = 0x1;
constexpr uint8_t kSlIpv4 = 0x2;

uint8_t UdNetworkTypeSl(IpVersion version) {
  return kSlUdpHeader | (version == IpVersion::kIpv4 ? kSlIpv4 : kSlIpv6);
}

// Responses (ACK, NAK, READ response, atomic ACK) use the opcodes of the
// connection's service: an XRC target's are RC's plus 0xA0 (IBTA table 38).
uint8_t ResponseBase(const QueuePair* qp) { return qp->type == IBV_QPT_XRC_RECV ? kXrcOpcodeBase : kRcOpcodeBase; }

}  // namespace

const char* ResponderStepName(ResponderStep step) {
  static constexpr const char* kNames[] = {"check_psn", "check_op_sequence", "check_length",
                                           "execute",   "acknowledge",       "done"};
  const auto i = static_cast<size_t>(step);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

Responder::Responder(EngineCore& core, Transmitter& tx, Completions& completions)
    : core_(core), tx_(tx), completions_(completions), rnr_storm_(core.config.rnr_storm_seed) {
  ack_list_.reserve(core.config.max_qps);
}

void Responder::ForgetQp(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  ack_list_.erase(std::remove(ack_list_.begin(), ack_list_.end(), qp), ack_list_.end());
}

void Responder::ListForAck(QueuePair* qp) {
  if (!qp->ack_listed) {
    qp->ack_listed = true;
    ack_list_.push_back(qp);
  }
}

void Responder::QueueAck(QueuePair* qp, Psn psn) {
  ResponderState& s = qp->resp;
  // A pending NAK already acknowledges everything before its PSN, and says
  // more (retry from here / wait / stop): it is not replaced by an ACK, unless
  // the responder has since accepted the very PSN it NAKed (the requester
  // resent it while the NAK waited for room): then the NAK is stale.
  if (s.ack_is_nak() && (s.pending_rank() == 3 || psn.DistanceFrom(s.ack_psn) < 0)) return;
  s.ack_pending = true;
  s.ack_psn = psn;
  s.ack_syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
  ListForAck(qp);
}

void Responder::QueueNak(QueuePair* qp, Psn psn, uint8_t syndrome) {
  ResponderState& s = qp->resp;
  // Every NAK of one poll names the PSN the responder waits for, so one is
  // enough: the one that says most.
  if (s.pending_rank() > ResponderState::AcknowledgeRank(syndrome)) return;
  s.ack_pending = true;
  s.ack_psn = psn;
  s.ack_syndrome = syndrome;
  ListForAck(qp);
}

// An acknowledgement packet (ACK, NAK or RNR NAK) for `psn`, staged now.
// False when no buffer or no room: the caller keeps it pending.
bool Responder::EmitAcknowledge(QueuePair* qp, Psn psn, uint8_t syndrome) {
  if (AethFields{syndrome, 0}.kind() == AethKind::kAck && AckInLink(qp, psn)) return true;
  PacketFields f;
  f.bth.opcode = static_cast<uint8_t>(ResponseBase(qp) + static_cast<uint8_t>(Opcode::kRcAcknowledge));
  f.bth.dest_qp = qp->attr.dest_qp_num;
  f.bth.psn = psn;
  f.aeth.syndrome = syndrome;
  f.aeth.msn = AethMsn(qp->resp.msn);
  if (qp->resp.selective) f.bth.reserved7 = kBthSelectiveRetransmission;
  uint8_t* unused = nullptr;
  rte_mbuf* m = tx_.StartPacket(qp->path, f, &unused);
  if (m == nullptr) return false;
  tx_.FinishPacket(m);
  qp->resp.ack_as_packet = false;  // it follows whatever went before it
  return true;
}

// A plain ACK as a word in the local link to the requester's process
// (transport/link_ack.h), when there is one and nothing sent before it
// could be overtaken by it: the store is seen at once, frames only once
// the stage goes to the port, so a word waits for an empty stage (the
// requester reads a word before the frames, and takes it once it has read
// every frame: what went to the port before the word is taken first).
bool Responder::AckInLink(QueuePair* qp, Psn psn) {
  ResponderState& s = qp->resp;
  PeerMemory* peer = core_.config.peer_memory;
  if (peer == nullptr || qp->type != IBV_QPT_RC || s.ack_as_packet || !tx_.StageEmpty()) return false;
  const uint32_t requester = qp->attr.dest_qp_num;
  if (!s.link_ack_owned) {
    // The entry is the requester QPN's, shared by every QP of ours whose
    // requester's QPN has the same low bits: taken only when free, already
    // this pair's, or left by a QP of ours that is gone or talks to
    // another requester now.
    uint64_t current = 0;
    if (!peer->ReadOwnLinkAck(requester, qp->path.dgid, requester, &current)) return false;
    const uint32_t pair = LinkAckPair(current);
    if (LinkAckValid(current) && pair != LinkAckPair(requester, qp->qpn)) {
      const QueuePair* holder = core_.LookupQp((qp->qpn & ~0xFFFFu) | (pair >> 16));
      if (holder != nullptr && holder != qp && (holder->attr.dest_qp_num & 0xFFFF) == (pair & 0xFFFF)) return false;
    }
  }
  if (!peer->WriteLinkAck(requester, qp->path.dgid, requester, LinkAckWord(requester, qp->qpn, psn, s.selective))) {
    return false;
  }
  s.link_ack_owned = true;
  core_.counters.link_acks_sent++;
  return true;
}

void Responder::NoteCongestionExperienced(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  core_.counters.rx_ce_marked++;
  const uint64_t interval = core_.config.congestion.cnp_interval_ns;
  if (interval == 0) return;
  const uint64_t now = core_.Now();
  if (now < qp->next_cnp_ns) return;
  // Annex A17.9.3: BTH opcode CNP, the peer's QP, BECN set, PSN 0, then 16
  // reserved bytes. It is not ECN-capable itself (a CNP is never marked),
  // and it leaves with its own DSCP (CongestionConfig::cnp_dscp).
  PacketFields f;
  f.bth.opcode = static_cast<uint8_t>(Opcode::kCnp);
  f.bth.dest_qp = qp->attr.dest_qp_num;
  f.bth.reserved_byte4 = kBthBecn;
  f.payload_length = 16;
  PathInfo path = qp->path;
  path.traffic_class = static_cast<uint8_t>(core_.config.congestion.cnp_dscp << 2);
  uint8_t* reserved = nullptr;
  rte_mbuf* m = tx_.StartPacket(path, f, &reserved);
  if (m == nullptr) return;  // no room now: the next marked packet asks again
  std::memset(reserved, 0, 16);
  tx_.FinishPacket(m);
  qp->next_cnp_ns = now + interval;
  qp->counters.cnps_sent++;
  core_.counters.cnps_sent++;
}

void Responder::SendNak(QueuePair* qp, Psn psn, NakCode code) {
  QueueNak(qp, psn, AethFields::Syndrome(AethKind::kNak, static_cast<uint8_t>(code)));
}

bool Responder::RnrStorm() {
  // Receiver not ready although a receive is posted: the requester's RNR
  // retry (IBTA 9.7.5.2.8, rnr_retry and min_rnr_timer) is what runs, as
  // when the application posts its receives late.
  if (core_.config.rnr_storm <= 0 || !rnr_storm_.Chance(core_.config.rnr_storm)) return false;
  core_.counters.rnr_storm_naks++;
  return true;
}

void Responder::SendRnrNak(QueuePair* qp, Psn psn) {
  // Receiver not ready (IBTA 9.7.5.1.4): RNR NAK with our timer. NAKs are
  // counted when they leave (SendPendingAcks): a storm of SENDs makes one per
  // poll.
  QueueNak(qp, psn, AethFields::Syndrome(AethKind::kRnrNak, qp->attr.min_rnr_timer));
}

// Class C/D responder errors (IBTA 9.9.3.1): NAK, then the QP enters ERR.
void Responder::ResponderFatal(QueuePair* qp, Psn psn, NakCode code, ibv_wc_status recv_status) {
  SendNak(qp, psn, code);
  ResponderState& s = qp->resp;
  if (s.have_recv) {
    completions_.CompleteRecv(
        qp, s.recv,
        {.status = recv_status, .vendor_err = recv_status == IBV_WC_LOC_LEN_ERR ? s.length_overflow : 0});
    s.have_recv = false;
  }
  s.write_in_progress = false;
  completions_.EnterError(qp);
}

void Responder::SendPendingAcks() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  size_t kept = 0;
  for (QueuePair* qp : ack_list_) {
    ResponderState& s = qp->resp;
    // A sequence or RNR NAK that waited while the responder accepted its PSN
    // (the requester resent it) would make the requester go back, or spend
    // an RNR retry, for nothing: it becomes the ACK of what arrived.
    const int rank = s.pending_rank();
    if ((rank == 1 || rank == 2) && s.expected_psn.DistanceFrom(s.ack_psn) > 0) {
      s.ack_psn = s.expected_psn - 1;
      s.ack_syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
    }
    // An ACK must not overtake READ or atomic responses still queued: the
    // requester would take it as a sign they were lost. Without room (or a
    // buffer) it waits for the next poll.
    if (s.ack_pending && (s.reads_count > 0 || !EmitAcknowledge(qp, s.ack_psn, s.ack_syndrome))) {
      ack_list_[kept++] = qp;
      continue;
    }
    if (s.ack_pending) {
      const AethKind kind = AethFields{s.ack_syndrome, 0}.kind();
      if (kind == AethKind::kRnrNak) {
        qp->counters.rnr_naks_sent++;
        core_.counters.rnr_naks_sent++;
      } else if (kind == AethKind::kNak) {
        qp->counters.naks_sent++;
        core_.counters.naks_sent++;
      }
    }
    s.ack_pending = false;
    qp->ack_listed = false;
  }
  ack_list_.resize(kept);
}

// Copies `length` bytes at `offset` of the current receive request's buffers.
// False if they do not fit (a local length error) or a key is bad.
bool Responder::PlaceInRecv(QueuePair* qp, uint64_t offset, const uint8_t* data, uint32_t length,
                            ibv_wc_status* error) {
  const RecvWqe& w = qp->resp.recv;
  if (offset + length > w.total_length) {
    *error = IBV_WC_LOC_LEN_ERR;
    qp->resp.length_overflow = static_cast<uint32_t>(offset + length - w.total_length);
    return false;
  }
  uint32_t i = 0;
  while (i < w.num_sge && offset >= w.sge[i].length) offset -= w.sge[i++].length;
  while (length > 0 && i < w.num_sge) {
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(length, w.sge[i].length - offset));
    uint8_t* host = nullptr;
    // A bad key, or an implicit on-demand region's page that cannot be had
    // for writing: a local protection error (as an ODP NIC that cannot
    // resolve the receive buffer's page).
    const MrCheck how = core_.mrs.CheckLocal(w.sge[i].lkey, qp->resp.pd, w.sge[i].addr + offset, chunk,
                                             IBV_ACCESS_LOCAL_WRITE, &host);
    if (!MrGranted(how) || !MrWrite(how, host, data, chunk)) {
      *error = IBV_WC_LOC_PROT_ERR;
      return false;
    }
    data += chunk;
    length -= chunk;
    offset = 0;
    ++i;
  }
  return true;
}

void Responder::HandleUdReceive(QueuePair* qp, const PacketView& p) {
  // Q_Key check (IBTA 10.2.5): a mismatch drops the datagram silently.
  if (p.fields.deth.qkey != qp->attr.qkey) {
    core_.counters.rx_dropped++;
    return;
  }
  RecvWqe wqe;
  if (!completions_.TakeRecv(qp, &wqe)) {
    core_.counters.rx_dropped++;  // UD has no RNR: the datagram is lost
    return;
  }
  qp->resp.recv = wqe;
  qp->resp.have_recv = true;
  // The GRH: an IPv6 header as it arrived, or for IPv4 twenty zero bytes then
  // the IPv4 header (RoCEv2, IBTA A17.4.5.2).
  uint8_t grh[kGrhBytes] = {};
  if ((p.fields.ip_version == IpVersion::kIpv6)) {
    std::memcpy(grh, (p.frame + p.l3_offset), kGrhBytes);
  } else {
    std::memcpy(grh + 20, (p.frame + p.l3_offset), 20);
  }
  ibv_wc_status error = IBV_WC_SUCCESS;
  const bool ok = PlaceInRecv(qp, 0, grh, kGrhBytes, &error) &&
                  PlaceInRecv(qp, kGrhBytes, p.payload, p.fields.payload_length, &error);
  qp->resp.have_recv = false;
  if (!qp->ud_sources.empty()) {
    QueuePair::UdSource& source = qp->ud_sources[wqe.wr_id % qp->ud_sources.size()];
    source.wr_id = wqe.wr_id;
    source.mac = p.fields.src_mac;
  }
  unsigned flags = IBV_WC_GRH;
  uint32_t imm = 0;
  if (p.opcode->has(kImmDt)) {
    flags |= IBV_WC_WITH_IMM;
    imm = htonl(p.fields.immediate_data);
  }
  completions_.CompleteRecv(qp, wqe,
                            {.status = ok ? IBV_WC_SUCCESS : error,
                             .byte_len = ok ? kGrhBytes + p.fields.payload_length : 0,
                             .wc_flags = flags,
                             .imm_or_rkey = imm,
                             .src_qp = p.fields.deth.src_qp,
                             .vendor_err = !ok && error == IBV_WC_LOC_LEN_ERR ? qp->resp.length_overflow : 0,
                             .sl = UdNetworkTypeSl(p.fields.ip_version)});
}

// A request whose PSN is behind the expected one (IBTA 9.7.5.1.1).
void Responder::HandleDuplicate(QueuePair* qp, const PacketView& p) {
  ResponderState& s = qp->resp;
  qp->counters.duplicates++;
  core_.counters.duplicates++;
  const Operation op = p.opcode->operation;
  if (op == Operation::kRdmaReadRequest || op == Operation::kCompareSwap || op == Operation::kFetchAdd ||
      op == Operation::kAtomicWrite) {
    // Already answering this very request: the copy adds nothing.
    for (uint32_t i = 0; i < s.reads_count; ++i) {
      if (s.reads[(s.reads_head + i) % s.reads.size()].first_psn.value() == p.fields.bth.psn.value()) return;
    }
    // The requester went back to this PSN (go-back-N) and sends every later
    // request again: queued responses for later PSNs are dropped, so that
    // copies never take the room new READs are owed (IBTA o9-20.2). A
    // selective requester asks for this one alone and nothing later again.
    for (uint32_t i = 0; i < s.reads_count && !s.selective; ++i) {
      if (s.reads[(s.reads_head + i) % s.reads.size()].first_psn.DistanceFrom(p.fields.bth.psn) > 0) {
        for (uint32_t k = i; k < s.reads_count; ++k) {
          if (s.reads[(s.reads_head + k) % s.reads.size()].duplicate) --s.duplicate_jobs;
        }
        s.reads_count = i;
        break;
      }
    }
  }
  if (op == Operation::kRdmaReadRequest) {
    HandleDuplicateRead(qp, p);
    return;
  }
  if (op == Operation::kCompareSwap || op == Operation::kFetchAdd) {
    // The same access rule as a new atomic: revoked access replays nothing.
    if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) == 0) {
      core_.counters.rx_dropped++;
      return;
    }
    const AtomicEthFields& request = p.fields.atomic_eth;
    for (const AtomicReplay& a : s.atomics) {
      if (a.valid && a.psn.value() == p.fields.bth.psn.value()) {
        // The duplicate must be the request (same key and address), and the
        // region must still allow it (docs/architecture.md, "Untrusted input":
        // every duplicate passes the checks of the first); otherwise it earns
        // nothing.
        uint8_t* host = nullptr;
        if (request.rkey != a.rkey || request.virtual_address != a.virtual_address ||
            !MrGranted(core_.mrs.CheckRemote(a.rkey, qp->resp.pd, a.virtual_address, 8, IBV_ACCESS_REMOTE_ATOMIC,
                                             &host, qp->qpn))) {
          core_.counters.rx_dropped++;
          return;
        }
        EnqueueResponse(qp, AtomicJob(p.fields.bth.psn, a.original, /*duplicate=*/true));
        return;
      }
    }
    return;  // too old to replay: the requester's retry will fail it
  }
  if (op == Operation::kAtomicWrite) {
    // Answered again (its zero-length READ response), never stored again: a
    // later write to the word may have landed since. Only if the request
    // still passes the checks of the first (docs/architecture.md, "Untrusted
    // input"); otherwise nothing.
    const RethFields& reth = p.fields.reth;
    uint8_t* host = nullptr;
    if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0 || reth.dma_length != 8 ||
        (reth.virtual_address & 7) != 0 ||
        core_.mrs.CheckRemote(reth.rkey, qp->resp.pd, reth.virtual_address, 8, IBV_ACCESS_REMOTE_WRITE, &host,
                              qp->qpn) != MrCheck::kOk) {
      core_.counters.rx_dropped++;
      return;
    }
    EnqueueResponse(qp, ReadJob(p.fields.bth.psn, RethFields{reth.virtual_address, reth.rkey, 0}, /*duplicate=*/true));
    return;
  }
  // SEND / WRITE: acknowledge again, with the newest PSN (IBTA o9-20). As a
  // packet: the requester may not take a word equal to one it saw before
  // (transport/link_ack.h), and a duplicate is what it sends when it did not.
  s.ack_as_packet = true;
  QueueAck(qp, s.expected_psn - 1);
}

// The QP allows remote reads and the key covers the whole range (IBTA
// 9.7.5.1.3 / 10.6.3.1), for a new READ and a replayed one alike.
bool Responder::RemoteReadAllowed(const QueuePair* qp, const RethFields& reth) const {
  if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0) return false;
  uint8_t* host = nullptr;
  // An implicit on-demand region passes: its pages are found (or not, a
  // NAK then) as each response packet reads them.
  return reth.dma_length == 0 || MrGranted(core_.mrs.CheckRemote(reth.rkey, qp->resp.pd, reth.virtual_address,
                                                                 reth.dma_length, IBV_ACCESS_REMOTE_READ, &host, qp->qpn));
}

// A duplicate READ request (IBTA 9.7.5.1.1): answered again only if it is
// (the rest of) a READ this responder accepted and remembers, with the same
// key, address and length, and only after every check a new READ passes. A
// PSN nobody remembers is dropped without an answer, so a guessed key earns
// nothing; a remembered PSN with other parameters is an invalid request.
//
// A selective requester (docs/transport.md, "Selective retransmission") may
// ask for a run inside the READ, whole MTUs or up to its end, and may ask on
// a timer for what is merely slow: a copy the region no longer allows (the
// application deregistered it after the first answer completed) is dropped,
// not a failure of the connection.
void Responder::HandleDuplicateRead(QueuePair* qp, const PacketView& p) {
  ResponderState& s = qp->resp;
  const Psn psn = p.fields.bth.psn;
  const RethFields& reth = p.fields.reth;
  // Newest first, and only records the PSN window has not left behind (a
  // record 2^22 PSNs old could otherwise shadow a newer one after a wrap).
  const ReadRecord* record = nullptr;
  const uint32_t n = static_cast<uint32_t>(s.read_history.size());
  for (uint32_t k = 1; k <= n && record == nullptr; ++k) {
    const ReadRecord& r = s.read_history[(s.read_history_next + n - k) % n];
    const int32_t age = s.expected_psn.DistanceFrom(r.first_psn);
    if (r.valid && age > 0 && age < (1 << 22) && psn.DistanceFrom(r.first_psn) >= 0 &&
        uint32_t(psn.DistanceFrom(r.first_psn)) < r.packets) {
      record = &r;
    }
  }
  if (record == nullptr) {
    core_.counters.rx_dropped++;
    return;
  }
  const uint64_t skipped = uint64_t(psn.DistanceFrom(record->first_psn)) * qp->mtu_bytes;
  if (reth.rkey != record->rkey) {
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return;
  }
  const uint64_t rest = skipped > record->length ? 0 : record->length - skipped;
  const bool whole_rest = reth.dma_length == rest;
  const bool selective_run = s.selective && reth.dma_length > 0 && reth.dma_length < rest &&
                             reth.dma_length % qp->mtu_bytes == 0;
  if (skipped > record->length || reth.virtual_address != record->virtual_address + skipped ||
      !(whole_rest || selective_run)) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return;
  }
  if (!RemoteReadAllowed(qp, reth)) {
    if (s.selective) {
      core_.counters.rx_dropped++;
      return;
    }
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return;
  }
  EnqueueResponse(qp, ReadJob(psn, reth, /*duplicate=*/true));
}

// The queue holds max_dest_rd_atomic new requests (the requester may have no
// more outstanding, IBTA 9.7.5.1.3 / C9-136) plus as many answers to
// duplicates; duplicates never take the room new requests are owed.
bool Responder::EnqueueResponse(QueuePair* qp, ReadResponseJob job) {
  ResponderState& s = qp->resp;
  job.pd = s.pd;  // every response packet checks the key in the request's PD
  if (s.reads.empty() || s.reads_count >= s.reads.size()) return false;
  const uint32_t duplicate_room = static_cast<uint32_t>(s.reads.size() / 2);
  if (job.duplicate && s.duplicate_jobs >= duplicate_room) return false;
  if (!job.duplicate && s.reads_count - s.duplicate_jobs >= duplicate_room) return false;
  if (job.duplicate && s.selective) {
    // A selective requester waits for this run to fill a gap; the READ
    // streaming now resumes after it (its place is kept in its job), unless
    // this answer covers all it had left to send.
    if (!job.atomic) DropReadJobsCoveredBy(s, job);
    s.reads_head = (s.reads_head + static_cast<uint32_t>(s.reads.size()) - 1) % static_cast<uint32_t>(s.reads.size());
    s.reads[s.reads_head] = job;
  } else {
    s.reads[(s.reads_head + s.reads_count) % s.reads.size()] = job;
  }
  ++s.reads_count;
  core_.MarkBusy(qp);  // RunReadResponses sends it
  if (job.duplicate) ++s.duplicate_jobs;
  // The response acknowledges everything before it; a pending NAK still says
  // more and goes out after it.
  if (!s.ack_is_nak()) s.ack_pending = false;
  return true;
}

// Queued READ answers whose rest `job` sends again are dropped: the
// requester has asked for that rest, and once it has it the READ completes,
// after which its peer may deregister the region (its protocol's done
// message): a superseded answer streaming on would then read through a key
// that is gone, and fail the connection for data nobody waits for.
void Responder::DropReadJobsCoveredBy(ResponderState& s, const ReadResponseJob& job) {
  const uint32_t size = static_cast<uint32_t>(s.reads.size());
  uint32_t kept = 0;
  for (uint32_t i = 0; i < s.reads_count; ++i) {
    const ReadResponseJob k = s.reads[(s.reads_head + i) % size];
    const bool covered = !k.atomic && k.rkey == job.rkey && job.virtual_address <= k.virtual_address + k.offset &&
                         job.virtual_address + job.length >= k.virtual_address + k.length;
    if (covered) {
      if (k.duplicate) --s.duplicate_jobs;
      continue;
    }
    s.reads[(s.reads_head + kept) % size] = k;
    ++kept;
  }
  s.reads_count = kept;
}

// A request goes through the steps of ResponderStep in order, as in Linux
// rxe's responder (rxe_resp.c): each step either hands it to the next one or
// ends it (dropped, NAKed, or answered later by a READ response).
bool Responder::HandleRequest(QueuePair* qp, const PacketView& p, rte_mbuf* mbuf) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD) {
    core_.counters.rx_dropped++;
    return false;
  }
  if (qp->type == IBV_QPT_UD) {
    qp->resp.pd = qp->pd;
    HandleUdReceive(qp, p);
    return false;
  }
  ResponderState& s = qp->resp;
  if (IsReliable(qp->type)) {
    // Each request says whether its requester takes NAKs selectively; the
    // responder holds packets after a gap only for one that does.
    s.selective = core_.config.selective_retransmission &&
                  (p.fields.bth.reserved7 & kBthSelectiveRetransmission) != 0;
  }
  holdable_ = mbuf;
  held_ = false;
  RunRequest(qp, p);
  const bool kept = held_;
  holdable_ = nullptr;
  held_ = false;
  if (s.reorder != nullptr) DrainHeld(qp);
  return kept;
}

void Responder::RunRequest(QueuePair* qp, const PacketView& p) {
  qp->resp.pd = qp->pd;
  if (qp->type == IBV_QPT_XRC_RECV && !SelectXrcSrq(qp, p)) return;
  if (p.staged_link != 0) {
    RunStagedChunk(qp, p);
    return;
  }
  const Request r{qp, p, qp->resp, IsReliable(qp->type), p.fields.bth.psn, *p.opcode};
  ResponderStep step = ResponderStep::kCheckPsn;
  while (step != ResponderStep::kDone) step = RunStep(step, r);
}

// A staged chunk (transport/pull_descriptor.h): the packets it stands for,
// taken together, their data copied from the sender's payload area of the
// link it came by. Every step a packet passes, it passes: its PSN first (a
// duplicate or a chunk after a gap reads nothing), then the opcode
// sequence, then the length (whole MTUs but at a message's end, for the
// PSNs it spans), then the execution with every key, bounds and receive
// check, copying straight from the area into the application's memory.
// The area is shared with the sender, which may write it at any moment:
// the chunk's sequence is checked before the copy and again after it
// (StagedCopyIntact), and a chunk that was not what its descriptor said
// fails the QP, as a pull descriptor that names memory it may not does.
void Responder::RunStagedChunk(QueuePair* qp, const PacketView& p) {
  const OpcodeInfo& info = *p.opcode;
  const Request request{qp, p, qp->resp, /*rc=*/true, p.fields.bth.psn, info};
  if (CheckPsn(request) == ResponderStep::kDone) return;
  const uint32_t mtu = qp->mtu_bytes;
  StagedChunk chunk;
  if (!(info.operation == Operation::kRdmaWrite || IsSend(info.operation)) ||
      !ParseStagedChunk(p.payload, p.fields.payload_length, &chunk) ||
      (!info.ends_message() && chunk.length % mtu != 0)) {
    ResponderFatal(qp, request.psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return;
  }
  const uint8_t* data = core_.config.peer_memory->StagedData(p.staged_link, chunk.chunk, chunk.sequence, chunk.length);
  if (data == nullptr) {
    core_.counters.staged_failures++;
    ResponderFatal(qp, request.psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return;
  }
  PacketView view = p;
  view.payload = data;
  view.fields.payload_length = chunk.length;
  const Request r{qp, view, qp->resp, /*rc=*/true, request.psn, info};
  staged_ = &chunk;
  staged_link_ = p.staged_link;
  span_ = (chunk.length + mtu - 1) / mtu;
  ResponderStep step = ResponderStep::kCheckOpSequence;
  while (step != ResponderStep::kDone) step = RunStep(step, r);
  span_ = 1;  // a step that failed did not reach Acknowledge
  staged_ = nullptr;
}

bool Responder::StagedCopyIntact(QueuePair* qp, Psn psn) {
  if (staged_ == nullptr) return true;
  if (core_.config.peer_memory->StagedIntact(staged_link_, staged_->chunk, staged_->sequence)) {
    core_.counters.staged_received++;
    core_.counters.staged_bytes += staged_->length;
    return true;
  }
  core_.counters.staged_failures++;
  ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
  return false;
}

bool Responder::HoldAhead(QueuePair* qp, const PacketView& p, uint32_t distance) {
  ResponderState& s = qp->resp;
  // A staged chunk is read in order only: the sender holds it until then.
  if (holdable_ == nullptr || distance >= ReorderWindow::kSlots || p.staged_link != 0) return false;
  ReorderPool& pool = core_.reorder_pool;
  if (s.reorder == nullptr) s.reorder = pool.Acquire();
  if (s.reorder == nullptr) {
    core_.counters.reorder_full++;
    return false;
  }
  if (s.reorder->Holds(s.expected_psn + distance)) return false;  // a duplicate of one held
  const bool placed = PlaceWriteAhead(qp, p, distance);
  if (!pool.Hold(s.reorder, distance, s.expected_psn, placed ? nullptr : holdable_, p)) {
    core_.counters.reorder_full++;
    if (s.reorder->held() == 0) {
      pool.Give(s.reorder);
      s.reorder = nullptr;
    }
    return false;
  }
  held_ = !placed;
  qp->counters.held_packets++;
  core_.counters.held_packets++;
  if (placed) {
    qp->counters.placed_ahead++;
    core_.counters.placed_ahead++;
  }
  return true;
}

// A WRITE packet after a gap inside the message in progress: its data goes
// now where the message's RETH and the packet's PSN say (every packet before
// a message's last carries one MTU, CheckLength), and only its view is held
// (ReorderWindow). Only where its handling in order cannot differ: an RC QP,
// a Middle or Last without immediate (the immediate takes a receive in
// order), the length its place says, the key granting that range as plain
// memory now. Anything else is held whole. The held view still goes through
// every step in order, which checks the key again and fails the QP for
// anything the peer got wrong.
bool Responder::PlaceWriteAhead(QueuePair* qp, const PacketView& p, uint32_t distance) {
  const ResponderState& s = qp->resp;
  const OpcodeInfo& info = *p.opcode;
  if (qp->type != IBV_QPT_RC || !s.write_in_progress || info.operation != Operation::kRdmaWrite ||
      info.starts_message() || info.has(kImmDt) || (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
    return false;
  }
  const uint64_t mtu = qp->mtu_bytes;
  const uint64_t offset = uint64_t(distance) * mtu;  // from where the expected packet lands
  if (offset >= s.write_remaining) return false;    // a later message's
  const uint64_t rest = s.write_remaining - offset;
  const bool last = rest <= mtu;
  if (info.ends_message() != last || p.fields.payload_length != (last ? rest : mtu)) return false;
  uint8_t* dest = nullptr;
  if (core_.mrs.CheckRemote(s.write_rkey, s.pd, s.write_va + offset, p.fields.payload_length,
                            IBV_ACCESS_REMOTE_WRITE, &dest, qp->qpn) != MrCheck::kOk) {
    return false;
  }
  std::memcpy(dest, p.payload, p.fields.payload_length);
  return true;
}

void Responder::DrainHeld(QueuePair* qp) {
  ResponderState& s = qp->resp;
  ReorderPool& pool = core_.reorder_pool;
  PacketView view;
  uint32_t drained = 0;
  while (s.reorder != nullptr) {
    const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
    if (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD) break;
    rte_mbuf* m = nullptr;
    if (!pool.Take(s.reorder, s.expected_psn, &view, &m)) break;
    // Handled as if it arrived now: every check runs on it again (a placed
    // WRITE packet's data is where it goes already: PlaceWriteAhead).
    placed_ = m == nullptr;
    RunRequest(qp, view);
    placed_ = false;
    if (m != nullptr) rte_pktmbuf_free(m);
    ++drained;
  }
  // One ACK for the whole run handled (a coalesced ACK, IBTA 9.7.5.1): the
  // requester's window waits on it, and the run need not end with a packet
  // that asked for one.
  if (drained > 0) QueueAck(qp, s.expected_psn - 1);
  if (s.reorder == nullptr) return;
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  if (s.reorder->held() == 0 || (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD)) {
    core_.ReleaseHeldPackets(qp);
    return;
  }
  // Packets after the next gap are held: it is a loss of its own.
  if (!s.nak_sent) {
    s.nak_sent = true;
    SendNak(qp, s.expected_psn, NakCode::kPsnSequenceError);
  }
}

// An XRC target (IBTA annex A14, XRC): the XRCETH must name an XRC SRQ of the
// QP's XRC domain, and every packet of a message the SRQ that its first
// packet named; the request is then checked in that SRQ's PD and takes its
// receive from it. The number comes from the wire: it is looked up, never
// used as an index or a pointer. Anything else is an invalid request (NAK
// and the QP stops, as for RC's class J errors, IBTA 9.9.3.1) when it is the
// PSN the QP waits for; a duplicate or a packet ahead is only dropped, so a
// forged packet cannot stop the QP without its PSN.
bool Responder::SelectXrcSrq(QueuePair* qp, const PacketView& p) {
  ResponderState& s = qp->resp;
  SharedReceiveQueue* srq = core_.LookupXrcSrq(p.fields.xrc_srqn);
  const bool in_message = (s.have_recv && s.recv_offset_valid) || s.write_in_progress;
  const bool valid = srq != nullptr && srq->xrcd == qp->xrcd && (!in_message || srq == s.xrc_srq);
  if (!valid) {
    core_.counters.rx_bad_xrc_srq++;
    if (p.fields.bth.psn.value() == s.expected_psn.value()) {
      ResponderFatal(qp, p.fields.bth.psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    }
    return false;
  }
  s.xrc_srq = srq;
  s.pd = srq->pd;
  return true;
}

ResponderStep Responder::RunStep(ResponderStep step, const Request& r) {
  switch (step) {
    case ResponderStep::kCheckPsn:
      return CheckPsn(r);
    case ResponderStep::kCheckOpSequence:
      return CheckOpSequence(r);
    case ResponderStep::kCheckLength:
      return CheckLength(r);
    case ResponderStep::kExecute:
      return Execute(r);
    case ResponderStep::kAcknowledge:
      return Acknowledge(r);
    case ResponderStep::kDone:
      break;
  }
  return ResponderStep::kDone;
}

// The PSN: new, duplicate or ahead (IBTA 9.7.5.1.1, 9.7.5.1.2).
ResponderStep Responder::CheckPsn(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const int32_t distance = psn.DistanceFrom(s.expected_psn);
  if (distance < 0) {
    if (rc) HandleDuplicate(qp, p);
    return ResponderStep::kDone;
  }
  if (distance > 0) {
    qp->counters.out_of_sequence++;
    core_.counters.out_of_sequence++;
    if (rc) {
      // Selective retransmission: held, to be handled once the gap fills.
      if (s.selective) HoldAhead(qp, p, static_cast<uint32_t>(distance));
      // One PSN sequence error NAK per gap (IBTA 9.7.5.1.2 / C9-110). A
      // selective requester asking for an ACK after a gap (a probe, or the
      // end of a message) is told again: the resend of the first one may
      // have been lost.
      if (!s.nak_sent || (s.selective && p.fields.bth.ack_request)) {
        s.nak_sent = true;
        SendNak(qp, s.expected_psn, NakCode::kPsnSequenceError);
      }
      return ResponderStep::kDone;
    }
    // UC: a lost packet loses the message; resynchronise on the next
    // first/only packet (IBTA 9.7.5.1.2 for UC).
    if (!info.starts_message()) {
      s.write_in_progress = false;
      if (s.have_recv) s.recv_offset = 0;  // reuse the receive for the next message
      s.expected_psn = psn + 1;
      return ResponderStep::kDone;
    }
    s.write_in_progress = false;
    if (s.have_recv) s.recv_offset = 0;
    s.expected_psn = psn;
  }
  s.nak_sent = false;
  return ResponderStep::kCheckOpSequence;
}

ResponderStep Responder::CheckOpSequence(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  // Opcode sequence (IBTA 9.7.5.1.5 / C9-112): a message in progress must go
  // on with middle/last packets of the same kind, and nothing else may.
  const bool continues = !info.starts_message();
  const bool send_in_progress = s.have_recv && s.recv_offset_valid;
  if (continues) {
    const bool ok = (IsSend(info.operation) && send_in_progress) ||
                    (info.operation == Operation::kRdmaWrite && s.write_in_progress);
    if (!ok) {
      if (rc) ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
      return ResponderStep::kDone;
    }
  } else if (send_in_progress || s.write_in_progress) {
    if (rc) ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  return ResponderStep::kCheckLength;
}

ResponderStep Responder::CheckLength(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  // Payload length rules that depend on the path MTU (IBTA 9.7.5.1.3), for
  // each of the packets a staged chunk spans: all of them carry whole MTUs
  // but a message's last, which carries 1..MTU bytes.
  const uint64_t limit = uint64_t{qp->mtu_bytes} * span_;
  if (p.fields.payload_length > limit ||
      (info.payload == PayloadRule::kFullMtu && p.fields.payload_length != limit) ||
      (span_ > 1 && p.fields.payload_length <= limit - qp->mtu_bytes)) {
    if (rc) ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  return ResponderStep::kExecute;
}

ResponderStep Responder::Execute(const Request& r) {
  // Set by the receiver only for a descriptor from a process we may read.
  if (r.p.pull_source != 0) return ExecutePull(r);
  switch (r.info.operation) {
    case Operation::kSend:
      return ExecuteSend(r);
    case Operation::kRdmaWrite:
      return ExecuteWrite(r);
    case Operation::kRdmaReadRequest:
      return ExecuteRead(r);
    case Operation::kCompareSwap:
    case Operation::kFetchAdd:
      return ExecuteAtomic(r);
    case Operation::kAtomicWrite:
      return ExecuteAtomicWrite(r);
    default:
      if (r.rc) ResponderFatal(r.qp, r.psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
      return ResponderStep::kDone;
  }
}

ResponderStep Responder::ExecuteSend(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  if (info.starts_message()) {
    RecvWqe wqe;
    if ((rc && RnrStorm()) || !completions_.TakeRecv(qp, &wqe)) {
      if (rc) {
        SendRnrNak(qp, psn);
      } else {
        core_.counters.rx_dropped++;
      }
      return ResponderStep::kDone;
    }
    s.recv = wqe;
    s.have_recv = true;
    s.recv_offset = 0;
    s.recv_offset_valid = true;
  }
  // SEND with invalidate (IBTA 9.4.1.4, 10.6.7.2.5): the last packet's IETH
  // names a type 2 window of this QP's PD, bound through this QP, which is
  // invalidated before the receive completes. A key that is not such a
  // window fails the receive and the QP (class J, as rxe: invalid request).
  if (info.ends_message() && info.has(kIeth) &&
      !core_.mrs.InvalidateWindow(p.fields.invalidate_rkey, qp->resp.pd, qp->qpn, /*remote=*/true)) {
    if (rc) {
      ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    } else {
      core_.counters.rx_dropped++;
    }
    return ResponderStep::kDone;
  }
  ibv_wc_status error = IBV_WC_SUCCESS;
  if (!PlaceInRecv(qp, s.recv_offset, p.payload, p.fields.payload_length, &error)) {
    // Too long for the receive buffers (IBTA 9.7.5.1.6, C9-115) or a bad
    // local key: the receive fails, the requester gets a NAK.
    if (rc) {
      ResponderFatal(qp, psn, error == IBV_WC_LOC_LEN_ERR ? NakCode::kInvalidRequest
                                                          : NakCode::kRemoteOperationalError,
                     error);
    } else {
      completions_.CompleteRecv(
          qp, s.recv, {.status = error, .vendor_err = error == IBV_WC_LOC_LEN_ERR ? s.length_overflow : 0});
      s.have_recv = false;
      s.recv_offset_valid = false;
    }
    return ResponderStep::kDone;
  }
  if (!StagedCopyIntact(qp, psn)) return ResponderStep::kDone;
  s.recv_offset += p.fields.payload_length;
  if (info.ends_message()) {
    unsigned flags = 0;
    uint32_t extra = 0;
    if (info.has(kImmDt)) {
      flags = IBV_WC_WITH_IMM;
      extra = htonl(p.fields.immediate_data);
    } else if (info.has(kIeth)) {
      flags = IBV_WC_WITH_INV;
      extra = p.fields.invalidate_rkey;
    }
    completions_.CompleteRecv(qp, s.recv,
                              {.byte_len = static_cast<uint32_t>(s.recv_offset), .wc_flags = flags, .imm_or_rkey = extra});
    s.have_recv = false;
    s.recv_offset_valid = false;
    ++s.msn;
  }
  return ResponderStep::kAcknowledge;
}

ResponderStep Responder::ExecuteWrite(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const unsigned access = r.qp->attr.qp_access_flags;
  if (info.starts_message()) {
    uint8_t* host = nullptr;
    const bool allowed = (access & IBV_ACCESS_REMOTE_WRITE) != 0;
    if (!allowed || p.fields.reth.dma_length > kMaxMessageBytes ||
        (p.fields.reth.dma_length > 0 &&
         !MrGranted(core_.mrs.CheckRemote(p.fields.reth.rkey, qp->resp.pd, p.fields.reth.virtual_address,
                                          p.fields.reth.dma_length, IBV_ACCESS_REMOTE_WRITE, &host, qp->qpn)))) {
      if (rc) ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
      return ResponderStep::kDone;
    }
    s.write_rkey = p.fields.reth.rkey;
    s.write_va = p.fields.reth.virtual_address;
    s.write_remaining = p.fields.reth.dma_length;
    s.write_length = p.fields.reth.dma_length;
    s.write_in_progress = true;
  }
  if (p.fields.payload_length > s.write_remaining ||
      (info.ends_message() && p.fields.payload_length != s.write_remaining)) {
    // The packets do not add up to the RETH's DMA length (C9-116).
    if (rc) ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    s.write_in_progress = false;
    return ResponderStep::kDone;
  }
  // Every packet of the WRITE passes the checks of the first: the region
  // may have been deregistered (or the QP's access revoked) since, and
  // nothing may land in memory the application no longer gives us.
  uint8_t* dest = nullptr;
  MrCheck how = MrCheck::kOk;
  if (p.fields.payload_length > 0 &&
      ((access & IBV_ACCESS_REMOTE_WRITE) == 0 ||
       !MrGranted(how = core_.mrs.CheckRemote(s.write_rkey, qp->resp.pd, s.write_va, p.fields.payload_length,
                                              IBV_ACCESS_REMOTE_WRITE, &dest, qp->qpn)))) {
    if (rc) {
      ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    } else {
      s.write_in_progress = false;  // UC: the message is lost
      core_.counters.rx_dropped++;
    }
    return ResponderStep::kDone;
  }
  RecvWqe wqe;
  const bool with_imm = info.has(kImmDt);
  if (with_imm) {
    // The immediate consumes a receive request: check for one before
    // placing the last packet, so an RNR retry finds memory unchanged.
    if (!s.have_recv && ((rc && RnrStorm()) || !completions_.TakeRecv(qp, &wqe))) {
      if (rc) SendRnrNak(qp, psn);
      return ResponderStep::kDone;
    }
    if (!s.have_recv) {
      s.recv = wqe;
      s.have_recv = true;
      s.recv_offset_valid = false;
    }
  }
  if (p.fields.payload_length > 0 && !placed_ && !MrWrite(how, dest, p.payload, p.fields.payload_length)) {
    // An implicit on-demand region's page that cannot be had for writing
    // (unmapped, read-only): the NAK an ODP NIC gives for a page it cannot
    // resolve: a remote access error NAK, and the QP stops (IBTA 9.9.3.1);
    // a receive request a WRITE with immediate took completes in error.
    if (rc) {
      ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    } else {
      s.write_in_progress = false;
      core_.counters.rx_dropped++;
    }
    return ResponderStep::kDone;
  }
  if (!StagedCopyIntact(qp, psn)) return ResponderStep::kDone;
  s.write_va += p.fields.payload_length;
  s.write_remaining -= p.fields.payload_length;
  if (info.ends_message()) {
    s.write_in_progress = false;
    ++s.msn;
    if (with_imm) {
      completions_.CompleteRecv(qp, s.recv,
                                {.byte_len = static_cast<uint32_t>(s.write_length),
                                 .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                                 .wc_flags = IBV_WC_WITH_IMM,
                                 .imm_or_rkey = htonl(p.fields.immediate_data)});
      s.have_recv = false;
    }
  }
  return ResponderStep::kAcknowledge;
}

ResponderStep Responder::ExecuteRead(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const RethFields& reth = p.fields.reth;
  if (reth.dma_length > kMaxMessageBytes) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  if (!RemoteReadAllowed(qp, reth)) {
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return ResponderStep::kDone;
  }
  if (!EnqueueResponse(qp, ReadJob(psn, reth, /*duplicate=*/false))) {
    // More READs/atomics outstanding than max_dest_rd_atomic allows.
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  const uint32_t packets = reth.dma_length == 0 ? 1 : (reth.dma_length + qp->mtu_bytes - 1) / qp->mtu_bytes;
  if (!s.read_history.empty()) {
    s.read_history[s.read_history_next] =
        ReadRecord{psn, packets, reth.rkey, reth.virtual_address, reth.dma_length, true};
    s.read_history_next = (s.read_history_next + 1) % static_cast<uint32_t>(s.read_history.size());
  }
  ++s.msn;
  s.expected_psn = psn + packets;
  return ResponderStep::kDone;  // the responses acknowledge it
}

ResponderStep Responder::ExecuteAtomic(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const unsigned access = r.qp->attr.qp_access_flags;
  uint8_t* host = nullptr;
  const bool allowed = (access & IBV_ACCESS_REMOTE_ATOMIC) != 0;
  const AtomicEthFields& a = p.fields.atomic_eth;
  if ((a.virtual_address & 7) != 0) {  // IBTA 9.4.5: naturally aligned
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  MrCheck how = MrCheck::kBadKey;
  if (!allowed || !MrGranted(how = core_.mrs.CheckRemote(a.rkey, qp->resp.pd, a.virtual_address, 8,
                                                         IBV_ACCESS_REMOTE_ATOMIC, &host, qp->qpn))) {
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return ResponderStep::kDone;
  }
  if (s.reads.empty() || s.reads_count - s.duplicate_jobs >= s.reads.size() / 2 ||
      s.reads_count >= s.reads.size()) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  // Atomic with respect to other uroce QPs of this engine and to the
  // host's own atomics on the same word.
  auto* word = reinterpret_cast<uint64_t*>(host);
  uint64_t original;
  if (how == MrCheck::kOkOnDemand) {
    // Through an implicit on-demand region: the kernel probes the word for
    // writing first (on_demand_memory.h), and a page it cannot have earns
    // the NAK an ODP NIC gives.
    if (!OnDemandAtomic(word, info.operation == Operation::kCompareSwap, a.compare_data, a.swap_or_add_data,
                        &original)) {
      ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
      return ResponderStep::kDone;
    }
  } else if (info.operation == Operation::kCompareSwap) {
    original = a.compare_data;
    __atomic_compare_exchange_n(word, &original, a.swap_or_add_data, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
  } else {
    original = __atomic_fetch_add(word, a.swap_or_add_data, __ATOMIC_SEQ_CST);
  }
  if (!s.atomics.empty()) {
    s.atomics[s.atomics_next] = AtomicReplay{psn, a.rkey, a.virtual_address, original, true};
    s.atomics_next = (s.atomics_next + 1) % static_cast<uint32_t>(s.atomics.size());
  }
  ++s.msn;
  s.expected_psn = psn + 1;
  EnqueueResponse(qp, AtomicJob(psn, original, /*duplicate=*/false));
  return ResponderStep::kDone;
}

// IBTA 1.5 ATOMIC WRITE (9.4.7): the 8 bytes land as one 64-bit store, so
// that no reader (another QP's READ, the host's own loads) sees half of
// them. It needs what an RDMA WRITE needs (remote write access on the QP
// and the key, the range inside the region) and what an atomic needs (a
// naturally aligned address); its RETH must ask for exactly the 8 bytes it
// carries. As in Linux rxe (rxe_resp.c): a missing access is a remote access
// error, a misaligned address or another length an invalid request; either
// NAKs and stops the QP (class C/J, IBTA 9.9.3.1), and nothing is written.
// Done, it is answered as Linux rxe answers it (rxe_resp.c, acknowledge():
// send_read_response_ack): an RDMA READ response Only with no data, queued
// with the READ and atomic responses, so that it takes a responder resource
// (max_dest_rd_atomic) like them; a duplicate is answered again without
// storing again (HandleDuplicate).
ResponderStep Responder::ExecuteAtomicWrite(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const RethFields& reth = p.fields.reth;
  if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return ResponderStep::kDone;
  }
  if (reth.dma_length != 8 || p.fields.payload_length != 8 || (reth.virtual_address & 7) != 0) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  uint8_t* host = nullptr;
  const MrCheck how =
      core_.mrs.CheckRemote(reth.rkey, qp->resp.pd, reth.virtual_address, 8, IBV_ACCESS_REMOTE_WRITE, &host, qp->qpn);
  if (how != MrCheck::kOk && how != MrCheck::kOkOnDemand) {
    ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
    return ResponderStep::kDone;
  }
  if ((reinterpret_cast<uintptr_t>(host) & 7) != 0) {
    // An aligned VA in a region whose IOVA and host address disagree modulo
    // 8 (ibv_reg_mr_iova(3)): no single store could write it atomically.
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  // Room for its response first: more outstanding than max_dest_rd_atomic
  // is an invalid request, and then nothing may have been stored.
  if (s.reads.empty() || s.reads_count - s.duplicate_jobs >= s.reads.size() / 2 ||
      s.reads_count >= s.reads.size()) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  uint64_t value;
  std::memcpy(&value, p.payload, sizeof(value));  // the bytes as they travel: memory order
  if (how == MrCheck::kOkOnDemand) {
    // An implicit on-demand region: a page the kernel cannot give for
    // writing earns the NAK an ODP NIC gives (on_demand_memory.h).
    if (!OnDemandStore(reinterpret_cast<uint64_t*>(host), value)) {
      ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
      return ResponderStep::kDone;
    }
  } else {
    __atomic_store_n(reinterpret_cast<uint64_t*>(host), value, __ATOMIC_SEQ_CST);
  }
  ++s.msn;
  s.expected_psn = psn + 1;
  EnqueueResponse(qp, ReadJob(psn, RethFields{reth.virtual_address, reth.rkey, 0}, /*duplicate=*/false));
  return ResponderStep::kDone;  // the response acknowledges it
}

// The request is done: the next PSN, and an ACK if the requester asked.
ResponderStep Responder::Acknowledge(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const uint32_t span = span_;
  span_ = 1;
  s.expected_psn = psn + span;
  if (rc && p.fields.bth.ack_request) QueueAck(qp, psn + (span - 1));
  return ResponderStep::kDone;
}

// A pull descriptor: the whole message, read from the sender's memory with
// one copy (transport/peer_memory.h) once every check a first packet passes
// has passed for all of it. The descriptor comes from another process: it
// is parsed strictly, and whatever it names is only read, from that
// process; what lands in ours is what the key (WRITE) or the receive
// request (SEND) grants, never more.
ResponderStep Responder::ExecutePull(const Request& r) {
  const auto& [qp, p, s, rc, psn, info] = r;
  const bool write = info.operation == Operation::kRdmaWrite;
  PullDescriptor d;
  if (qp->type != IBV_QPT_RC || !info.starts_message() || !info.ends_message() ||
      !(write || IsSend(info.operation)) || !ParsePullDescriptor(p.payload, p.fields.payload_length, &d) ||
      (write && d.total != p.fields.reth.dma_length)) {
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  iovec remote[kMaxPullSegments];
  for (uint32_t i = 0; i < d.count; ++i) {
    remote[i] = {reinterpret_cast<void*>(d.segments[i].address), static_cast<size_t>(d.segments[i].length)};
  }
  iovec local[kMaxRecvSge];
  uint32_t local_count = 0;
  const bool with_imm = info.has(kImmDt);
  if (write) {
    uint8_t* host = nullptr;
    if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0 ||
        !MrGranted(core_.mrs.CheckRemote(p.fields.reth.rkey, s.pd, p.fields.reth.virtual_address, d.total,
                                         IBV_ACCESS_REMOTE_WRITE, &host, qp->qpn))) {
      ResponderFatal(qp, psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
      return ResponderStep::kDone;
    }
    local[local_count++] = {host, static_cast<size_t>(d.total)};
  }
  if (!write || with_imm) {
    // A SEND, or the immediate of a WRITE, consumes a receive request:
    // taken before any byte moves, so an RNR retry finds memory unchanged.
    RecvWqe wqe;
    if (RnrStorm() || !completions_.TakeRecv(qp, &wqe)) {
      SendRnrNak(qp, psn);
      return ResponderStep::kDone;
    }
    s.recv = wqe;
    s.have_recv = true;
    s.recv_offset = 0;
    s.recv_offset_valid = !write;
  }
  if (!write) {
    if (d.total > s.recv.total_length) {  // IBTA 9.7.5.1.6, C9-115
      s.length_overflow = static_cast<uint32_t>(std::min<uint64_t>(d.total - s.recv.total_length, UINT32_MAX));
      ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_LOC_LEN_ERR);
      return ResponderStep::kDone;
    }
    if (info.has(kIeth) &&
        !core_.mrs.InvalidateWindow(p.fields.invalidate_rkey, s.pd, qp->qpn, /*remote=*/true)) {
      ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
      return ResponderStep::kDone;
    }
    uint64_t left = d.total;
    for (uint32_t i = 0; i < s.recv.num_sge && left > 0; ++i) {
      const Sge& sge = s.recv.sge[i];
      const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(left, sge.length));
      if (chunk == 0) continue;
      uint8_t* host = nullptr;
      if (!MrGranted(core_.mrs.CheckLocal(sge.lkey, s.pd, sge.addr, chunk, IBV_ACCESS_LOCAL_WRITE, &host))) {
        ResponderFatal(qp, psn, NakCode::kRemoteOperationalError, IBV_WC_LOC_PROT_ERR);
        return ResponderStep::kDone;
      }
      local[local_count++] = {host, chunk};
      left -= chunk;
    }
  }
  if (!core_.config.peer_memory->Pull(p.pull_source, local, local_count, remote, d.count)) {
    // The sender named memory it does not have (or ended meanwhile).
    core_.counters.pull_failures++;
    ResponderFatal(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return ResponderStep::kDone;
  }
  core_.counters.pulls_received++;
  core_.counters.pull_bytes += d.total;
  qp->counters.rx_bytes += d.total;
  ++s.msn;
  if (s.have_recv) {
    unsigned flags = 0;
    uint32_t extra = 0;
    if (with_imm) {
      flags = IBV_WC_WITH_IMM;
      extra = htonl(p.fields.immediate_data);
    } else if (info.has(kIeth)) {
      flags = IBV_WC_WITH_INV;
      extra = p.fields.invalidate_rkey;
    }
    if (write) {
      completions_.CompleteRecv(qp, s.recv,
                                {.byte_len = static_cast<uint32_t>(d.total),
                                 .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                                 .wc_flags = flags,
                                 .imm_or_rkey = extra});
    } else {
      completions_.CompleteRecv(qp, s.recv,
                                {.byte_len = static_cast<uint32_t>(d.total), .wc_flags = flags, .imm_or_rkey = extra});
    }
    s.have_recv = false;
    s.recv_offset_valid = false;
  }
  span_ = d.packets;
  return ResponderStep::kAcknowledge;
}

// Sends queued READ responses and atomic acknowledgements, in order, within
// the QP's packet budget (a 1 MiB READ must not starve the other QPs).
void Responder::RunReadResponses(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  ResponderState& s = qp->resp;
  uint32_t budget = core_.config.per_qp_packet_budget;
  const uint32_t mtu = qp->mtu_bytes;
  while (s.reads_count > 0 && budget > 0 && tx_.TxRoom(1)) {
    // Congestion control paces what the QP answers as it paces what it asks:
    // a READ's data flows from the responder, which is where DCQCN's
    // reaction point is (SIGCOMM 2015 section 3: the sending NIC's per-QP
    // rate limiter), and the requester's CNPs for CE-marked responses reach
    // this QP (Completer::HandleCongestionNotification). The requester's
    // timers allow for a slow answer: its retries are spent only after its
    // own timeout passes with no response at all (transport/retransmit_timer.h).
    uint64_t rate = 0;
    if (qp->cc != nullptr) {
      rate = qp->cc->allowance().rate_mbps;
      if (rate != 0 && !qp->pacer.Ready(core_.Now())) {
        core_.counters.paced_waits++;
        break;  // the QP stays busy while it has answers (Engine::Retire): the next poll looks again
      }
    }
    ReadResponseJob& job = s.reads[s.reads_head];
    if (!job.atomic && qp->cc == nullptr && core_.config.peer_memory != nullptr && core_.config.pull_min_bytes != 0 &&
        job.length >= core_.config.pull_min_bytes) {
      const StagedReadOutcome staged = EmitStagedReadResponse(qp, job);
      if (staged == StagedReadOutcome::kNoRoom) return;  // no buffer now; next poll
      if (staged == StagedReadOutcome::kWait) {
        core_.counters.stage_waits++;
        return;  // the QP stays busy while it has answers (Engine::Retire)
      }
      if (staged == StagedReadOutcome::kSent) {
        --budget;
        if (job.offset >= job.length) {
          if (job.duplicate) --s.duplicate_jobs;
          s.reads_head = (s.reads_head + 1) % static_cast<uint32_t>(s.reads.size());
          --s.reads_count;
        }
        continue;
      }
    }
    PacketFields f;
    f.bth.dest_qp = qp->attr.dest_qp_num;
    f.bth.psn = job.next_psn;
    f.aeth.syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
    f.aeth.msn = AethMsn(s.msn);
    if (s.selective) f.bth.reserved7 = kBthSelectiveRetransmission;
    uint32_t payload = 0;
    bool last = true;
    if (job.atomic) {
      f.bth.opcode = static_cast<uint8_t>(Opcode::kRcAtomicAcknowledge);
      f.atomic_ack_eth.original_remote_data = job.original;
    } else {
      const bool first = job.offset == 0;
      payload = static_cast<uint32_t>(std::min<uint64_t>(mtu, job.length - job.offset));
      last = job.offset + payload >= job.length;
      // First and last carry an AETH, middles do not (IBTA table 38).
      if (first && last) f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaReadResponseOnly);
      else if (first) f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaReadResponseFirst);
      else if (last) f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaReadResponseLast);
      else f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaReadResponseMiddle);
    }
    // Every response packet reads through the key again: a region
    // deregistered while the response streams ends it (ibv_dereg_mr(3): no
    // access after it returns), with a NAK, and the QP stops (IBTA 9.9.3.1).
    const uint8_t* source = nullptr;
    MrCheck how = MrCheck::kOk;
    if (payload > 0) {
      uint8_t* host = nullptr;
      if ((qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0 ||
          !MrGranted(how = core_.mrs.CheckRemote(job.rkey, job.pd, job.virtual_address + job.offset, payload,
                                                 IBV_ACCESS_REMOTE_READ, &host, qp->qpn))) {
        if (job.duplicate && s.selective) {
          // A stale copy (HandleDuplicateRead): its answer ends quietly.
          core_.counters.rx_dropped++;
          --s.duplicate_jobs;
          s.reads_head = (s.reads_head + 1) % static_cast<uint32_t>(s.reads.size());
          --s.reads_count;
          continue;
        }
        ResponderFatal(qp, job.next_psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
        return;
      }
      source = host;
    }
    // An XRC target answers with the XRC opcodes, without an XRCETH.
    f.bth.opcode = static_cast<uint8_t>(f.bth.opcode + ResponseBase(qp));
    uint8_t* dest = nullptr;
    f.payload_length = payload;
    rte_mbuf* m = tx_.StartPacket(qp->path, f, &dest);
    if (m == nullptr) return;  // no buffer now; next poll
    if (payload > 0 && !MrRead(how, dest, source, payload)) {
      // An implicit on-demand region's page that cannot be read: this
      // response does not leave, and the READ ends with the NAK an ODP NIC
      // gives for a page it cannot resolve.
      tx_.AbandonPacket(m);
      ResponderFatal(qp, job.next_psn, NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
      return;
    }
    if (qp->cc != nullptr) {
      // The pace counts the whole frame, as the requester's does.
      const uint32_t wire_bytes = rte_pktmbuf_pkt_len(m);
      const uint64_t now = core_.Now();
      if (rate != 0) qp->pacer.Spend(now, wire_bytes, rate);
      qp->cc->OnSent(now, wire_bytes);
    }
    tx_.FinishPacket(m);
    --budget;
    job.offset += payload;
    job.next_psn += 1;
    if (last) {
      if (job.duplicate) --s.duplicate_jobs;
      s.reads_head = (s.reads_head + 1) % static_cast<uint32_t>(s.reads.size());
      --s.reads_count;
    }
  }
  if (s.reads_count == 0 && s.ack_pending) ListForAck(qp);
}

// A READ's response between two linked processes, a chunk at a time: the
// data copied once from the region into our half of the link's payload
// area, and one frame naming it, instead of a packet per MTU (a 1 MiB
// READ is 16 frames at a 4096-byte MTU, not 256). The frame is the READ
// response the packets would have been together (First, Middle, Last or
// Only; IBTA 9.7.5.1.3): its PSN is the first of the chunk's, and the
// requester places the chunk where that PSN says.
//
// The key is checked for the whole chunk before anything is copied, as
// each packet would check its MTU, and the copy is made now, so a region
// deregistered afterwards is never read again (ibv_dereg_mr(3)). Nothing
// acknowledges a READ response, so the chunk is held until the requester
// says it took it (PeerMemory::StageTaken), its QP lets go, or it waits
// kStagedReadHoldNs; a QP holds at most kMaxStagedReadChunks, so one
// reader that never takes them costs the link's other QPs little.
Responder::StagedReadOutcome Responder::EmitStagedReadResponse(QueuePair* qp, ReadResponseJob& job) {
  if (qp->type != IBV_QPT_RC || (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0) {
    return StagedReadOutcome::kNotStaged;
  }
  PeerMemory* peer = core_.config.peer_memory;
  StagedChunks& held = qp->resp.read_staged;
  const uint64_t now = core_.Now();
  if (!held.empty()) {
    held.ReleaseWhere(
        [&](const StagedChunks::Entry& e) { return now - e.staged_ns >= kStagedReadHoldNs || peer->StageTaken(e.ticket); },
        peer);
  }
  // Out of chunks: wait for the reader to take ours, unless it is slow to.
  const auto out_of_chunks = [&] {
    return !held.empty() && now - held.Oldest().staged_ns < kStagedReadWaitNs ? StagedReadOutcome::kWait
                                                                              : StagedReadOutcome::kNotStaged;
  };
  if (held.size() >= kMaxStagedReadChunks) return out_of_chunks();
  const uint32_t mtu = qp->mtu_bytes;
  const uint32_t length =
      static_cast<uint32_t>(std::min<uint64_t>(kStagedChunkBytes / mtu * mtu, job.length - job.offset));
  uint8_t* host = nullptr;
  // Plain registered memory only (an on-demand region's pages go as
  // packets, which resolve them one at a time).
  if (core_.mrs.CheckRemote(job.rkey, job.pd, job.virtual_address + job.offset, length, IBV_ACCESS_REMOTE_READ, &host,
                            qp->qpn) != MrCheck::kOk) {
    return StagedReadOutcome::kNotStaged;
  }
  const iovec piece{host, length};
  StageTicket ticket;
  if (!peer->Stage(qp->attr.dest_qp_num, qp->path.dgid, &piece, 1, &ticket, StageCopy::kStreaming)) {
    return out_of_chunks();
  }
  const bool first = job.offset == 0;
  const bool last = job.offset + length >= job.length;
  const uint32_t packets = (length + mtu - 1) / mtu;
  PacketFields f;
  f.bth.dest_qp = qp->attr.dest_qp_num;
  f.bth.psn = job.next_psn;
  f.bth.reserved7 = kBthStagedChunk;
  if (qp->resp.selective) f.bth.reserved7 |= kBthSelectiveRetransmission;
  f.aeth.syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
  f.aeth.msn = AethMsn(qp->resp.msn);
  const Opcode opcode = first && last ? Opcode::kRcRdmaReadResponseOnly
                        : first       ? Opcode::kRcRdmaReadResponseFirst
                        : last        ? Opcode::kRcRdmaReadResponseLast
                                      : Opcode::kRcRdmaReadResponseMiddle;
  f.bth.opcode = static_cast<uint8_t>(opcode);
  f.payload_length = static_cast<uint32_t>(kStagedChunkDescriptorBytes);
  uint8_t* dest = nullptr;
  rte_mbuf* m = tx_.StartPacket(qp->path, f, &dest);
  if (m == nullptr) {
    peer->Unstage(ticket);  // nothing names it
    return StagedReadOutcome::kNoRoom;
  }
  WriteStagedChunk({.chunk = ticket.chunk, .length = length, .sequence = ticket.sequence}, dest);
  tx_.FinishPacket(m);
  // Out now, so that the requester copies this chunk while we fill the next.
  tx_.FlushTx();
  held.Push({job.next_psn, job.next_psn + (packets - 1), length, ticket, now});
  job.offset += length;
  job.next_psn += packets;
  qp->counters.tx_packets++;
  qp->counters.tx_bytes += length;
  core_.counters.staged_sent++;
  return StagedReadOutcome::kSent;
}

}  // namespace uroce::transport
