// The engine's frame layer, on the shared packet builder and parser: headers
// are written into an mbuf, the stage copies the payload straight from
// registered memory, then the pad and ICRC finish the frame (IBTA A17).
// Incoming frames are parsed and checked (ICRC included) before any stage
// sees them; bad input from the wire is counted and dropped, never trusted.
//
// Engine thread only.
#include "transport/transmitter.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "transport/completer.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"
#include "transport/responder.h"

namespace uroce::transport {

FrameIo::FrameIo(EngineCore& core, Responder& responder, Completer& completer)
    : core_(core), responder_(responder), completer_(completer) {
  rx_burst_.resize(core.config.rx_burst);
  rx_done_.resize(std::max<size_t>(core.config.rx_burst, kTxStage));
}

void FrameIo::FreeAll() {
  rte_pktmbuf_free_bulk(tx_stage_, tx_count_);
  tx_count_ = 0;
  rte_pktmbuf_free_bulk(loopback_stage_, loopback_count_);
  loopback_count_ = 0;
  rte_pktmbuf_free_bulk(tx_spares_, tx_spare_count_);
  tx_spare_count_ = 0;
  rte_mbuf* m = nullptr;
  while (raw_tx_.TryPop(&m)) rte_pktmbuf_free(m);
}

rte_mbuf* FrameIo::AllocTx() {
  if (tx_spare_count_ == 0) {
    if (rte_pktmbuf_alloc_bulk(core_.config.tx_pool, tx_spares_, kTxSpares) != 0) {
      return rte_pktmbuf_alloc(core_.config.tx_pool);
    }
    tx_spare_count_ = kTxSpares;
  }
  return tx_spares_[--tx_spare_count_];
}

rte_mbuf* FrameIo::StartPacket(const PathInfo& path, PacketFields& f, uint8_t** payload) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  f.dst_mac = path.dmac;
  f.src_mac = core_.config.mac;
  f.ip_version = path.ipv6 ? IpVersion::kIpv6 : IpVersion::kIpv4;
  f.src_gid = path.sgid;
  f.dst_gid = path.dgid;
  f.traffic_class = path.traffic_class;
  f.hop_limit = path.hop_limit;
  f.ipv6_flow_label = path.flow_label;
  f.udp_src_port = path.udp_source_port;
  // Nothing is built without room in the transmit stage: every caller keeps
  // its work (pending ACK/NAK, READ job, request) for the next poll.
  if (path.loopback ? !LoopbackRoom() : !TxRoom(1)) {
    core_.counters.tx_stage_full++;
    return nullptr;
  }
  rte_mbuf* m = AllocTx();
  if (m == nullptr) {
    core_.counters.tx_alloc_failures++;
    return nullptr;
  }
  PendingPacket pending;
  if (BeginPacket(f, m, &pending) != BuildError::kOk) {
    // A buffer too small for this MTU, or a bug of ours: never a bad frame.
    rte_pktmbuf_free(m);
    core_.counters.tx_build_errors++;
    return nullptr;
  }
  *payload = pending.payload;
  pending_tx_ = pending;
  pending_loopback_ = path.loopback;
  return m;
}

void FrameIo::FinishPacket(rte_mbuf* m) {
  transport::FinishPacket(pending_tx_);
  if (!pending_loopback_) {
    Stage(m);
    return;
  }
  // StartPacket checked the room. The frame is whole (ICRC included), so the
  // receive side checks it as any other.
  loopback_stage_[loopback_count_++] = m;
  core_.counters.tx_frames++;
  core_.counters.tx_bytes += rte_pktmbuf_pkt_len(m);
  core_.counters.loopback_frames++;
}

void FrameIo::AbandonPacket(rte_mbuf* m) { rte_pktmbuf_free(m); }

bool FrameIo::HandleFrame(rte_mbuf* m, bool from_loopback) {
  PacketView view;
  ParseOptions options;
  options.verify_icrc = true;
  const ParseError error = ParsePacket(m, options, &view);
  if (error != ParseError::kOk) {
    if (!view.is_roce && error != ParseError::kMultiSegmentMbuf) {
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
  QueuePair* qp = core_.LookupQp(view.fields.bth.dest_qp);
  if (qp == nullptr) {
    core_.counters.rx_unknown_qp++;
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
  qp->counters.rx_packets++;
  qp->counters.rx_bytes += view.fields.payload_length;
  // An XRC initiator has no receive side and takes only responses; an XRC
  // target has no send side and takes only requests (IBTA annex A14, XRC).
  const bool wrong_xrc_half = (qp->type == IBV_QPT_XRC_SEND && info.role == PacketRole::kRequest) ||
                              (qp->type == IBV_QPT_XRC_RECV && info.role != PacketRole::kRequest);
  if (info.service != want || wrong_xrc_half || state == IBV_QPS_RESET || state == IBV_QPS_INIT ||
      state == IBV_QPS_ERR) {
    core_.counters.rx_dropped++;
  } else if (info.role == PacketRole::kRequest) {
    responder_.HandleRequest(qp, view);
  } else if (state == IBV_QPS_RTS || state == IBV_QPS_SQD) {
    if (info.operation == Operation::kAcknowledge) completer_.HandleAcknowledge(qp, view);
    else completer_.HandleResponse(qp, view);
  } else {
    core_.counters.rx_dropped++;
  }
  return true;
}

void FrameIo::Stage(rte_mbuf* m) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  tx_stage_[tx_count_++] = m;
  core_.counters.tx_frames++;
  core_.counters.tx_bytes += rte_pktmbuf_pkt_len(m);
}

void FrameIo::StageRawFrames() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  rte_mbuf* m = nullptr;
  while (TxRoom(1) && raw_tx_.TryPop(&m)) {
    core_.counters.tx_raw_frames++;
    Stage(m);
  }
}

void FrameIo::FlushTx() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  if (tx_count_ == 0) return;
  const uint16_t want = static_cast<uint16_t>(std::min<uint32_t>(tx_count_, UINT16_MAX));
  const uint16_t sent = core_.config.io->TxBurst(tx_stage_, want);
  if (sent < tx_count_) {
    // Keep the rest, in order, for the next poll: never spin, never drop.
    std::memmove(tx_stage_, tx_stage_ + sent, (tx_count_ - sent) * sizeof(rte_mbuf*));
    core_.counters.tx_queue_full_polls++;
  }
  tx_count_ -= sent;
}

void FrameIo::ReceiveLoopback() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  // Only what the last poll staged: anything the receive path stages to
  // ourselves now waits for the next poll, so one poll's work stays bounded.
  const uint32_t n = loopback_count_;
  if (n == 0) return;
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    core_.counters.rx_frames++;
    core_.counters.rx_bytes += rte_pktmbuf_pkt_len(loopback_stage_[i]);
    if (HandleFrame(loopback_stage_[i], /*from_loopback=*/true)) rx_done_[done++] = loopback_stage_[i];
  }
  rte_pktmbuf_free_bulk(rx_done_.data(), done);
  std::memmove(loopback_stage_, loopback_stage_ + n, (loopback_count_ - n) * sizeof(rte_mbuf*));
  loopback_count_ -= n;
}

void FrameIo::ReceiveBurst() {
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
