// Completer (IBTA vol. 1, 9.7.5.2 "Requester side: acknowledgement
// processing"): ACKs retire send requests in order; READ responses and atomic
// acknowledgements carry data back; NAKs trigger go-back-N, the RNR wait, or a
// fatal error; the retransmission timer (retransmit_timer.h) resends after an
// RTO, probes a lost tail, and gives up after retry_cnt local ACK timeouts.
//
// Engine thread only.
#include "transport/completer.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "transport/link_ack.h"
#include "transport/opcode.h"
#include "transport/pull_descriptor.h"

namespace uroce::transport {
namespace {

// RNR NAK timer field to nanoseconds (IBTA table 45, in microseconds ×100).
constexpr uint32_t kRnrTimerCentiMicros[32] = {
    65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
    48,    64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
    2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};

}  // namespace

uint64_t RnrTimerNs(uint8_t timer_field) { return uint64_t(kRnrTimerCentiMicros[timer_field & 31]) * 10000; }

// Retires, in order, every SEND/WRITE whose last PSN is at or before `psn`.
// A READ or atomic covered by `psn` but not answered means its response was
// lost: returns false and leaves the slot for a retransmission from it.
bool Completer::RetireThrough(QueuePair* qp, Psn psn) {
  RequesterState& r = qp->req;
  const Psn unacked_before = r.unacked;
  bool all_answered = true;
  while (r.head != r.tail) {
    SendSlot& slot = r.window[r.head & r.window_mask];
    if (!slot.started || slot.local_error) break;
    if (slot.last_psn.DistanceFrom(psn) > 0) break;  // not yet acknowledged
    // An ATOMIC WRITE returns no data: an ACK covering it says it was done
    // (a responder may ACK it instead of the zero-length READ response rxe
    // sends), so it retires here too.
    const bool atomic_write = slot.wqe->opcode == IBV_WR_ATOMIC_WRITE;
    if (slot.read_or_atomic && !atomic_write) {  // its response is missing
      all_answered = false;
      break;
    }
    if (atomic_write && slot.counted_in_flight) --r.reads_in_flight;
    completions_.RetireOldestSend(qp, IBV_WC_SUCCESS);  // slot.wqe is gone; its bookkeeping stays
    if (r.next_send < r.head) {
      r.next_send = r.head;
      r.send_offset = 0;
    }
    // What is retired is acknowledged: the oldest unacknowledged PSN moves on
    // with it, or the window and the timer would count it for ever.
    if ((slot.last_psn + 1).DistanceFrom(r.unacked) > 0) r.unacked = slot.last_psn + 1;
  }
  if (r.unacked.DistanceFrom(unacked_before) > 0) {
    NoteProgress(qp, static_cast<uint32_t>(r.unacked.DistanceFrom(unacked_before)));
  }
  return all_answered;
}

void Completer::NoteProgress(QueuePair* qp, uint32_t acked_packets) {
  RequesterState& r = qp->req;
  r.gap_restart_armed = false;
  // Staged chunks the responder has copied may be filled again.
  r.staged.ReleaseBefore(r.unacked, core_.config.peer_memory);
  // What selective READ remembers never falls behind the oldest
  // unacknowledged PSN: a PSN left behind would, 2^24 PSNs later, name
  // another request (an executed one it never was, a packet never placed).
  if (r.executed_known && r.executed_through.DistanceFrom(r.unacked) < 0) r.executed_known = false;
  if (r.unacked.DistanceFrom(r.read_ahead_from) > 0) AnchorReadAhead(r, r.unacked);
  // The retry budget is whole again (IBTA 9.7.6.1.3), the timer starts
  // again, and the round trip may be sampled.
  r.retries_left = qp->attr.retry_cnt;
  const bool outstanding = r.unacked.DistanceFrom(r.sent_limit) < 0;
  const uint64_t now = core_.Now();
  const uint64_t rtt_ns =
      r.timer.OnProgress(r.unacked, now, LocalAckTimeoutNs(qp->attr.timeout), outstanding, core_.config.retransmit);
  if (qp->cc != nullptr) qp->cc->OnAcked(now, acked_packets, rtt_ns);
}

void Completer::SignalLoss(QueuePair* qp) {
  if (qp->cc != nullptr) qp->cc->OnLoss(core_.Now());
}

void Completer::HandleCongestionNotification(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // Only a connected QP with an algorithm listens (the receiver checked that
  // the CNP came from the QP's peer): from RTR on, as it answers READs from
  // then (a passive side may never leave RTR, Engine::RunQp), and its
  // answers are paced too (Responder::RunReadResponses). A CNP to anything
  // else is counted and ignored, as rxe and a NIC without DCQCN ignore it.
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  if (qp->cc == nullptr || (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD)) {
    core_.counters.cnps_ignored++;
    return;
  }
  qp->counters.cnps_received++;
  core_.counters.cnps_received++;
  qp->cc->OnCongestionNotified(core_.Now());
}

void Completer::AcknowledgeThrough(QueuePair* qp, Psn psn) {
  RequesterState& r = qp->req;
  Psn next = psn + 1;
  // Never past a READ or atomic still waiting for its response: an ACK or NAK
  // for a later PSN says the responder executed it, not that its response
  // arrived; the retransmission timer must still cover it.
  if (r.head != r.tail) {
    const SendSlot& oldest = r.window[r.head & r.window_mask];
    if (oldest.started && oldest.read_or_atomic) {
      const Psn waiting = oldest.first_psn + static_cast<uint32_t>(oldest.bytes_done / qp->mtu_bytes);
      if (next.DistanceFrom(waiting) > 0) next = waiting;
    }
  }
  if (next.DistanceFrom(r.unacked) > 0) {
    const uint32_t acked = static_cast<uint32_t>(next.DistanceFrom(r.unacked));
    r.unacked = next;
    NoteProgress(qp, acked);
  } else if (r.unacked.DistanceFrom(r.sent_limit) >= 0) {
    r.timer.Disarm();  // nothing outstanding
  }
}

// A response or ACK PSN is valid only inside what was sent and not yet
// acknowledged, [unacked - 1, psn - 1]; anything else is a stale or ghost
// packet and is ignored (IBTA 9.7.5.2.2).
bool Completer::AckPsnValid(const QueuePair* qp, Psn psn) const {
  const RequesterState& r = qp->req;
  return psn.DistanceFrom(r.unacked - 1) >= 0 && (r.sent_limit - 1).DistanceFrom(psn) >= 0;
}

// A gap seen in responses (or an ACK that passes an unanswered READ) asks
// for a retransmission once; more evidence of the same gap is ignored until
// something new is acknowledged or the timer fires (like one NAK per gap).
void Completer::RestartOnce(QueuePair* qp, Psn psn) {
  RequesterState& r = qp->req;
  if (r.gap_restart_armed && r.gap_restart_psn.value() == psn.value()) return;
  r.gap_restart_armed = true;
  r.gap_restart_psn = psn;
  requester_.RestartFrom(qp, psn);
}

// The requester resends `psn` alone on its next run, unless it did within a
// round trip (the responder NAKs a gap again for every packet after it that
// asks for an ACK; those NAKs say nothing new).
void Completer::RequestSelectiveResend(QueuePair* qp, Psn psn) {
  RequesterState& r = qp->req;
  if (psn.DistanceFrom(r.sent_high) >= 0) return;  // never sent: nothing to resend
  if (!r.staged.empty()) {
    // Staged chunks after the gap were dropped, not held (the responder
    // reads a chunk in order only): resend everything from the gap.
    RestartOnce(qp, psn);
    return;
  }
  const uint64_t now = core_.Now();
  if (r.last_resent_psn.value() == psn.value() && r.last_resent_ns != 0 &&
      now - r.last_resent_ns < r.timer.srtt_ns()) {
    return;
  }
  r.resend_pending = true;
  r.resend_psn = psn;
}

void Completer::FailOldest(QueuePair* qp, ibv_wc_status status) {
  RequesterState& r = qp->req;
  if (r.head != r.tail) {
    SendSlot& slot = r.window[r.head & r.window_mask];
    slot.signaled = true;
    completions_.RetireOldestSend(qp, status);
  }
  completions_.EnterError(qp);
}

void Completer::RestartOldest(QueuePair* qp) { RestartOnce(qp, OldestWaiting(qp)); }

Psn Completer::OldestWaiting(const QueuePair* qp) const {
  const RequesterState& r = qp->req;
  const SendSlot& oldest = r.window[r.head & r.window_mask];
  return oldest.first_psn + static_cast<uint32_t>(oldest.bytes_done / qp->mtu_bytes);
}

// ---------------------------------------------------------------- the steps

const char* CompleterStepName(CompleterStep step) {
  static constexpr const char* kNames[] = {
      "check_psn",     "check_ack",         "ack",           "rnr_nak",   "sequence_nak", "fatal_nak", "retire_earlier",
      "match_request", "atomic_write_done", "atomic_result", "read_data", "complete",     "done"};
  const auto i = static_cast<size_t>(step);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

void Completer::SnapshotLinkAcks() {
  PeerMemory* peer = core_.config.peer_memory;
  if (peer == nullptr) return;
  for (QueuePair* qp : core_.busy_qps) {
    RequesterState& r = qp->req;
    // One waiting to be taken is kept: a newer one would wait for newer
    // frames, and under a steady stream might never be taken.
    if (!r.link_ack_watched || r.link_ack_snapshot_taken) continue;
    r.link_ack_snapshot_taken =
        peer->ReadLinkAck(qp->attr.dest_qp_num, qp->path.dgid, qp->qpn, &r.link_ack_snapshot, &r.link_ack_read_to);
  }
}

void Completer::TakeLinkAcks() {
  PeerMemory* peer = core_.config.peer_memory;
  if (peer == nullptr) return;
  for (QueuePair* qp : core_.busy_qps) {
    RequesterState& r = qp->req;
    if (!r.link_ack_watched) continue;
    const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
    if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) {
      r.link_ack_watched = false;
      continue;
    }
    const uint64_t word = r.link_ack_snapshot;
    if (!r.link_ack_snapshot_taken) continue;
    if (word != r.link_ack_seen && LinkAckValid(word) && LinkAckPair(word) == LinkAckPair(qp->qpn, qp->attr.dest_qp_num)) {
      // Not before the frames the responder sent before it.
      if (!peer->LinkReadPast(qp->attr.dest_qp_num, qp->path.dgid, r.link_ack_read_to)) continue;
      r.link_ack_seen = word;
      // As the AETH ACK the responder would have sent (IBTA 9.7.5.1.1):
      // taken through the same steps, its PSN checked against the window.
      PacketView ack;
      ack.fields.bth.psn = LinkAckPsn(word);
      ack.fields.bth.reserved7 = LinkAckSelective(word) ? kBthSelectiveRetransmission : 0;
      ack.fields.aeth.syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
      qp->counters.rx_packets++;
      core_.counters.link_acks_received++;
      HandleAcknowledge(qp, ack);
    }
    r.link_ack_snapshot_taken = false;
    // Everything acknowledged: the next request starts a new run.
    if (r.unacked.value() == r.sent_limit.value()) r.link_ack_watched = false;
  }
}

void Completer::HandleAcknowledge(QueuePair* qp, const PacketView& p) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  Run(Response{qp, p, qp->req, p.fields.bth.psn, /*acknowledge=*/true});
}

// READ response packets (IBTA 9.7.5.1.3) and atomic acknowledgements.
void Completer::HandleResponse(QueuePair* qp, const PacketView& p) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  Run(Response{qp, p, qp->req, p.fields.bth.psn, /*acknowledge=*/false});
  if (p.staged_link != 0) {
    // Copied, or not wanted (a duplicate, a QP that failed): either way the
    // responder may fill the chunk again. Nothing acknowledges a READ
    // response, so only this says so (PeerMemory::TakeStaged).
    StagedChunk chunk;
    if (ParseStagedChunk(p.payload, p.fields.payload_length, &chunk)) {
      core_.config.peer_memory->TakeStaged(p.staged_link, chunk.chunk, chunk.sequence);
    }
  }
}

void Completer::Run(const Response& response) {
  CompleterStep step = CompleterStep::kCheckPsn;
  while (step != CompleterStep::kDone) step = RunStep(step, response);
}

CompleterStep Completer::RunStep(CompleterStep step, const Response& response) {
  switch (step) {
    case CompleterStep::kCheckPsn:
      return CheckPsn(response);
    case CompleterStep::kCheckAck:
      return CheckAck(response);
    case CompleterStep::kAck:
      return Ack(response);
    case CompleterStep::kRnrNak:
      return RnrNak(response);
    case CompleterStep::kSequenceNak:
      return SequenceNak(response);
    case CompleterStep::kFatalNak:
      return FatalNak(response);
    case CompleterStep::kRetireEarlier:
      return RetireEarlier(response);
    case CompleterStep::kMatchRequest:
      return MatchRequest(response);
    case CompleterStep::kAtomicWriteDone:
      return AtomicWriteDone(response);
    case CompleterStep::kAtomicResult:
      return AtomicResult(response);
    case CompleterStep::kReadData:
      return ReadData(response);
    case CompleterStep::kComplete:
      return Complete(response);
    case CompleterStep::kDone:
      break;
  }
  return CompleterStep::kDone;
}

CompleterStep Completer::CheckPsn(const Response& response) {
  if (!AckPsnValid(response.qp, response.psn)) {
    response.qp->counters.duplicates++;
    return CompleterStep::kDone;
  }
  // Each acknowledgement and response says whether the responder holds
  // packets after a gap (kBthSelectiveRetransmission), which is what makes
  // resending the NAKed PSN alone enough.
  response.r.selective = core_.config.selective_retransmission &&
                         (response.p.fields.bth.reserved7 & kBthSelectiveRetransmission) != 0;
  return response.acknowledge ? CompleterStep::kCheckAck : CompleterStep::kRetireEarlier;
}

CompleterStep Completer::CheckAck(const Response& response) {
  const AethFields& aeth = response.p.fields.aeth;
  switch (aeth.kind()) {
    case AethKind::kAck:
      return CompleterStep::kAck;
    case AethKind::kRnrNak:
      response.qp->counters.rnr_naks_received++;
      core_.counters.rnr_naks_received++;
      return CompleterStep::kRnrNak;
    case AethKind::kNak:
      response.qp->counters.naks_received++;
      core_.counters.naks_received++;
      SignalLoss(response.qp);
      return static_cast<NakCode>(aeth.value()) == NakCode::kPsnSequenceError ? CompleterStep::kSequenceNak
                                                                              : CompleterStep::kFatalNak;
    default:
      return CompleterStep::kDone;  // reserved syndrome: ignore
  }
}

CompleterStep Completer::Ack(const Response& response) {
  // A later PSN ACKed while a READ/atomic before it got no response: the
  // response was lost (the responder ACKs only after its READ responses);
  // ask again, for the missing part alone when the responder is selective.
  if (!RetireThrough(response.qp, response.psn)) {
    if (response.r.selective) {
      NoteExecuted(response.r, response.psn);
      RequestSelectiveResend(response.qp, OldestWaiting(response.qp));
    } else {
      RestartOldest(response.qp);
    }
  }
  AcknowledgeThrough(response.qp, response.psn);
  return CompleterStep::kDone;
}

CompleterStep Completer::RnrNak(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  RetireThrough(qp, psn - 1);
  AcknowledgeThrough(qp, psn - 1);
  // rnr_retry 7 means "retry for ever" (IBTA 9.7.5.2.8, ibv_modify_qp(3)).
  if (qp->attr.rnr_retry != 7) {
    if (r.rnr_retries_left == 0) {
      FailOldest(qp, IBV_WC_RNR_RETRY_EXC_ERR);
      return CompleterStep::kDone;
    }
    --r.rnr_retries_left;
  }
  requester_.RestartFrom(qp, psn);
  r.rnr_resume_ns = core_.Now() + RnrTimerNs(p.fields.aeth.value());
  r.timer.Disarm();  // armed again when sending resumes
  return CompleterStep::kDone;
}

CompleterStep Completer::SequenceNak(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  // Everything before `psn` arrived; resend from it (IBTA 9.7.5.2.4), or,
  // when the responder holds what came after it, resend it alone.
  if (!RetireThrough(qp, psn - 1)) {
    if (r.selective) {
      NoteExecuted(r, psn - 1);
      RequestSelectiveResend(qp, psn);
    } else {
      RestartOldest(qp);
    }
  } else if (r.selective) {
    RequestSelectiveResend(qp, psn);
  } else {
    requester_.RestartFrom(qp, psn);
  }
  AcknowledgeThrough(qp, psn - 1);
  return CompleterStep::kDone;
}

CompleterStep Completer::FatalNak(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  RetireThrough(qp, psn - 1);
  const auto code = static_cast<NakCode>(p.fields.aeth.value());
  ibv_wc_status status = IBV_WC_REM_OP_ERR;
  if (code == NakCode::kInvalidRequest || code == NakCode::kInvalidRdRequest) status = IBV_WC_REM_INV_REQ_ERR;
  if (code == NakCode::kRemoteAccessError) status = IBV_WC_REM_ACCESS_ERR;
  FailOldest(qp, status);
  return CompleterStep::kDone;
}

CompleterStep Completer::RetireEarlier(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  // A response implicitly acknowledges every request before it.
  if (!RetireThrough(qp, psn - 1)) {
    const SendSlot& pending = r.window[r.head & r.window_mask];
    if (pending.last_psn.DistanceFrom(psn) < 0) {
      if (r.selective) {
        // A later READ's response while the oldest still misses a part: it
        // is placed now, and the missing part asked for.
        NoteExecuted(r, psn);
        if (p.opcode->operation == Operation::kRdmaReadResponse) {
          AnchorReadAhead(r, OldestWaiting(qp));
          PlaceAhead(qp, psn, p);
        }
        RequestSelectiveResend(qp, OldestWaiting(qp));
        return CompleterStep::kDone;
      }
      RestartOldest(qp);
      return CompleterStep::kDone;
    }
  }
  return r.head == r.tail ? CompleterStep::kDone : CompleterStep::kMatchRequest;
}

CompleterStep Completer::MatchRequest(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  const SendSlot& slot = r.window[r.head & r.window_mask];
  if (!slot.started || !slot.read_or_atomic || psn.DistanceFrom(slot.first_psn) < 0 ||
      slot.last_psn.DistanceFrom(psn) < 0) {
    return CompleterStep::kDone;  // not the response we wait for
  }
  if (slot.wqe->opcode == IBV_WR_ATOMIC_WRITE) return CompleterStep::kAtomicWriteDone;
  if (p.opcode->operation == Operation::kAtomicAcknowledge) return CompleterStep::kAtomicResult;
  return CompleterStep::kReadData;
}

CompleterStep Completer::AtomicWriteDone(const Response& response) {
  const PacketView& p = response.p;
  // Its answer (as Linux rxe sends it): a READ response Only with no data.
  if (p.opcode->operation != Operation::kRdmaReadResponse) return CompleterStep::kDone;
  if (p.opcode->position != MessagePosition::kOnly || p.fields.payload_length != 0) {
    FailOldest(response.qp, IBV_WC_BAD_RESP_ERR);
    return CompleterStep::kDone;
  }
  return CompleterStep::kComplete;
}

CompleterStep Completer::AtomicResult(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  const SendSlot& slot = r.window[r.head & r.window_mask];
  if (slot.wqe->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && slot.wqe->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
    return CompleterStep::kDone;
  }
  const uint64_t original = p.fields.atomic_ack_eth.original_remote_data;
  if (!ScatterToWqe(qp, slot.wqe, 0, reinterpret_cast<const uint8_t*>(&original), sizeof(original))) {
    // The result buffer was deregistered, or is an implicit on-demand
    // region's page that cannot be had.
    FailOldest(qp, IBV_WC_LOC_PROT_ERR);
    return CompleterStep::kDone;
  }
  return CompleterStep::kComplete;
}

CompleterStep Completer::ReadData(const Response& response) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  SendSlot& slot = r.window[r.head & r.window_mask];
  if (slot.wqe->opcode != IBV_WR_RDMA_READ) return CompleterStep::kDone;
  const Psn expected = slot.first_psn + static_cast<uint32_t>(slot.bytes_done / qp->mtu_bytes);
  const int32_t ahead = psn.DistanceFrom(expected);
  if (ahead < 0) return CompleterStep::kDone;  // a duplicate response
  if (p.staged_link != 0) return ReadStagedChunk(response, slot, expected, ahead);
  if (r.selective) {
    // Placement by PSN is idempotent: what comes after a gap is placed as it
    // arrives, and only the missing run is asked for again.
    AnchorReadAhead(r, expected);
    if (ahead > 0) {
      qp->counters.out_of_sequence++;
      core_.counters.out_of_sequence++;
      PlaceAhead(qp, psn, p);
      RequestSelectiveResend(qp, expected);
      return CompleterStep::kDone;
    }
    if (!PlaceReadPacket(qp, slot, psn, p, /*fail_on_error=*/true)) return CompleterStep::kDone;
    r.read_ahead.set(0);
    ConsumePlacedReads(qp);
    return CompleterStep::kDone;
  }
  if (ahead > 0) {
    // A response packet was lost: ask for the rest again (go-back-N).
    qp->counters.out_of_sequence++;
    core_.counters.out_of_sequence++;
    RestartOnce(qp, expected);
    return CompleterStep::kDone;
  }
  const uint64_t remaining = slot.wqe->total_length - slot.bytes_done;
  const bool last = p.opcode->ends_message();
  const uint32_t len = p.fields.payload_length;
  // Each response but the last carries exactly one MTU (IBTA 9.7.5.1.3).
  if (len > remaining || (!last && len != qp->mtu_bytes) || (last && len != remaining)) {
    FailOldest(qp, IBV_WC_BAD_RESP_ERR);
    return CompleterStep::kDone;
  }
  if (!ScatterToWqe(qp, slot.wqe, slot.bytes_done, p.payload, len)) {
    FailOldest(qp, IBV_WC_LOC_PROT_ERR);  // a target buffer was deregistered (or
                                          // unmapped: implicit ODP)
    return CompleterStep::kDone;
  }
  slot.bytes_done += len;
  if (!last) {
    AcknowledgeThrough(qp, psn);
    return CompleterStep::kDone;
  }
  return CompleterStep::kComplete;
}

// One READ response packet placed where its PSN says. Selective responses
// come in any order and a re-requested run ends with a Last opcode in the
// middle of the READ, so the length is checked against the packet's place
// (every packet but the READ's last carries one MTU, IBTA 9.7.5.1.3), not
// against its opcode. A packet of the oldest READ that fails fails the READ;
// one of a later READ is only dropped (that READ fails in order, if the
// packet sent again fails too).
bool Completer::PlaceReadPacket(QueuePair* qp, const SendSlot& slot, Psn psn, const PacketView& p,
                                bool fail_on_error) {
  const uint64_t offset = uint64_t(psn.DistanceFrom(slot.first_psn)) * qp->mtu_bytes;
  const uint64_t total = slot.wqe->total_length;
  if (offset > total || p.fields.payload_length != std::min<uint64_t>(qp->mtu_bytes, total - offset) ||
      (offset + qp->mtu_bytes >= total) != (psn.value() == slot.last_psn.value())) {
    if (fail_on_error) FailOldest(qp, IBV_WC_BAD_RESP_ERR);
    return false;
  }
  if (!ScatterToWqe(qp, slot.wqe, offset, p.payload, p.fields.payload_length)) {
    if (fail_on_error) FailOldest(qp, IBV_WC_LOC_PROT_ERR);
    return false;
  }
  return true;
}

// The staged chunk `p` of READ `slot`, whose first PSN is `psn`: checked as
// its packets would be (it lies within the READ, every chunk but the READ's
// last carries whole MTUs), copied from the link's area while the area
// says it holds what the descriptor names, and found intact after. A
// chunk filled again meanwhile (kGone) is only lost: the responder may
// have given it up waiting for us, so it is asked for again.
Completer::StagedPlacement Completer::PlaceStagedRead(QueuePair* qp, const SendSlot& slot, Psn psn,
                                                      const PacketView& p, uint32_t* span) {
  StagedChunk chunk;
  if (!ParseStagedChunk(p.payload, p.fields.payload_length, &chunk)) return StagedPlacement::kBadResponse;
  const uint32_t mtu = qp->mtu_bytes;
  const uint64_t offset = uint64_t(psn.DistanceFrom(slot.first_psn)) * mtu;
  const uint64_t total = slot.wqe->total_length;
  if (offset >= total) return StagedPlacement::kBadResponse;
  const uint64_t left = total - offset;
  const uint32_t packets = (chunk.length + mtu - 1) / mtu;
  if (chunk.length > left || (chunk.length != left && chunk.length % mtu != 0)) return StagedPlacement::kBadResponse;
  PeerMemory* peer = core_.config.peer_memory;
  const uint8_t* data = peer->StagedData(p.staged_link, chunk.chunk, chunk.sequence, chunk.length);
  if (data == nullptr) return StagedPlacement::kGone;
  if (!ScatterToWqe(qp, slot.wqe, offset, data, chunk.length)) return StagedPlacement::kLocalProtection;
  if (!peer->StagedIntact(p.staged_link, chunk.chunk, chunk.sequence)) return StagedPlacement::kGone;
  core_.counters.staged_received++;
  core_.counters.staged_bytes += chunk.length;
  *span = packets;
  return StagedPlacement::kPlaced;
}

CompleterStep Completer::ReadStagedChunk(const Response& response, SendSlot& oldest, Psn expected, int32_t ahead) {
  const auto& [qp, p, r, psn, acknowledge] = response;
  if (ahead > 0) {
    qp->counters.out_of_sequence++;
    core_.counters.out_of_sequence++;
  }
  if (!r.selective) {
    if (ahead > 0) {
      RestartOnce(qp, expected);  // a response was lost: the rest again (go-back-N)
      return CompleterStep::kDone;
    }
    uint32_t span = 0;
    switch (PlaceStagedRead(qp, oldest, psn, p, &span)) {
      case StagedPlacement::kPlaced:
        break;
      case StagedPlacement::kGone:
        core_.counters.staged_failures++;
        RestartOnce(qp, expected);
        return CompleterStep::kDone;
      case StagedPlacement::kBadResponse:
        FailOldest(qp, IBV_WC_BAD_RESP_ERR);
        return CompleterStep::kDone;
      case StagedPlacement::kLocalProtection:
        FailOldest(qp, IBV_WC_LOC_PROT_ERR);
        return CompleterStep::kDone;
    }
    oldest.bytes_done = std::min<uint64_t>(oldest.wqe->total_length, oldest.bytes_done + uint64_t{span} * qp->mtu_bytes);
    if (oldest.bytes_done < oldest.wqe->total_length) {
      AcknowledgeThrough(qp, psn + (span - 1));
      return CompleterStep::kDone;
    }
    return CompleterStep::kComplete;
  }
  // Selective: placed by PSN, as its packets would be (PlaceAhead), and
  // remembered in read_ahead; a chunk of a later READ fails nothing.
  AnchorReadAhead(r, expected);
  bool placed = false;
  const SendSlot* slot = ahead > 0 ? requester_.SlotOf(qp, psn) : &oldest;
  if (slot != nullptr && slot->started && slot->wqe->opcode == IBV_WR_RDMA_READ) {
    const bool of_oldest = slot == &oldest;
    uint32_t span = 0;
    switch (PlaceStagedRead(qp, *slot, psn, p, &span)) {
      case StagedPlacement::kPlaced:
        // Beyond the map it counts as not placed, and comes again.
        for (uint32_t k = uint32_t(ahead); k < uint32_t(ahead) + span && k < RequesterState::kReadAheadPackets; ++k) {
          r.read_ahead.set(k);
        }
        placed = true;
        break;
      case StagedPlacement::kGone:
        core_.counters.staged_failures++;
        break;
      case StagedPlacement::kBadResponse:
        if (of_oldest) FailOldest(qp, IBV_WC_BAD_RESP_ERR);
        return CompleterStep::kDone;
      case StagedPlacement::kLocalProtection:
        if (of_oldest) FailOldest(qp, IBV_WC_LOC_PROT_ERR);
        return CompleterStep::kDone;
    }
  }
  if (ahead > 0 || !placed) {
    // A gap before it, or the oldest's next run lost: that run again now.
    RequestSelectiveResend(qp, expected);
    return CompleterStep::kDone;
  }
  ConsumePlacedReads(qp);
  return CompleterStep::kDone;
}

// read_ahead follows the oldest READ's first missing PSN.
void Completer::AnchorReadAhead(RequesterState& r, Psn expected) {
  const int32_t moved = expected.DistanceFrom(r.read_ahead_from);
  if (moved == 0) return;
  if (moved > 0 && uint32_t(moved) < RequesterState::kReadAheadPackets) {
    r.read_ahead >>= uint32_t(moved);
  } else {
    r.read_ahead.reset();
  }
  r.read_ahead_from = expected;
}

// A response packet after the oldest READ's gap, of that READ or a later one,
// placed and remembered. Beyond the map it is dropped; it comes again.
void Completer::PlaceAhead(QueuePair* qp, Psn psn, const PacketView& p) {
  RequesterState& r = qp->req;
  const int32_t k = psn.DistanceFrom(r.read_ahead_from);
  if (k <= 0 || uint32_t(k) >= RequesterState::kReadAheadPackets || r.read_ahead.test(uint32_t(k))) return;
  const SendSlot* slot = requester_.SlotOf(qp, psn);
  if (slot == nullptr || !slot->started || slot->wqe->opcode != IBV_WR_RDMA_READ) return;
  const bool oldest = slot == &r.window[r.head & r.window_mask];
  if (!PlaceReadPacket(qp, *slot, psn, p, /*fail_on_error=*/oldest)) return;
  r.read_ahead.set(uint32_t(k));
}

// The oldest READ takes every packet placed right after what it had; a READ
// so completed retires, the requests after it that the responder said it
// executed retire too, and the next READ takes its placed packets, until one
// still misses a packet (asked for again if packets after it are here).
void Completer::ConsumePlacedReads(QueuePair* qp) {
  RequesterState& r = qp->req;
  for (;;) {
    if (r.executed_known && AckPsnValid(qp, r.executed_through)) RetireThrough(qp, r.executed_through);
    if (r.head == r.tail || qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR) return;
    SendSlot& slot = r.window[r.head & r.window_mask];
    if (!slot.started || slot.wqe->opcode != IBV_WR_RDMA_READ) return;
    uint32_t index = static_cast<uint32_t>(slot.bytes_done / qp->mtu_bytes);
    AnchorReadAhead(r, slot.first_psn + index);
    while (r.read_ahead.test(0) && index < slot.packets) {
      ++index;
      slot.bytes_done = std::min<uint64_t>(slot.wqe->total_length, uint64_t(index) * qp->mtu_bytes);
      r.read_ahead >>= 1;
    }
    r.read_ahead_from = slot.first_psn + index;
    if (index == slot.packets) {
      RetireOldestAnswered(qp);
      continue;
    }
    if (index > 0) AcknowledgeThrough(qp, r.read_ahead_from - 1);
    // Packets after the gap are here already: a loss, not a response still
    // on its way.
    if (r.read_ahead.any()) RequestSelectiveResend(qp, r.read_ahead_from);
    return;
  }
}

void Completer::NoteExecuted(RequesterState& r, Psn psn) {
  if (!r.executed_known || psn.DistanceFrom(r.executed_through) > 0) {
    r.executed_known = true;
    r.executed_through = psn;
  }
}

void Completer::RetireOldestAnswered(QueuePair* qp) {
  RequesterState& r = qp->req;
  // Through its last PSN: a selective READ completes on whichever packet
  // fills its last gap.
  const Psn last_psn = r.window[r.head & r.window_mask].last_psn;
  // Retired first, so that the acknowledgement moves past it.
  --r.reads_in_flight;
  completions_.RetireOldestSend(qp, IBV_WC_SUCCESS);
  if (r.next_send < r.head) {
    r.next_send = r.head;  // it was being (re)sent; move on
    r.send_offset = 0;
  }
  AcknowledgeThrough(qp, last_psn);
}

CompleterStep Completer::Complete(const Response& response) {
  RetireOldestAnswered(response.qp);
  // Later READs' packets may wait placed behind it.
  if (response.r.selective) ConsumePlacedReads(response.qp);
  return CompleterStep::kDone;
}

bool Completer::ScatterToWqe(const QueuePair* qp, const SendWqeView& w, uint64_t offset, const uint8_t* data,
                             uint32_t length) const {
  // A zero-length READ (no SGEs) has nothing to place.
  return core_.ForEachSgePiece(qp, w, offset, length, IBV_ACCESS_LOCAL_WRITE,
                               [&data](MrCheck how, uint8_t* host, uint32_t bytes) {
                                 if (!MrWrite(how, host, data, bytes)) return false;
                                 data += bytes;
                                 return true;
                               });
}

// The local ACK timer (IBTA 9.7.6.1.3) and the faster retransmissions
// before it (transport/retransmit_timer.h): the application's timeout
// passing without progress spends a retry and resends from the oldest
// unacknowledged PSN, up to retry_cnt times; the RTO resends the same
// without spending one; the tail-loss probe sends the last packet again.
void Completer::RunTimers(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  RequesterState& r = qp->req;
  const uint64_t deadline = r.timer.deadline_ns();
  if (!IsReliable(qp->type) || deadline == 0) return;
  const uint64_t now = core_.TimerNow();
  if (now < deadline) return;
  if (r.unacked.DistanceFrom(r.sent_limit) >= 0) {  // nothing outstanding
    r.timer.Disarm();
    return;
  }
  switch (r.timer.Expire(now, LocalAckTimeoutNs(qp->attr.timeout), core_.config.retransmit)) {
    case RetransmitTimer::Expiry::kNone:
      return;
    case RetransmitTimer::Expiry::kLocalAckTimeout:
      qp->counters.timeouts++;
      core_.counters.timeouts++;
      if (r.retries_left == 0) {
        FailOldest(qp, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      --r.retries_left;
      SignalLoss(qp);
      break;
    case RetransmitTimer::Expiry::kRetransmit:
      // Towards a standard responder a READ or atomic waits for a NAK or the
      // application's timeout (Requester::ResendPacket says why).
      if (!r.selective && requester_.OldestIsReadOrAtomic(qp)) return;
      qp->counters.rto_expiries++;
      core_.counters.rto_expiries++;
      SignalLoss(qp);
      if (r.selective && r.staged.empty() && r.timer.backoff() <= 1) {
        // The responder holds what arrived after the oldest gap: the oldest
        // unacknowledged PSN is what it waits for (of a READ, the first
        // missing run of its response). Only on the first expiry: a second
        // one without a fresh sample means the responder holds nothing
        // past the next gap either (it would have NAKed it), so everything
        // from there goes again, as TCP resends after an RTO (RFC 5681
        // section 3.1). And it never holds staged chunks
        // (Responder::HoldAhead): with any outstanding, all goes again.
        r.resend_pending = true;
        r.resend_psn = r.unacked;
        return;
      }
      break;
    case RetransmitTimer::Expiry::kTailProbe:
      if (requester_.ProbeTail(qp)) {
        qp->counters.tail_probes++;
        core_.counters.tail_probes++;
      }
      return;
  }
  r.gap_restart_armed = false;
  requester_.RestartFrom(qp, r.unacked);
}

}  // namespace uroce::transport
