// The engine's transmit side, on the shared packet builder: headers are
// written into an mbuf, the stage copies the payload straight from
// registered memory, then the pad and ICRC finish the frame (IBTA A17).
//
// Engine thread only.
#include "transport/transmitter.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "transport/link_frame.h"
#include "transport/packet_builder.h"

namespace uroce::transport {

void Transmitter::FreeAll() {
  rte_pktmbuf_free_bulk(tx_stage_, tx_count_);
  tx_count_ = 0;
  rte_pktmbuf_free_bulk(loopback_stage_, loopback_count_);
  loopback_count_ = 0;
  rte_pktmbuf_free_bulk(tx_spares_, tx_spare_count_);
  tx_spare_count_ = 0;
  rte_mbuf* m = nullptr;
  while (raw_tx_.TryPop(&m)) rte_pktmbuf_free(m);
}

rte_mbuf* Transmitter::AllocTx() {
  if (tx_spare_count_ == 0) {
    if (rte_pktmbuf_alloc_bulk(core_.config.tx_pool, tx_spares_, kTxSpares) != 0) {
      return rte_pktmbuf_alloc(core_.config.tx_pool);
    }
    tx_spare_count_ = kTxSpares;
  }
  return tx_spares_[--tx_spare_count_];
}

rte_mbuf* Transmitter::StartPacket(const PathInfo& path, PacketFields& f, uint8_t** payload) {
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
  HeaderTemplate& tmpl = header_templates_[(reinterpret_cast<uintptr_t>(&path) / alignof(PathInfo)) % kHeaderTemplates];
  if (BeginPacket(f, m, &pending, &tmpl) != BuildError::kOk) {
    // A buffer too small for this MTU, or a bug of ours: never a bad frame.
    rte_pktmbuf_free(m);
    core_.counters.tx_build_errors++;
    return nullptr;
  }
  *payload = pending.payload;
  pending_tx_ = pending;
  pending_loopback_ = path.loopback;
  // To another process of this host over a local link, in link form: no
  // ICRC (transport/link_frame.h). The port writes one if the frame leaves
  // in wire form after all (kIcrcLeftOut).
  pending_without_icrc_ = !path.loopback && core_.config.peer_memory != nullptr &&
                          core_.config.peer_memory->LinkFrameTo(f.bth.dest_qp, path.dgid);
  return m;
}

void Transmitter::FinishPacket(rte_mbuf* m) {
  if (pending_without_icrc_) {
    FinishPacketWithoutIcrc(pending_tx_);
    m->hash.usr = kIcrcLeftOut;
  } else {
    transport::FinishPacket(pending_tx_);
    m->hash.usr = 0;
  }
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

void Transmitter::AbandonPacket(rte_mbuf* m) { rte_pktmbuf_free(m); }

void Transmitter::Stage(rte_mbuf* m) {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  tx_stage_[tx_count_++] = m;
  core_.counters.tx_frames++;
  core_.counters.tx_bytes += rte_pktmbuf_pkt_len(m);
  ++staged_this_poll_;
  staged_bytes_ += rte_pktmbuf_pkt_len(m);
  // Once the port has refused frames this poll, the rest wait for the end
  // of the poll: asking a full queue again every 16 KiB gains nothing.
  if (staged_bytes_ >= kFlushBytes && !port_full_this_poll_) FlushTx();
}

void Transmitter::StageRawFrames() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  rte_mbuf* m = nullptr;
  while (TxRoom(1) && raw_tx_.TryPop(&m)) {
    core_.counters.tx_raw_frames++;
    Stage(m);
  }
}

void Transmitter::FlushTx() {
  UROCE_DCHECK_ENGINE_THREAD(core_);
  staged_bytes_ = 0;
  if (tx_count_ == 0) return;
  const uint16_t want = static_cast<uint16_t>(std::min<uint32_t>(tx_count_, UINT16_MAX));
  const uint16_t sent = core_.config.io->TxBurst(tx_stage_, want);
  if (sent < tx_count_) {
    // Keep the rest, in order, for the next poll: never spin, never drop.
    std::memmove(tx_stage_, tx_stage_ + sent, (tx_count_ - sent) * sizeof(rte_mbuf*));
    if (!port_full_this_poll_) core_.counters.tx_queue_full_polls++;  // once per poll, as its name says
    port_full_this_poll_ = true;
  }
  tx_count_ -= sent;
}

void Transmitter::ReleaseLoopback(uint32_t n) {
  std::memmove(loopback_stage_, loopback_stage_ + n, (loopback_count_ - n) * sizeof(rte_mbuf*));
  loopback_count_ -= n;
}

}  // namespace uroce::transport
