#include "transport/impairment.h"

#include <algorithm>

#include "transport/link_frame.h"
#include "transport/opcode.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

// A RoCE acknowledgement: ACK or NAK, or an atomic ACK (IBTA 9.7.5.2). The
// ICRC is not checked: a corrupted acknowledgement is still one.
bool IsAcknowledgement(const rte_mbuf* m, bool link_frame) {
  ParseOptions options;
  options.verify_icrc = false;
  options.verify_ipv4_checksum = false;
  PacketView view;
  if (link_frame) ParseLinkFrame(m, &view);
  else ParsePacket(m, options, &view);
  return view.opcode != nullptr && view.opcode->role == PacketRole::kAcknowledge;
}

// Corruption spares the Ethernet header: on a real link a damaged MAC
// header is a frame for someone else (or none); what uroce must catch is a
// damaged IP/UDP/BTH/payload, which the ICRC covers.
constexpr uint32_t kEthernetHeaderBytes = 14;

// `m` as a buffer this stage may write: a frame whose data another mbuf
// shares (a clone, refcnt > 1) is copied first, so that corrupting it
// cannot change a frame someone else keeps. Null if no copy can be made
// (the frame then stays as it is).
rte_mbuf* OwnWritable(rte_mbuf* m, rte_mempool* pool) {
  if (RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1) return m;
  return rte_pktmbuf_copy(m, pool, 0, UINT32_MAX);
}

// Where an IP header's ECN field is, if the frame has one: Ethernet, then
// IPv4 (the TOS byte's low two bits) or IPv6 (the traffic class's).
// A link frame (transport/link_frame.h) has it in its header's byte 1.
enum class EcnField { kNone, kIpv4, kIpv6, kLink };
EcnField FindEcn(const rte_mbuf* m, bool link_frame) {
  if (link_frame) return rte_pktmbuf_data_len(m) >= kLinkHeaderBytes ? EcnField::kLink : EcnField::kNone;
  if (rte_pktmbuf_data_len(m) < kEthernetHeaderBytes + 20) return EcnField::kNone;
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint16_t ethertype = uint16_t(f[12] << 8 | f[13]);
  if (ethertype == 0x0800 && (f[14] >> 4) == 4) return EcnField::kIpv4;
  if (ethertype == 0x86DD && (f[14] >> 4) == 6 && rte_pktmbuf_data_len(m) >= kEthernetHeaderBytes + 40) {
    return EcnField::kIpv6;
  }
  return EcnField::kNone;
}

uint8_t EcnOf(const rte_mbuf* m, EcnField field) {
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  if (field == EcnField::kLink) return f[1] & 3;
  return field == EcnField::kIpv4 ? (f[15] & 3) : ((f[15] >> 4) & 3);
}

// ECN-capable to CE (RFC 3168 section 5), the IPv4 header checksum made
// right again (RFC 1071 over the header). The ICRC takes the field as all
// ones (IBTA annex A17.3.3), so the packet's ICRC still holds.
void MarkCe(rte_mbuf* m, EcnField field) {
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  if (field == EcnField::kLink) {
    f[1] |= 3;
    return;
  }
  if (field == EcnField::kIpv6) {
    f[15] |= 0x30;
    return;
  }
  f[15] |= 3;
  const uint32_t header = (f[14] & 0x0F) * 4u;
  if (header < 20 || rte_pktmbuf_data_len(m) < kEthernetHeaderBytes + header) return;
  f[24] = f[25] = 0;
  uint32_t sum = 0;
  for (uint32_t i = 0; i < header; i += 2) sum += uint32_t(f[14 + i] << 8 | f[14 + i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  const uint16_t checksum = static_cast<uint16_t>(~sum);
  f[24] = static_cast<uint8_t>(checksum >> 8);
  f[25] = static_cast<uint8_t>(checksum);
}

}  // namespace

bool FaultGenerator::CorruptFrame(rte_mbuf* m) {
  if (rte_pktmbuf_data_len(m) <= kEthernetHeaderBytes) return false;
  const uint32_t span = rte_pktmbuf_data_len(m) - kEthernetHeaderBytes;
  const uint32_t at = kEthernetHeaderBytes + Uniform(span - 1);
  rte_pktmbuf_mtod(m, uint8_t*)[at] ^= static_cast<uint8_t>(1u << (random_() % 8));
  return true;
}

ImpairmentStage::ImpairmentStage(FaultGenerator* generator, const Impairments* impairments,
                                 ImpairmentCounters* counters, rte_mempool* copy_pool, uint32_t capacity,
                                 uint64_t cycles_per_unit)
    : generator_(generator),
      impairments_(impairments),
      counters_(counters),
      copy_pool_(copy_pool),
      capacity_(capacity),
      cycles_per_unit_(cycles_per_unit) {
  held_.reserve(capacity);
  if (impairments_->rate > 0) departures_.assign(capacity, 0);
}

ImpairmentStage::~ImpairmentStage() { FreeAll(); }

void ImpairmentStage::FreeAll() {
  for (const Held& h : held_) rte_pktmbuf_free(h.mbuf);
  held_.clear();
}

uint64_t ImpairmentStage::Queue(rte_mbuf** m, uint64_t now) {
  while (queued_ > 0 && departures_[departures_head_] <= now) {
    departures_head_ = (departures_head_ + 1) % departures_.size();
    --queued_;
  }
  const size_t depth = impairments_->queue_frames == 0 ? departures_.size()
                                                       : std::min<size_t>(impairments_->queue_frames, departures_.size());
  if (queued_ >= depth) {
    ++counters_->queue_dropped;
    rte_pktmbuf_free(*m);
    return 0;
  }
  if (impairments_->ecn_frames > 0 && queued_ > impairments_->ecn_frames) {
    const EcnField field = FindEcn(*m, LinkFrame(*m));
    if (field != EcnField::kNone && EcnOf(*m, field) != 0 && EcnOf(*m, field) != 3) {
      rte_mbuf* own = OwnWritable(*m, copy_pool_);
      if (own != nullptr) {
        if (own != *m) rte_pktmbuf_free(*m);
        *m = own;
        MarkCe(*m, field);
        ++counters_->ce_marked;
      }
    }
  }
  // Serialized behind what is queued: its length at the rate, in the
  // caller's time (cycles_per_unit a unit).
  const double cycles = double(rte_pktmbuf_pkt_len(*m)) / impairments_->rate * double(cycles_per_unit_);
  last_departure_ = std::max(now, last_departure_) + std::max<uint64_t>(1, static_cast<uint64_t>(cycles + 0.5));
  departures_[(departures_head_ + queued_) % departures_.size()] = last_departure_;
  ++queued_;
  return last_departure_;
}

void ImpairmentStage::Hold(rte_mbuf* m, uint64_t now) {
  if (held_.size() >= capacity_) {
    ++counters_->overflowed;
    rte_pktmbuf_free(m);
    return;
  }
  uint64_t start = now;
  if (impairments_->rate > 0 && !departures_.empty()) {
    start = Queue(&m, now);
    if (start == 0) return;
  }
  uint64_t delay = 0;
  if (impairments_->max_delay > 0) {
    delay = generator_->Uniform(impairments_->max_delay);
    if (delay > 0) ++counters_->delayed;
  }
  if (generator_->Chance(impairments_->reorder)) {
    ++counters_->reordered;
    delay += impairments_->reorder_delay;
  }
  held_.push_back({m, start + delay * cycles_per_unit_, next_order_++});
  std::push_heap(held_.begin(), held_.end(), Later);
}

ImpairmentStage::Held ImpairmentStage::PopEarliest() {
  std::pop_heap(held_.begin(), held_.end(), Later);
  const Held h = held_.back();
  held_.pop_back();
  return h;
}

uint16_t ImpairmentStage::Admit(rte_mbuf** pkts, uint16_t n, uint64_t now) {
  // The draws, per frame and in this order: loss; corruption (then where
  // and which bit); duplication; then for the copy (if any) and the frame,
  // delay and reordering. Changing the order changes what every seed means.
  for (uint16_t i = 0; i < n; ++i) {
    // A full hold queue takes no more, like a full NIC TX ring: the sender
    // keeps the rest for later (back-pressure, not loss).
    if (held_.size() >= capacity_) return i;
    rte_mbuf* m = pkts[i];
    ++counters_->sent;
    const bool link_frame = LinkFrame(m);
    const bool lost =
        generator_->Chance(impairments_->loss) && !(impairments_->spare_acks && IsAcknowledgement(m, link_frame));
    if (lost || (drop_filter_ != nullptr && *drop_filter_ && (*drop_filter_)(m))) {
      ++counters_->dropped;
      rte_pktmbuf_free(m);
      continue;
    }
    if (generator_->Chance(impairments_->corrupt)) {
      if (link_frame) {
        // Nothing would catch the damage: the frame is lost instead, as a
        // wire's ICRC check would lose it.
        ++counters_->corrupted;
        ++counters_->dropped;
        rte_pktmbuf_free(m);
        continue;
      }
      rte_mbuf* own = OwnWritable(m, copy_pool_);
      if (own != nullptr) {
        if (own != m) rte_pktmbuf_free(m);
        m = own;
        if (generator_->CorruptFrame(m)) ++counters_->corrupted;
      }
    }
    if (generator_->Chance(impairments_->duplicate)) {
      rte_mbuf* copy = rte_pktmbuf_copy(m, copy_pool_, 0, UINT32_MAX);
      if (copy != nullptr) {
        ++counters_->duplicated;
        Hold(copy, now);
      }
    }
    Hold(m, now);
  }
  return n;
}

uint16_t ImpairmentStage::Release(uint64_t now, rte_mbuf** out, uint16_t n) {
  uint16_t count = 0;
  while (count < n && !held_.empty() && held_.front().due <= now) out[count++] = PopEarliest().mbuf;
  counters_->delivered += count;
  return count;
}

uint32_t ImpairmentStage::ReleaseTo(uint64_t now, PacketIo& port) {
  constexpr uint16_t kBurst = 32;
  uint32_t total = 0;
  while (!held_.empty() && held_.front().due <= now) {
    Held taken[kBurst];
    rte_mbuf* burst[kBurst];
    uint16_t k = 0;
    while (k < kBurst && !held_.empty() && held_.front().due <= now) {
      taken[k] = PopEarliest();
      burst[k] = taken[k].mbuf;
      ++k;
    }
    const uint16_t sent = port.TxBurst(burst, k);
    total += sent;
    counters_->delivered += sent;
    if (sent < k) {
      // A full TX queue: the rest go back with their times and places.
      for (uint16_t j = sent; j < k; ++j) {
        held_.push_back(taken[j]);
        std::push_heap(held_.begin(), held_.end(), Later);
      }
      break;
    }
  }
  return total;
}

}  // namespace uroce::transport
