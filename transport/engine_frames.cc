// The engine's frame layer, on the shared packet builder and parser: headers
// are written into an mbuf, the stage copies the payload straight from
// registered memory, then the pad and ICRC finish the frame (IBTA A17).
// Incoming frames are parsed and checked (ICRC included) before any stage
// sees them; bad input from the wire is counted and dropped, never trusted.
//
// Engine thread only.
#include <arpa/inet.h>

#include "transport/engine.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {

rte_mbuf* Engine::StartPacket(const PathInfo& path, PacketFields& f, uint8_t** payload) {
  f.dst_mac = path.dmac;
  f.src_mac = config_.mac;
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
    counters_.tx_stage_full++;
    return nullptr;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(config_.tx_pool);
  if (m == nullptr) {
    counters_.tx_alloc_failures++;
    return nullptr;
  }
  PendingPacket pending;
  if (BeginPacket(f, m, &pending) != BuildError::kOk) {
    // A buffer too small for this MTU, or a bug of ours: never a bad frame.
    rte_pktmbuf_free(m);
    counters_.tx_build_errors++;
    return nullptr;
  }
  *payload = pending.payload;
  pending_tx_ = pending;
  pending_loopback_ = path.loopback;
  return m;
}

void Engine::FinishPacket(rte_mbuf* m) {
  transport::FinishPacket(pending_tx_);
  if (!pending_loopback_) {
    Stage(m);
    return;
  }
  // StartPacket checked the room. The frame is whole (ICRC included), so the
  // receive side checks it as any other.
  loopback_stage_[loopback_count_++] = m;
  counters_.tx_frames++;
  counters_.tx_bytes += rte_pktmbuf_pkt_len(m);
  counters_.loopback_frames++;
}

void Engine::HandleFrame(rte_mbuf* m, bool from_loopback) {
  PacketView view;
  ParseOptions options;
  options.verify_icrc = true;
  const ParseError error = ParsePacket(m, options, &view);
  if (error != ParseError::kOk) {
    if (!view.is_roce && error != ParseError::kMultiSegmentMbuf) {
      counters_.rx_non_roce++;
      if (config_.non_roce_handler) {
        config_.non_roce_handler(m);  // ARP, ND, ...: the handler owns the mbuf now
        return;
      }
    } else if (error == ParseError::kBadIcrc) {
      counters_.rx_icrc_errors++;
    } else {
      counters_.rx_parse_errors++;
    }
    rte_pktmbuf_free(m);
    return;
  }
  // With loopback, frames from our own addresses come only from the loopback
  // stage: one from the port that claims our address is forged (a NIC does
  // not receive its own frames), and would otherwise pass the path check of
  // a QP connected to ourselves, or reach the CM as if we had sent it.
  if (!from_loopback && IsLoopbackGid(view.fields.src_gid)) {
    counters_.rx_path_mismatch++;
    rte_pktmbuf_free(m);
    return;
  }
  QueuePair* qp = LookupQp(view.fields.bth.dest_qp);
  if (qp == nullptr) {
    counters_.rx_unknown_qp++;
    rte_pktmbuf_free(m);
    return;
  }
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  // The packet's service must match the QP's (IBTA 9.6.1.1).
  const TransportService want = qp->type == IBV_QPT_RC   ? TransportService::kRc
                                : qp->type == IBV_QPT_UC ? TransportService::kUc
                                                         : TransportService::kUd;
  const OpcodeInfo& info = *view.opcode;
  // P_Key (IBTA 10.9.3): the port's table holds only the default key, a
  // full member; the low 15 bits must match (a limited member's key too, as
  // one side, ours, is a full member).
  if ((view.fields.bth.pkey & 0x7FFF) != (kDefaultPkey & 0x7FFF)) {
    counters_.rx_bad_pkey++;
    rte_pktmbuf_free(m);
    return;
  }
  // A connected QP talks to one peer (IBTA 9.6.1.1: the packet's source and
  // destination must be the QP's path): anything else is a forgery or a
  // stray, never an ACK or a request of this connection.
  if (qp->type != IBV_QPT_UD && state != IBV_QPS_RESET && state != IBV_QPS_INIT &&
      (view.fields.src_gid != qp->path.dgid || view.fields.dst_gid != qp->path.sgid)) {
    counters_.rx_path_mismatch++;
    rte_pktmbuf_free(m);
    return;
  }
  qp->counters.rx_packets++;
  qp->counters.rx_bytes += view.fields.payload_length;
  if (info.service != want || state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_ERR) {
    counters_.rx_dropped++;
  } else if (info.role == PacketRole::kRequest) {
    HandleRequest(qp, view);
  } else if (state == IBV_QPS_RTS || state == IBV_QPS_SQD) {
    if (info.operation == Operation::kAcknowledge) HandleAcknowledge(qp, view);
    else HandleResponse(qp, view);
  } else {
    counters_.rx_dropped++;
  }
  rte_pktmbuf_free(m);
}

QueuePair* Engine::LookupQp(uint32_t qpn) const {
  QueuePair* qp = qp_table_[qpn % config_.max_qps];
  return (qp != nullptr && qp->qpn == qpn) ? qp : nullptr;
}

}  // namespace uroce::transport
