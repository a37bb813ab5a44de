// The engine's frame layer: writes the Ethernet/IP/UDP/BTH/extension headers
// of an outgoing packet into an mbuf, lets the stage copy the payload straight
// from registered memory, then pads and adds the ICRC (IBTA A17); and checks
// and decodes incoming frames before the stages see them. Bad input from the
// wire is counted and dropped, never trusted.
//
// Engine thread only.
#include <rte_ip.h>

#include <cstring>

#include "transport/engine.h"
#include "transport/icrc.h"

namespace uroce::transport {
namespace {

constexpr uint32_t kEthernetBytes = 14;
constexpr uint32_t kIpv4Bytes = 20;
constexpr uint32_t kIpv6Bytes = 40;
constexpr uint32_t kUdpBytes = 8;
constexpr uint32_t kBthBytes = 12;

uint16_t Ipv4Checksum(const uint8_t* header) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t(header[i]) << 8) | header[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

rte_mbuf* Engine::StartPacket(const PathInfo& path, const PacketFields& f, uint32_t payload_length,
                              uint8_t** payload) {
  const OpcodeInfo& info = LookupOpcode(f.bth.opcode);
  const uint32_t ip_bytes = path.ipv6 ? kIpv6Bytes : kIpv4Bytes;
  const uint32_t pad = (4 - (payload_length & 3)) & 3;
  const uint32_t roce_bytes = info.header_bytes + payload_length + pad + kIcrcBytes;
  const uint32_t frame_bytes = kEthernetBytes + ip_bytes + kUdpBytes + roce_bytes;
  rte_mbuf* m = rte_pktmbuf_alloc(config_.tx_pool);
  if (m == nullptr) {
    counters_.tx_alloc_failures++;
    return nullptr;
  }
  uint8_t* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(frame_bytes)));
  if (frame == nullptr) {  // the pool's buffers are too small for this MTU
    rte_pktmbuf_free(m);
    counters_.tx_alloc_failures++;
    return nullptr;
  }
  // Ethernet.
  std::memcpy(frame, path.dmac.data(), 6);
  std::memcpy(frame + 6, config_.mac.data(), 6);
  StoreBe16(frame + 12, path.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  uint8_t* ip = frame + kEthernetBytes;
  const uint32_t udp_length = kUdpBytes + roce_bytes;
  if (path.ipv6) {
    StoreBe32(ip, (6u << 28) | (uint32_t(path.traffic_class) << 20) | (path.flow_label & 0xFFFFF));
    StoreBe16(ip + 4, static_cast<uint16_t>(udp_length));
    ip[6] = kIpProtocolUdp;
    ip[7] = path.hop_limit;
    std::memcpy(ip + 8, path.sgid.data(), 16);
    std::memcpy(ip + 24, path.dgid.data(), 16);
  } else {
    ip[0] = 0x45;
    ip[1] = path.traffic_class;
    StoreBe16(ip + 2, static_cast<uint16_t>(kIpv4Bytes + udp_length));
    StoreBe16(ip + 4, 0);
    StoreBe16(ip + 6, kIpv4DontFragment);
    ip[8] = path.hop_limit;
    ip[9] = kIpProtocolUdp;
    StoreBe16(ip + 10, 0);
    std::memcpy(ip + 12, path.sgid.data() + 12, 4);
    std::memcpy(ip + 16, path.dgid.data() + 12, 4);
    StoreBe16(ip + 10, Ipv4Checksum(ip));
  }
  uint8_t* udp = ip + ip_bytes;
  StoreBe16(udp, path.udp_source_port);
  StoreBe16(udp + 2, kRoceV2UdpPort);
  StoreBe16(udp + 4, static_cast<uint16_t>(udp_length));
  StoreBe16(udp + 6, 0);  // no UDP checksum, as rxe and RoCE NICs send (A17.3.2)
  uint8_t* bth = udp + kUdpBytes;
  BthFields b = f.bth;
  b.pad_count = static_cast<uint8_t>(pad);
  b.transport_version = 0;
  b.pkey = kDefaultPkey;
  WriteHeader(bth, EncodeBth(b));
  if (info.has(kReth)) WriteHeader(bth + info.reth_offset, EncodeReth(f.reth));
  if (info.has(kAeth)) WriteHeader(bth + info.aeth_offset, EncodeAeth(f.aeth));
  if (info.has(kAtomicEth)) WriteHeader(bth + info.atomic_eth_offset, EncodeAtomicEth(f.atomic_eth));
  if (info.has(kAtomicAckEth)) WriteHeader(bth + info.atomic_ack_eth_offset, EncodeAtomicAckEth(f.atomic_ack_eth));
  if (info.has(kDeth)) WriteHeader(bth + info.deth_offset, EncodeDeth(f.deth));
  // ImmDt and IETH travel as the application gave them (network order).
  if (info.has(kImmDt)) std::memcpy(bth + info.immdt_offset, &f.immediate_be, 4);
  if (info.has(kIeth)) StoreBe32(bth + info.ieth_offset, f.ieth_rkey);
  *payload = bth + info.header_bytes;
  std::memset(*payload + payload_length, 0, pad);
  // Remember where the IP header is for FinishPacket.
  m->l2_len = kEthernetBytes;
  m->l3_len = ip_bytes;
  return m;
}

void Engine::FinishPacket(rte_mbuf* m) {
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t* ip = frame + m->l2_len;
  const size_t covered = rte_pktmbuf_data_len(m) - m->l2_len - kIcrcBytes;
  const uint32_t icrc =
      ComputeIcrc(ip, m->l3_len, m->l3_len == kIpv6Bytes ? IpVersion::kIpv6 : IpVersion::kIpv4, covered);
  StoreLe32(ip + covered, icrc);
  Stage(m);
}

// Decodes and checks a frame. False (and a counter) for anything that is not a
// well-formed RoCEv2 packet with a correct ICRC.
bool Engine::DecodeFrame(const uint8_t* frame, uint32_t length, RxPacket* p) {
  if (length < kEthernetBytes) return false;
  uint32_t offset = 12;
  uint16_t ether_type = LoadBe16(frame + offset);
  offset += 2;
  if (ether_type == kEtherTypeVlan) {
    if (length < offset + 4) return false;
    ether_type = LoadBe16(frame + offset + 2);
    offset += 4;
  }
  std::memcpy(p->src_mac.data(), frame + 6, 6);
  const uint8_t* ip = frame + offset;
  uint32_t ip_bytes = 0;
  uint32_t ip_payload = 0;  // bytes after the IP header, by the IP header
  if (ether_type == kEtherTypeIpv4) {
    if (length < offset + kIpv4Bytes || (ip[0] >> 4) != 4) return false;
    ip_bytes = (ip[0] & 0x0F) * 4u;
    const uint32_t total = LoadBe16(ip + 2);
    if (ip_bytes < kIpv4Bytes || ip[9] != kIpProtocolUdp || total < ip_bytes || offset + total > length) return false;
    if (LoadBe16(ip + 6) & (kIpv4MoreFragments | kIpv4FragmentOffsetMask)) return false;
    ip_payload = total - ip_bytes;
    p->ipv6 = false;
    p->src_gid = Ipv4MappedGid(ip + 12);
  } else if (ether_type == kEtherTypeIpv6) {
    if (length < offset + kIpv6Bytes || (ip[0] >> 4) != 6 || ip[6] != kIpProtocolUdp) return false;
    ip_bytes = kIpv6Bytes;
    ip_payload = LoadBe16(ip + 4);
    if (offset + ip_bytes + ip_payload > length) return false;
    p->ipv6 = true;
    std::memcpy(p->src_gid.data(), ip + 8, 16);
  } else {
    return false;
  }
  const uint8_t* udp = ip + ip_bytes;
  if (ip_payload < kUdpBytes || LoadBe16(udp + 2) != kRoceV2UdpPort) return false;
  const uint32_t udp_length = LoadBe16(udp + 4);
  if (udp_length != ip_payload || udp_length < kUdpBytes + kBthBytes + kIcrcBytes) return false;
  const uint8_t* bth = udp + kUdpBytes;
  const uint32_t roce_bytes = udp_length - kUdpBytes;  // BTH .. ICRC
  p->bth = DecodeBth(ReadHeader<BthHeader>(bth));
  const OpcodeInfo& info = LookupOpcode(p->bth.opcode);
  if (!info.valid || p->bth.transport_version != 0) return false;
  if (roce_bytes < uint32_t(info.header_bytes) + kIcrcBytes + p->bth.pad_count) return false;
  p->info = &info;
  const uint32_t payload = roce_bytes - info.header_bytes - kIcrcBytes - p->bth.pad_count;
  if (!info.has_payload() && payload != 0) return false;
  if (info.payload == PayloadRule::kFullMtu && (payload == 0 || p->bth.pad_count != 0)) return false;
  if (!info.may_pad() && p->bth.pad_count != 0) return false;
  // The ICRC covers the IP header through the pad (A17.3.3).
  const size_t covered = ip_bytes + udp_length - kIcrcBytes;
  const uint32_t stored = LoadLe32(ip + covered);
  if (ComputeIcrc(ip, ip_bytes, p->ipv6 ? IpVersion::kIpv6 : IpVersion::kIpv4, covered) != stored) {
    counters_.rx_icrc_errors++;
    return false;
  }
  if (info.has(kReth)) p->reth = DecodeReth(ReadHeader<RethHeader>(bth + info.reth_offset));
  if (info.has(kAeth)) p->aeth = DecodeAeth(ReadHeader<AethHeader>(bth + info.aeth_offset));
  if (info.has(kAtomicEth)) p->atomic_eth = DecodeAtomicEth(ReadHeader<AtomicEthHeader>(bth + info.atomic_eth_offset));
  if (info.has(kAtomicAckEth)) {
    p->atomic_ack_eth = DecodeAtomicAckEth(ReadHeader<AtomicAckEthHeader>(bth + info.atomic_ack_eth_offset));
  }
  if (info.has(kDeth)) p->deth = DecodeDeth(ReadHeader<DethHeader>(bth + info.deth_offset));
  if (info.has(kImmDt)) std::memcpy(&p->immediate_be, bth + info.immdt_offset, 4);
  if (info.has(kIeth)) p->ieth_rkey = LoadBe32(bth + info.ieth_offset);
  p->ip_header = ip;
  p->payload = bth + info.header_bytes;
  p->payload_length = payload;
  return true;
}

void Engine::HandleFrame(rte_mbuf* m) {
  RxPacket p;
  const bool contiguous = m->nb_segs == 1;
  const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint32_t length = rte_pktmbuf_data_len(m);
  if (!contiguous || !DecodeFrame(frame, length, &p)) {
    if (contiguous && p.info == nullptr && config_.non_roce_handler) {
      // Not RoCE at all (ARP, ND, ...): the port layer may want it.
      const uint16_t type = length >= 14 ? LoadBe16(frame + 12) : 0;
      if (type != kEtherTypeIpv4 && type != kEtherTypeIpv6 && type != kEtherTypeVlan) {
        counters_.rx_non_roce++;
        config_.non_roce_handler(m);  // the handler owns the mbuf now
        return;
      }
    }
    if (p.info == nullptr) counters_.rx_non_roce++;
    else counters_.rx_parse_errors++;
    rte_pktmbuf_free(m);
    return;
  }
  QueuePair* qp = LookupQp(p.bth.dest_qp);
  if (qp == nullptr) {
    counters_.rx_unknown_qp++;
    rte_pktmbuf_free(m);
    return;
  }
  qp->counters.rx_packets++;
  qp->counters.rx_bytes += p.payload_length;
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  // The packet's service must match the QP's (IBTA 9.6.1.1).
  const TransportService want = qp->type == IBV_QPT_RC   ? TransportService::kRc
                                : qp->type == IBV_QPT_UC ? TransportService::kUc
                                                         : TransportService::kUd;
  if (p.info->service != want || state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_ERR) {
    counters_.rx_dropped++;
  } else if (p.info->role == PacketRole::kRequest) {
    HandleRequest(qp, p);
  } else if (state == IBV_QPS_RTS || state == IBV_QPS_SQD) {
    if (p.info->operation == Operation::kAcknowledge) HandleAcknowledge(qp, p);
    else HandleResponse(qp, p);
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
