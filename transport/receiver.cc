// The engine's receive side, on the shared packet parser: incoming frames
// are parsed and checked (ICRC included) before any stage sees them; bad
// input from the wire is counted and dropped, never trusted.
//
// Engine thread only.
#include "transport/receiver.h"

#include <algorithm>

#include "transport/packet_parser.h"
#include "transport/pull_descriptor.h"

namespace uroce::transport {

Receiver::Receiver(EngineCore& core, Transmitter& tx, Responder& responder, Completer& completer)
    : core_(core), tx_(tx), responder_(responder), completer_(completer) {
  rx_burst_.resize(core.config.rx_burst);
  // The loopback stage is received whole in one call.
  rx_done_.resize(std::max<size_t>(core.config.rx_burst, Transmitter::kTxStage));
}

bool Receiver::HandleFrame(rte_mbuf* m, bool from_loopback) {
  PacketView view;
  ParseOptions options;
  options.verify_icrc = true;
  // From another process of this host over a local link: no Ethernet, IP,
  // UDP or ICRC (transport/link_frame.h); the same checks from the BTH on.
  const bool link_frame = core_.config.peer_memory != nullptr && core_.config.peer_memory->LinkFrame(m);
  const ParseError error = link_frame ? ParseLinkFrame(m, &view) : ParsePacket(m, options, &view);
  if (error != ParseError::kOk) {
    // A link frame is never ARP or ND, whatever its bytes say: a bad one is
    // a parse error, not the neighbour handler's.
    if (!view.is_roce && !link_frame && error != ParseError::kMultiSegmentMbuf) {
      core_.counters.rx_non_roce++;
      if (core_.config.non_roce_handler) {
        core_.config.non_roce_handler(m);  // ARP, ND, ...: the handler owns the mbuf now
        return false;
      }
    } else if (error == ParseError::kBadIcrc) {
      core_.counters.rx_icrc_errors++;
    } else {
      core_.counters.rx_parse_errors++;
    }
    return true;
  }
  // With loopback, frames from our own addresses come only from the loopback
  // stage: one from the port that claims our address is forged (a NIC does
  // not receive its own frames), and would otherwise pass the path check of
  // a QP connected to ourselves, or reach the CM as if we had sent it.
  if (!from_loopback && core_.IsLoopbackGid(view.fields.src_gid)) {
    core_.counters.rx_path_mismatch++;
    return true;
  }
  const uint8_t link_form = view.fields.bth.reserved7 & (kBthPullDescriptor | kBthStagedChunk);
  if (link_form == kBthPullDescriptor) {
    // A pull descriptor is only taken from a process whose memory we may
    // read, over the link it came by (transport/peer_memory.h); from
    // anywhere else (a wire, the daemon's switch, a process that may not)
    // it is dropped before it reaches any QP.
    view.pull_source = core_.config.peer_memory != nullptr ? core_.config.peer_memory->PullSource(m) : 0;
    if (view.pull_source == 0 || view.opcode->role != PacketRole::kRequest) {
      core_.counters.pulls_refused++;
      return true;
    }
  } else if (link_form != 0) {
    // A staged chunk only over a link (its data is in that link's file),
    // in a request or a READ response; both flags at once is neither.
    view.staged_link = core_.config.peer_memory != nullptr && link_form == kBthStagedChunk
                           ? core_.config.peer_memory->LinkSource(m)
                           : 0;
    if (view.staged_link == 0 ||
        (view.opcode->role != PacketRole::kRequest && view.opcode->role != PacketRole::kReadResponse)) {
      core_.counters.staged_refused++;
      return true;
    }
  }
  QueuePair* qp = core_.LookupQp(view.fields.bth.dest_qp);
  if (qp == nullptr) {
    core_.counters.rx_unknown_qp++;
    return true;
  }
  if (view.pull_source != 0 && qp->type != IBV_QPT_RC) {
    core_.counters.pulls_refused++;  // only RC messages go as descriptors
    return true;
  }
  if (view.staged_link != 0 && qp->type != IBV_QPT_RC) {
    core_.counters.staged_refused++;
    return true;
  }
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  // The packet's service must match the QP's (IBTA 9.6.1.1).
  const TransportService want = qp->type == IBV_QPT_RC   ? TransportService::kRc
                                : qp->type == IBV_QPT_UC ? TransportService::kUc
                                : qp->type == IBV_QPT_UD ? TransportService::kUd
                                                         : TransportService::kXrc;
  const OpcodeInfo& info = *view.opcode;
  // P_Key (IBTA 10.9.3): the port's table holds only the default key, a
  // full member; the low 15 bits must match (a limited member's key too, as
  // one side, ours, is a full member).
  if ((view.fields.bth.pkey & 0x7FFF) != (kDefaultPkey & 0x7FFF)) {
    core_.counters.rx_bad_pkey++;
    return true;
  }
  // A connected QP talks to one peer (IBTA 9.6.1.1: the packet's source and
  // destination must be the QP's path): anything else is a forgery or a
  // stray, never an ACK or a request of this connection.
  if (qp->type != IBV_QPT_UD && state != IBV_QPS_RESET && state != IBV_QPS_INIT &&
      (view.fields.src_gid != qp->path.dgid || view.fields.dst_gid != qp->path.sgid)) {
    core_.counters.rx_path_mismatch++;
    return true;
  }
  if (info.role == PacketRole::kCongestionNotification) {
    // A CNP comes from the peer's receiver and answers no request: no PSN,
    // no state of the connection changes. A UD QP has no peer to check it
    // against, and no congestion control.
    if (qp->type == IBV_QPT_UD) core_.counters.cnps_ignored++;
    else completer_.HandleCongestionNotification(qp);
    return true;
  }
  qp->counters.rx_packets++;
  qp->counters.rx_bytes += view.fields.payload_length;
  // An XRC initiator has no receive side and takes only responses; an XRC
  // target has no send side and takes only requests (IBTA annex A14, XRC).
  const bool wrong_xrc_half = (qp->type == IBV_QPT_XRC_SEND && info.role == PacketRole::kRequest) ||
                              (qp->type == IBV_QPT_XRC_RECV && info.role != PacketRole::kRequest);
  if (info.service != want || wrong_xrc_half || state == IBV_QPS_RESET || state == IBV_QPS_INIT ||
      state == IBV_QPS_ERR) {
    core_.counters.rx_dropped++;
    return true;
  }
  // Data the peer sent that a congested queue marked (RFC 3168): the
  // notification point answers with a CNP. Acknowledgements carry no data
  // to slow down.
  if ((view.fields.traffic_class & kEcnMask) == kEcnCe && info.role != PacketRole::kAcknowledge &&
      qp->type != IBV_QPT_UD) {
    responder_.NoteCongestionExperienced(qp);
  }
  if (info.role == PacketRole::kRequest) {
    if (responder_.HandleRequest(qp, view, m)) return false;  // held: the responder's now
  } else if (state == IBV_QPS_RTS || state == IBV_QPS_SQD) {
    if (info.operation == Operation::kAcknowledge) completer_.HandleAcknowledge(qp, view);
    else completer_.HandleResponse(qp, view);
  } else {
    core_.counters.rx_dropped++;
  }
  return true;
}

void Receiver::ReceiveLoopback() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // Only what the last poll staged: anything the receive path stages to
  // ourselves now waits for the next poll, so one poll's work stays bounded.
  rte_mbuf* const* frames = nullptr;
  const uint32_t n = tx_.LoopbackFrames(&frames);
  if (n == 0) return;
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    core_.counters.rx_frames++;
    core_.counters.rx_bytes += rte_pktmbuf_pkt_len(frames[i]);
    if (HandleFrame(frames[i], /*from_loopback=*/true)) rx_done_[done++] = frames[i];
  }
  rte_pktmbuf_free_bulk(rx_done_.data(), done);
  tx_.ReleaseLoopback(n);
}

void Receiver::ReceiveBurst() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // Up to kRxBurstsPerPoll bursts, so that receiving keeps pace with what the
  // QPs may send in one poll.
  for (int burst = 0; burst < kRxBurstsPerPoll; ++burst) {
    const uint16_t n = core_.config.io->RxBurst(rx_burst_.data(), static_cast<uint16_t>(rx_burst_.size()));
    uint32_t done = 0;
    for (uint16_t i = 0; i < n; ++i) {
      core_.counters.rx_frames++;
      core_.counters.rx_bytes += rte_pktmbuf_pkt_len(rx_burst_[i]);
      if (HandleFrame(rx_burst_[i])) rx_done_[done++] = rx_burst_[i];
    }
    // Handled frames go back to the pool in one bulk call.
    rte_pktmbuf_free_bulk(rx_done_.data(), done);
    if (n < rx_burst_.size()) break;
  }
}

}  // namespace uroce::transport
