// Requester (IBTA vol. 1, 9.5 and 9.7.4): turns send work requests into
// packets. Segmentation by path MTU, PSN assignment modulo 2^24, the AckReq
// bit on the last packet of a message and every `ack_request_every` packets,
// the outstanding-PSN window, max_rd_atomic and IBV_SEND_FENCE, and the
// restart point for go-back-N retransmission. UD and UC requests complete as
// soon as their last packet is handed to the wire, as on a RoCE NIC.
//
// Engine thread only.
#include "transport/requester.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "transport/opcode.h"
#include "transport/pull_descriptor.h"

namespace uroce::transport {
namespace {

// Requests answered by a READ response or an atomic ACK, which take one of
// the responder's resources (max_rd_atomic). An ATOMIC WRITE is one: Linux
// rxe answers it with a zero-length READ response from its resources.
bool IsReadOrAtomic(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
         op == IBV_WR_ATOMIC_WRITE;
}

uint32_t PacketsFor(uint64_t length, uint32_t mtu) {
  return length == 0 ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
}

// The opcode of a SEND or WRITE packet from its place in the message
// (IBTA table 38). `base`: the service's (0x00 RC, 0x20 UC, 0xA0 XRC).
uint8_t SegmentOpcode(ibv_wr_opcode op, bool first, bool last, uint8_t base) {
  const bool write = op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool imm = op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool inv = op == IBV_WR_SEND_WITH_INV;
  Opcode code;
  if (write) {
    if (first && last) code = imm ? Opcode::kRcRdmaWriteOnlyWithImmediate : Opcode::kRcRdmaWriteOnly;
    else if (first) code = Opcode::kRcRdmaWriteFirst;
    else if (last) code = imm ? Opcode::kRcRdmaWriteLastWithImmediate : Opcode::kRcRdmaWriteLast;
    else code = Opcode::kRcRdmaWriteMiddle;
  } else {
    if (first && last) {
      code = imm ? Opcode::kRcSendOnlyWithImmediate : inv ? Opcode::kRcSendOnlyWithInvalidate : Opcode::kRcSendOnly;
    } else if (first) {
      code = Opcode::kRcSendFirst;
    } else if (last) {
      code = imm ? Opcode::kRcSendLastWithImmediate : inv ? Opcode::kRcSendLastWithInvalidate : Opcode::kRcSendLast;
    } else {
      code = Opcode::kRcSendMiddle;
    }
  }
  return static_cast<uint8_t>(base + static_cast<uint8_t>(code));
}

}  // namespace

uint64_t LocalAckTimeoutNs(uint8_t timeout) {
  if (timeout == 0) return 0;
  return 4096ull << std::min<uint8_t>(timeout, 31);  // 4096 ns = 4.096 us
}

bool Requester::StartSendWqe(QueuePair* qp, SendSlot& slot) {
  RequesterState& r = qp->req;
  const SendWqeHeader& w = slot.wqe.header();
  // Local protection before any byte moves (IBTA 10.6.3.1): every SGE must
  // name a region of this PD, and READ / atomic targets must be writable
  // (an ATOMIC WRITE's SGEs are its source: read only).
  const int needed = IsReadOrAtomic(w.opcode) && w.opcode != IBV_WR_ATOMIC_WRITE ? IBV_ACCESS_LOCAL_WRITE : 0;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const Sge sge = slot.wqe.sge(i);
    uint8_t* host = nullptr;
    if (sge.length == 0) continue;
    // An implicit on-demand region passes here; its memory is found (or
    // not: a local protection error then) when each packet copies it.
    if (!MrGranted(core_.mrs.CheckLocal(sge.lkey, qp->pd, sge.addr, sge.length, needed, &host))) return false;
  }
  slot.read_or_atomic = IsReadOrAtomic(w.opcode);
  slot.packets = (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
                     ? 1
                     : PacketsFor(w.total_length, qp->mtu_bytes);
  slot.first_psn = r.sent_limit;
  slot.last_psn = r.sent_limit + (slot.packets - 1);
  r.sent_limit = slot.last_psn + 1;
  slot.bytes_done = 0;
  slot.started = true;
  slot.counted_in_flight = false;
  slot.pull_allowed = true;
  return true;
}

bool Requester::CopyFromWqe(const QueuePair* qp, const SendWqeView& w, uint64_t offset, uint8_t* dest,
                            uint32_t length) const {
  if (w->num_sge == 0 && w->opcode == IBV_WR_ATOMIC_WRITE) {  // its 8 bytes, taken at post time
    std::memcpy(dest, w->atomic_write_value + offset, length);
    return true;
  }
  if (w->num_sge == 0) {  // inline data: offset + length <= total_length <= max_inline_data
    std::memcpy(dest, w.inline_data() + offset, length);
    return true;
  }
  // StartSendWqe's check is not enough: every packet checks again.
  return core_.ForEachSgePiece(qp, w, offset, length, 0, [&dest](MrCheck how, const uint8_t* host, uint32_t bytes) {
    if (!MrRead(how, dest, host, bytes)) return false;
    dest += bytes;
    return true;
  });
}

void Requester::Run(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  RequesterState& r = qp->req;
  // Take newly posted requests into the window (credits guarantee room).
  while (qp->TakePostedSend()) {}
  if (r.rnr_resume_ns != 0) {
    if (core_.TimerNow() < r.rnr_resume_ns) return;
    r.rnr_resume_ns = 0;
  }
  if (r.resend_pending && tx_.TxRoom(1)) {
    // Selective retransmission: the one PSN the responder NAKed, first.
    r.resend_pending = false;
    // It answers a NAK, a gap or the RTO towards a selective responder,
    // which answers a copy of a READ or atomic harmlessly: those too.
    if (ResendPacket(qp, r.resend_psn, /*read_or_atomic_too=*/true)) {
      r.last_resent_psn = r.resend_psn;
      r.last_resent_ns = core_.Now();
      qp->counters.selective_resends++;
      core_.counters.selective_resends++;
    }
  }
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  const uint32_t max_reads = std::max<uint32_t>(qp->attr.max_rd_atomic, 1);
  uint32_t budget = core_.config.per_qp_packet_budget;
  while (budget > 0 && r.next_send != r.tail && tx_.TxRoom(1)) {
    SendSlot& slot = r.window[r.next_send & r.window_mask];
    const SendWqeHeader& w = slot.wqe.header();
    if (slot.local_error) break;
    if (!slot.started) {
      if (state == IBV_QPS_SQD) break;  // SQD: finish what started, start nothing new
      // IBV_SEND_FENCE: wait until earlier READs and atomics have completed.
      if ((w.send_flags & IBV_SEND_FENCE) && r.reads_in_flight > 0) break;
      if (IsReadOrAtomic(w.opcode) && r.reads_in_flight >= max_reads) break;
      if (w.opcode == IBV_WR_BIND_MW || w.opcode == IBV_WR_LOCAL_INV) {
        // A local operation runs once every request before it has
        // completed (as if fenced): a bind or an invalidate then takes
        // effect after them and before anything after it starts.
        if (r.next_send != r.head) break;
        if (!RunLocalOperation(qp, w)) break;  // failed: the QP is in ERR
        continue;
      }
      if (!StartSendWqe(qp, slot)) {
        // A bad local key: the request fails and the QP enters ERR (IBTA
        // 10.8.3.1, class B), reported once the requests before it retire.
        slot.local_error = true;
        break;
      }
      r.send_offset = 0;
      r.psn = slot.first_psn;
    }
    if (IsReliable(qp->type)) {
      uint32_t window = core_.config.max_unacked_packets;
      if (qp->cc != nullptr) {
        // Congestion control (congestion/congestion_control.h): its window
        // within the QP's, and its pace.
        const congestion::Allowance& allowed = qp->cc->allowance();
        if (allowed.window_packets != 0) window = std::min(window, allowed.window_packets);
        if (allowed.rate_mbps != 0 && !qp->pacer.Ready(core_.Now())) {
          core_.counters.paced_waits++;
          break;  // stays on the ready list: the next poll looks again
        }
      }
      if (static_cast<uint32_t>(r.psn.DistanceFrom(r.unacked)) >= window) break;  // window full: wait for ACKs
    }
    if (slot.read_or_atomic && !slot.counted_in_flight) {
      slot.counted_in_flight = true;
      ++r.reads_in_flight;
    }
    const bool done = EmitRequestPacket(qp, slot);
    --budget;
    if (stage_wait_) {
      stage_wait_ = false;
      core_.counters.stage_waits++;
      break;  // stays busy: the next poll looks again
    }
    if (done) {
      ++r.next_send;
      r.send_offset = 0;
      if (!IsReliable(qp->type)) {
        // UD and UC: no acknowledgement; complete now, in order.
        completions_.RetireOldestSend(qp, IBV_WC_SUCCESS);  // head was next_send - 1
      }
    }
  }
  // Report a local protection error once everything before it has retired.
  if (r.head != r.tail) {
    SendSlot& oldest = r.window[r.head & r.window_mask];
    if (oldest.local_error) {
      oldest.signaled = true;
      completions_.RetireOldestSend(qp, IBV_WC_LOC_PROT_ERR);
      completions_.EnterError(qp);
    }
  }
}

bool Requester::RunLocalOperation(QueuePair* qp, const SendWqeHeader& w) {
  RequesterState& r = qp->req;
  const bool bind = w.opcode == IBV_WR_BIND_MW;
  bool ok = false;
  if (bind) {
    uint32_t bound = 0;
    ok = core_.mrs.BindWindow(w.rkey, qp->pd, qp->qpn, w.bind.new_rkey, w.bind.mr_lkey, w.remote_addr, w.bind.length,
                              static_cast<int>(w.bind.access_flags), &bound);
  } else {
    ok = core_.mrs.InvalidateWindow(w.invalidate_rkey, qp->pd, qp->qpn, /*remote=*/false);
  }
  // `w` lives in its send queue slot, which retiring hands back to posters:
  // nothing of it is read after this.
  ++r.next_send;
  if (ok) {
    completions_.RetireOldestSend(qp, IBV_WC_SUCCESS);
    return true;
  }
  // A refused bind is IBV_WC_MW_BIND_ERR, a refused invalidate a local QP
  // operation error; either puts the QP in ERR (IBTA 10.8.3.1, class B).
  completions_.RetireOldestSend(qp, bind ? IBV_WC_MW_BIND_ERR : IBV_WC_LOC_QP_OP_ERR);
  completions_.EnterError(qp);
  return false;
}

// Builds the next packet of `slot` at r.send_offset. Returns true when the
// message has no more packets to send in this pass.
bool Requester::EmitRequestPacket(QueuePair* qp, SendSlot& slot) {
  RequesterState& r = qp->req;
  const SendWqeHeader& w = slot.wqe.header();
  // Before anything leaves: its ACK may come as a word in a local link.
  core_.WatchLinkAcks(qp);
  if (!slot.read_or_atomic && core_.config.peer_memory != nullptr && core_.config.pull_min_bytes != 0 &&
      w.total_length >= core_.config.pull_min_bytes) {
    switch (EmitStagedChunk(qp, slot)) {
      case StageOutcome::kNotStaged:
        break;
      case StageOutcome::kSentLast:
        return true;
      case StageOutcome::kWait:
        stage_wait_ = true;
        return false;
      case StageOutcome::kSent:
      case StageOutcome::kNoRoom:
        return false;
    }
  }
  if (slot.pull_allowed && r.send_offset == 0 && core_.config.peer_memory != nullptr &&
      core_.config.pull_min_bytes != 0) {
    const PullOutcome pulled = EmitPullDescriptor(qp, slot);
    if (pulled != PullOutcome::kNotPulled) return pulled == PullOutcome::kSent;
  }
  const uint32_t mtu = qp->mtu_bytes;
  const bool rc = IsReliable(qp->type);
  const bool xrc = qp->type == IBV_QPT_XRC_SEND;
  PacketFields f;
  f.bth.dest_qp = qp->type == IBV_QPT_UD ? w.remote_qpn : qp->attr.dest_qp_num;
  f.bth.solicited_event = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  uint32_t payload = 0;
  bool last = true;
  const PathInfo* path = &qp->path;

  switch (w.opcode) {
    case IBV_WR_RDMA_READ: {
      // One request for what is still missing (a retransmission asks only for
      // the rest, IBTA 9.7.5.1.3 / o9-28).
      const uint64_t done = slot.bytes_done;
      f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaReadRequest);
      f.bth.psn = slot.first_psn + static_cast<uint32_t>(done / mtu);
      f.reth.virtual_address = w.remote_addr + done;
      f.reth.rkey = w.rkey;
      f.reth.dma_length = static_cast<uint32_t>(w.total_length - done);
      // Towards a selective responder a resend asks only for the run still
      // missing before the first packet that arrived after the gap.
      if (resending_ && r.selective && r.read_ahead_from.value() == f.bth.psn.value() && r.read_ahead.any()) {
        size_t missing = 1;
        while (!r.read_ahead.test(missing)) ++missing;
        f.reth.dma_length = static_cast<uint32_t>(std::min<uint64_t>(f.reth.dma_length, missing * mtu));
      }
      f.bth.ack_request = true;
      r.psn = slot.last_psn + 1;
      break;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      f.bth.opcode = static_cast<uint8_t>(w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? Opcode::kRcCompareSwap
                                                                                 : Opcode::kRcFetchAdd);
      f.bth.psn = slot.first_psn;
      f.atomic_eth.virtual_address = w.remote_addr;
      f.atomic_eth.rkey = w.rkey;
      // CmpSwap: swap data, compare data. FetchAdd: add data in the first field.
      f.atomic_eth.swap_or_add_data = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? w.atomic.swap : w.atomic.compare_add;
      f.atomic_eth.compare_data = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? w.atomic.compare_add : 0;
      f.bth.ack_request = true;
      r.psn = slot.last_psn + 1;
      break;
    case IBV_WR_ATOMIC_WRITE:
      // IBTA 1.5 ATOMIC WRITE: one packet, a RETH for the 8 bytes it carries.
      // Its answer is a zero-length READ response (or an ACK covering it,
      // Completer), and it counts against max_rd_atomic (IsReadOrAtomic).
      f.bth.opcode = static_cast<uint8_t>(Opcode::kRcAtomicWrite);
      f.bth.psn = slot.first_psn;
      f.reth.virtual_address = w.remote_addr;
      f.reth.rkey = w.rkey;
      f.reth.dma_length = 8;
      f.bth.ack_request = true;
      payload = 8;
      r.psn = slot.last_psn + 1;
      r.send_offset = payload;
      break;
    default: {
      const uint64_t offset = r.send_offset;
      const bool first = offset == 0;
      payload = static_cast<uint32_t>(std::min<uint64_t>(mtu, w.total_length - offset));
      last = offset + payload >= w.total_length;
      if (qp->type == IBV_QPT_UD) {
        f.bth.opcode = static_cast<uint8_t>(w.opcode == IBV_WR_SEND_WITH_IMM ? Opcode::kUdSendOnlyWithImmediate
                                                                            : Opcode::kUdSendOnly);
        // IBTA 10.2.5 / ibv_post_send(3): a Q_Key with the high bit set means
        // "use the QP's own Q_Key".
        f.deth.qkey = (w.remote_qkey & 0x80000000u) ? qp->attr.qkey : w.remote_qkey;
        f.deth.src_qp = qp->qpn;
        if (w.ah_handle < ahs_.size() && ahs_[w.ah_handle].valid) path = &ahs_[w.ah_handle].path;
        f.bth.psn = r.psn;
        r.psn += 1;
      } else {
        f.bth.opcode = SegmentOpcode(w.opcode, first, last, xrc ? kXrcOpcodeBase : rc ? kRcOpcodeBase : 0x20);
        f.bth.psn = slot.first_psn + static_cast<uint32_t>(offset / mtu);
        r.psn = f.bth.psn + 1;
        if (first && (w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
          f.reth.virtual_address = w.remote_addr;
          f.reth.rkey = w.rkey;
          f.reth.dma_length = static_cast<uint32_t>(w.total_length);
        }
      }
      if (last && (w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
        f.immediate_data = ntohl(w.imm_data_be);
      }
      if (last && w.opcode == IBV_WR_SEND_WITH_INV) {
        f.invalidate_rkey = w.invalidate_rkey;
      }
      if (rc) {
        ++r.packets_since_ack_request;
        f.bth.ack_request =
            last || resending_ || r.packets_since_ack_request >= core_.config.ack_request_every;
        if (qp->cc != nullptr) {
          // Congestion control spreads packets out, so ACKs asked for every
          // ack_request_every packets come late: a window smaller than that
          // would wait for an ACK nobody asked for, and a paced QP would see
          // its tail-loss probe and RTO expire between two ACK requests
          // (and resend for nothing). So the packet that fills the window
          // asks, and while paced, every packet asks: the responder answers
          // at the pace, never faster.
          const congestion::Allowance& allowed = qp->cc->allowance();
          if (allowed.rate_mbps != 0 ||
              (allowed.window_packets != 0 &&
               static_cast<uint32_t>((f.bth.psn + 1).DistanceFrom(r.unacked)) >= allowed.window_packets)) {
            f.bth.ack_request = true;
          }
        }
      }
      r.send_offset = offset + payload;
      break;
    }
  }
  if (xrc) {
    // XRC (IBTA annex A14): the same operation at the XRC opcode
    // (RC's plus 0xA0, IBTA table 38), with an XRCETH naming the target's
    // XRC SRQ on every request packet. SEND/WRITE opcodes have their base
    // already; READ and atomic ones were written as RC.
    if (f.bth.opcode < kXrcOpcodeBase) f.bth.opcode = static_cast<uint8_t>(f.bth.opcode + kXrcOpcodeBase);
    f.xrc_srqn = w.remote_qpn;
  }
  if (f.bth.ack_request) r.packets_since_ack_request = 0;
  // Every reliable request offers selective retransmission (READs and
  // atomics too: the responder takes the offer from whatever came last).
  if (rc && core_.config.selective_retransmission) f.bth.reserved7 = kBthSelectiveRetransmission;

  uint8_t* dest = nullptr;
  f.payload_length = payload;
  rte_mbuf* m = tx_.StartPacket(*path, f, &dest);
  if (m == nullptr) {
    // No buffer (or no room to stage it): undo this packet's step and retry
    // on the next poll. UD too: its offset moved like any SEND's, and a retry
    // from the moved offset would send the message empty.
    r.send_offset -= payload;
    r.psn = f.bth.psn;
    return false;
  }
  if (payload > 0 && !CopyFromWqe(qp, slot.wqe, r.send_offset - payload, dest, payload)) {
    // A local buffer was deregistered under the request: it fails with a
    // local protection error once the requests before it retire (class B,
    // IBTA 10.8.3.1); nothing of this packet leaves.
    rte_pktmbuf_free(m);
    r.send_offset -= payload;
    r.psn = f.bth.psn;
    slot.local_error = true;
    return false;
  }
  if (qp->cc != nullptr) {
    // The pace counts the whole frame, as the wire does.
    const uint32_t wire_bytes = rte_pktmbuf_pkt_len(m);
    const uint64_t now = core_.Now();
    const uint64_t rate = qp->cc->allowance().rate_mbps;
    if (rate != 0) qp->pacer.Spend(now, wire_bytes, rate);
    r.timer.SetPaceGap(rate != 0 ? uint64_t{wire_bytes} * 8'000 / rate : 0);
    qp->cc->OnSent(now, wire_bytes);
  }
  tx_.FinishPacket(m);
  if (payload > 0 && !slot.read_or_atomic) slot.pull_allowed = false;  // its data went as packets
  qp->counters.tx_packets++;
  qp->counters.tx_bytes += payload;
  if (rc) {
    // Only a packet sent for the first time is timed (Karn), and only one
    // asking for an ACK: the responder may hold its ACK until then.
    if (r.psn.DistanceFrom(r.sent_high) > 0) {
      r.sent_high = r.psn;
      if (f.bth.ack_request) r.timer.OnFreshAckRequestSent(f.bth.psn, core_.Now());
    }
    if (r.timer.deadline_ns() == 0) {
      r.timer.Arm(core_.Now(), LocalAckTimeoutNs(qp->attr.timeout), core_.config.retransmit);
    }
  }
  return last || slot.read_or_atomic;
}

Requester::PullOutcome Requester::EmitPullDescriptor(QueuePair* qp, SendSlot& slot) {
  RequesterState& r = qp->req;
  const SendWqeHeader& w = slot.wqe.header();
  const bool write = w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool send = w.opcode == IBV_WR_SEND || w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_SEND_WITH_INV;
  // RC only (an XRC or UC peer is taken as packets), not a paced QP (its
  // pace counts wire bytes), data in registered memory (not inline), and a
  // descriptor that fits in one packet.
  if (qp->type != IBV_QPT_RC || !(write || send) || qp->cc != nullptr || w.num_sge == 0 ||
      w.num_sge > kMaxPullSegments || w.total_length < core_.config.pull_min_bytes ||
      w.total_length > kMaxPullBytes || PullDescriptorBytes(w.num_sge) > qp->mtu_bytes ||
      slot.packets > kMaxPullPackets || !core_.config.peer_memory->TakesPulls(qp->attr.dest_qp_num, qp->path.dgid)) {
    return PullOutcome::kNotPulled;
  }
  PullDescriptor d;
  d.packets = slot.packets;
  d.total = w.total_length;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const Sge sge = slot.wqe.sge(i);
    if (sge.length == 0) continue;
    uint8_t* host = nullptr;
    // Plain registered memory only: an on-demand region's pages are the
    // packets' business (a failure is then reported as theirs).
    if (core_.mrs.CheckLocal(sge.lkey, qp->pd, sge.addr, sge.length, 0, &host) != MrCheck::kOk) {
      return PullOutcome::kNotPulled;
    }
    d.segments[d.count++] = {reinterpret_cast<uint64_t>(host), sge.length};
  }
  PacketFields f;
  f.bth.dest_qp = qp->attr.dest_qp_num;
  f.bth.solicited_event = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  f.bth.opcode = SegmentOpcode(w.opcode, /*first=*/true, /*last=*/true, kRcOpcodeBase);
  f.bth.psn = slot.first_psn;
  f.bth.ack_request = true;
  f.bth.reserved7 = kBthPullDescriptor;
  if (core_.config.selective_retransmission) f.bth.reserved7 |= kBthSelectiveRetransmission;
  if (write) {
    f.reth.virtual_address = w.remote_addr;
    f.reth.rkey = w.rkey;
    f.reth.dma_length = static_cast<uint32_t>(w.total_length);
  }
  if (w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    f.immediate_data = ntohl(w.imm_data_be);
  }
  if (w.opcode == IBV_WR_SEND_WITH_INV) f.invalidate_rkey = w.invalidate_rkey;
  f.payload_length = static_cast<uint32_t>(PullDescriptorBytes(d.count));
  uint8_t* dest = nullptr;
  rte_mbuf* m = tx_.StartPacket(qp->path, f, &dest);
  if (m == nullptr) return PullOutcome::kNoRoom;  // nothing moved: the next poll tries again
  WritePullDescriptor(d, dest);
  tx_.FinishPacket(m);
  r.psn = slot.last_psn + 1;
  r.send_offset = w.total_length;
  r.packets_since_ack_request = 0;
  qp->counters.tx_packets++;
  qp->counters.tx_bytes += w.total_length;
  core_.counters.pulls_sent++;
  if (r.psn.DistanceFrom(r.sent_high) > 0) {
    r.sent_high = r.psn;
    r.timer.OnFreshAckRequestSent(slot.last_psn, core_.Now());
  }
  if (r.timer.deadline_ns() == 0) r.timer.Arm(core_.Now(), LocalAckTimeoutNs(qp->attr.timeout), core_.config.retransmit);
  return PullOutcome::kSent;
}

Requester::StageOutcome Requester::EmitStagedChunk(QueuePair* qp, SendSlot& slot) {
  RequesterState& r = qp->req;
  const SendWqeHeader& w = slot.wqe.header();
  const bool write = w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool send = w.opcode == IBV_WR_SEND || w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_SEND_WITH_INV;
  // As for a pull descriptor: RC, not paced, data in registered memory.
  if (qp->type != IBV_QPT_RC || !(write || send) || qp->cc != nullptr || w.num_sge == 0) {
    return StageOutcome::kNotStaged;
  }
  const uint32_t mtu = qp->mtu_bytes;
  const uint64_t offset = r.send_offset;
  StageTicket ticket;
  uint32_t length = 0;
  bool fresh = false;
  if (const StagedChunks::Entry* held = r.staged.Find(r.psn)) {
    // Sent before and not acknowledged: the same chunk again (RestartFrom
    // starts a resend at a held chunk's first PSN).
    if (held->first_psn.value() != r.psn.value()) return StageOutcome::kNotStaged;
    ticket = held->ticket;
    length = held->length;
  } else {
    // A new chunk: up to kStagedChunkBytes of whole packets, within the
    // window, and not over a chunk held further on.
    const uint32_t in_flight = static_cast<uint32_t>(r.psn.DistanceFrom(r.unacked));
    const uint32_t window = core_.config.max_unacked_packets;
    uint32_t packets = std::min<uint32_t>(kStagedChunkBytes / mtu, window > in_flight ? window - in_flight : 1);
    packets = r.staged.FreeRunFrom(r.psn, packets);
    length = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{packets} * mtu, w.total_length - offset));
    if (length == 0) return StageOutcome::kNotStaged;
    iovec pieces[kMaxSendSge];
    uint32_t count = 0;
    const bool plain = core_.ForEachSgePiece(qp, slot.wqe, offset, length, 0,
                                             [&](MrCheck how, const uint8_t* host, uint32_t bytes) {
                                               // Plain registered memory only, as for a pull.
                                               if (how != MrCheck::kOk || count == kMaxSendSge) return false;
                                               pieces[count++] = {const_cast<uint8_t*>(host), bytes};
                                               return true;
                                             });
    if (!plain) return StageOutcome::kNotStaged;
    if (r.staged.full() ||
        !core_.config.peer_memory->Stage(qp->attr.dest_qp_num, qp->path.dgid, pieces, count, &ticket,
                                         StageCopy::kCached)) {
      // No chunk free: wait for our own to come back, or, holding none, go on
      // without (another QP's may be held long, by an RNR wait).
      return r.staged.empty() ? StageOutcome::kNotStaged : StageOutcome::kWait;
    }
    fresh = true;
  }
  const bool first = offset == 0;
  const bool last = offset + length >= w.total_length;
  const uint32_t packets = (length + mtu - 1) / mtu;
  PacketFields f;
  f.bth.dest_qp = qp->attr.dest_qp_num;
  f.bth.solicited_event = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  f.bth.opcode = SegmentOpcode(w.opcode, first, last, kRcOpcodeBase);
  f.bth.psn = r.psn;
  f.bth.ack_request = true;  // each chunk comes back as soon as it is copied
  f.bth.reserved7 = kBthStagedChunk;
  if (core_.config.selective_retransmission) f.bth.reserved7 |= kBthSelectiveRetransmission;
  if (first && write) {
    f.reth.virtual_address = w.remote_addr;
    f.reth.rkey = w.rkey;
    f.reth.dma_length = static_cast<uint32_t>(w.total_length);
  }
  if (last && (w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
    f.immediate_data = ntohl(w.imm_data_be);
  }
  if (last && w.opcode == IBV_WR_SEND_WITH_INV) f.invalidate_rkey = w.invalidate_rkey;
  f.payload_length = static_cast<uint32_t>(kStagedChunkDescriptorBytes);
  uint8_t* dest = nullptr;
  rte_mbuf* m = tx_.StartPacket(qp->path, f, &dest);
  if (m == nullptr) {
    if (fresh) core_.config.peer_memory->Unstage(ticket);  // nothing names it
    return StageOutcome::kNoRoom;
  }
  WriteStagedChunk({.chunk = ticket.chunk, .length = length, .sequence = ticket.sequence}, dest);
  tx_.FinishPacket(m);
  // Out now, so that the receiver copies this chunk while we fill the next.
  tx_.FlushTx();
  const Psn chunk_last = r.psn + (packets - 1);
  if (fresh) r.staged.Push({r.psn, chunk_last, length, ticket});
  slot.pull_allowed = false;  // part of it went: never whole as a pull descriptor
  r.psn = chunk_last + 1;
  r.send_offset = offset + length;
  r.packets_since_ack_request = 0;
  qp->counters.tx_packets++;
  qp->counters.tx_bytes += length;
  core_.counters.staged_sent++;
  if (r.psn.DistanceFrom(r.sent_high) > 0) {
    r.sent_high = r.psn;
    r.timer.OnFreshAckRequestSent(chunk_last, core_.Now());
  }
  if (r.timer.deadline_ns() == 0) r.timer.Arm(core_.Now(), LocalAckTimeoutNs(qp->attr.timeout), core_.config.retransmit);
  return last ? StageOutcome::kSentLast : StageOutcome::kSent;
}

const SendSlot* Requester::SlotOf(const QueuePair* qp, Psn psn) const {
  const RequesterState& r = qp->req;
  for (uint64_t i = r.head; i != r.tail; ++i) {
    const SendSlot& slot = r.window[i & r.window_mask];
    if (!slot.started) break;
    if (psn.DistanceFrom(slot.first_psn) >= 0 && slot.last_psn.DistanceFrom(psn) >= 0) return &slot;
  }
  return nullptr;
}

// Go-back-N (IBTA 9.7.5.2.x): resume sending at `psn`, which lies in one of
// the requests already started.
void Requester::RestartFrom(QueuePair* qp, Psn psn) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  RequesterState& r = qp->req;
  r.timer.ForgetSample();
  for (uint64_t i = r.head; i != r.tail; ++i) {
    SendSlot& slot = r.window[i & r.window_mask];
    if (!slot.started) break;
    if (psn.DistanceFrom(slot.first_psn) >= 0 && slot.last_psn.DistanceFrom(psn) >= 0) {
      r.next_send = i;
      // A message none of whose data went as packets (it went as a pull
      // descriptor, or nothing of it went yet) goes again whole, from its
      // first PSN: the responder takes a descriptor only there.
      if (slot.pull_allowed && !slot.read_or_atomic) psn = slot.first_psn;
      // A staged chunk goes again whole, from its first PSN: the responder
      // takes it only there.
      if (const StagedChunks::Entry* held = r.staged.Find(psn)) psn = held->first_psn;
      if (slot.read_or_atomic) {
        r.send_offset = 0;
      } else {
        r.send_offset = uint64_t(psn.DistanceFrom(slot.first_psn)) * qp->mtu_bytes;
      }
      r.psn = slot.read_or_atomic ? slot.first_psn + static_cast<uint32_t>(slot.bytes_done / qp->mtu_bytes) : psn;
      r.packets_since_ack_request = 0;
      core_.counters.retransmits++;
      qp->counters.retransmits++;
      return;
    }
  }
  // Nothing started covers `psn` (it was retired already): resume at the
  // first started request after it, from where that request stands.
  r.next_send = r.head;
  while (r.next_send != r.tail && r.window[r.next_send & r.window_mask].started &&
         r.window[r.next_send & r.window_mask].last_psn.DistanceFrom(psn) < 0) {
    ++r.next_send;
  }
  r.send_offset = 0;
  if (r.next_send != r.tail && r.window[r.next_send & r.window_mask].started) {
    const SendSlot& slot = r.window[r.next_send & r.window_mask];
    r.psn = slot.read_or_atomic ? slot.first_psn + static_cast<uint32_t>(slot.bytes_done / qp->mtu_bytes)
                                : slot.first_psn;
    r.packets_since_ack_request = 0;
    core_.counters.retransmits++;
    qp->counters.retransmits++;
  } else {
    r.psn = r.sent_limit;  // nothing to resend
  }
}

// The tail-loss probe (retransmit_timer.h): the last packet sent goes out
// again asking for an ACK. The responder answers it as a duplicate (an ACK:
// the tail arrived and its ACK was lost), as the next packet (it was lost),
// or with a PSN sequence NAK (something before it was lost): a round trip
// instead of a timeout.
bool Requester::ProbeTail(QueuePair* qp) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // Never a READ or atomic request: how soon its answer comes depends on
  // the peer's progress (an application that polls now and then) more
  // than on the round trip, and every copy is answered in full again.
  // Towards a selective responder the RTO asks for them (Completer).
  return tx_.TxRoom(1) && ResendPacket(qp, qp->req.sent_high - 1, /*read_or_atomic_too=*/false);
}

// One packet already sent, `psn`, goes out again asking for an ACK, and
// sending then goes on where it stood (a READ or atomic asks again for what
// is still missing of it, if `read_or_atomic_too`).
bool Requester::ResendPacket(QueuePair* qp, Psn psn, bool read_or_atomic_too) {
  RequesterState& r = qp->req;
  if (psn.DistanceFrom(r.unacked) < 0 || psn.DistanceFrom(r.sent_high) >= 0) return false;
  const uint64_t next_send = r.next_send;
  const uint64_t send_offset = r.send_offset;
  const Psn resume_psn = r.psn;
  const uint32_t since_ack_request = r.packets_since_ack_request;
  // A READ or atomic is asked for again only when the responder said it
  // never got it (a NAK), or, towards a selective responder, on the RTO. On
  // a timer it may merely be slow: a copy of the request makes the
  // responder answer it twice, and the second answer may read a region the
  // application has since deregistered, having seen the first (its peer's
  // completion told it). A standard responder fails the connection then; a
  // selective one drops the stale copy (Responder::HandleDuplicateRead) and
  // what its new answer covers (Responder::DropReadJobsCoveredBy).
  const SendSlot* slot = SlotOf(qp, psn);
  if (!read_or_atomic_too && slot != nullptr && slot->read_or_atomic) return false;
  RestartFrom(qp, psn);
  bool sent = false;
  if (r.next_send != r.tail && r.window[r.next_send & r.window_mask].started) {
    resending_ = true;
    const uint64_t tx_before = qp->counters.tx_packets;
    EmitRequestPacket(qp, r.window[r.next_send & r.window_mask]);
    sent = qp->counters.tx_packets != tx_before;
    resending_ = false;
    stage_wait_ = false;  // a resend that found no chunk free: Run's loop is not stopped by it
  }
  r.next_send = next_send;
  r.send_offset = send_offset;
  r.psn = resume_psn;
  r.packets_since_ack_request = since_ack_request;
  return sent;
}

}  // namespace uroce::transport
