#include "testing/lossy_link.h"

#include <algorithm>

namespace uroce::transport {
namespace {

constexpr uint32_t kEthernetHeaderBytes = 14;

}  // namespace

LossyLink::LossyLink(rte_mempool* copy_pool, uint64_t seed, const LinkImpairments& impairments,
                     uint32_t capacity)
    : copy_pool_(copy_pool), random_(seed), impairments_(impairments), capacity_(capacity) {
  a_to_b_.frames.reserve(capacity);
  b_to_a_.frames.reserve(capacity);
}

LossyLink::~LossyLink() {
  for (Direction* d : {&a_to_b_, &b_to_a_}) {
    for (InFlight& f : d->frames) rte_pktmbuf_free(f.mbuf);
    d->frames.clear();
  }
}

bool LossyLink::Chance(double p) {
  if (p <= 0) return false;
  return std::uniform_real_distribution<double>(0.0, 1.0)(random_) < p;
}

void LossyLink::Enqueue(Direction* dir, rte_mbuf* m) {
  if (dir->frames.size() >= capacity_) {
    ++counters_.overflowed;
    rte_pktmbuf_free(m);
    return;
  }
  uint64_t delay = 0;
  if (impairments_.max_delay_ticks > 0) {
    delay = std::uniform_int_distribution<uint32_t>(0, impairments_.max_delay_ticks)(random_);
  }
  if (Chance(impairments_.reorder)) {
    ++counters_.reordered;
    delay += impairments_.reorder_ticks;
  }
  dir->frames.push_back({m, dir->now + delay, dir->next_order++});
}

uint16_t LossyLink::Send(Direction* dir, rte_mbuf** pkts, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    // A full link takes no more, like a full NIC TX ring: the sender keeps
    // the rest for later (back-pressure, not loss).
    if (dir->frames.size() >= capacity_) return i;
    rte_mbuf* m = pkts[i];
    ++counters_.sent;
    if (Chance(impairments_.loss) || (drop_filter_ && drop_filter_(m))) {
      ++counters_.dropped;
      rte_pktmbuf_free(m);
      continue;
    }
    if (Chance(impairments_.corrupt) && rte_pktmbuf_data_len(m) > kEthernetHeaderBytes) {
      ++counters_.corrupted;
      const uint32_t span = rte_pktmbuf_data_len(m) - kEthernetHeaderBytes;
      const uint32_t at = kEthernetHeaderBytes + std::uniform_int_distribution<uint32_t>(0, span - 1)(random_);
      rte_pktmbuf_mtod(m, uint8_t*)[at] ^= static_cast<uint8_t>(1u << (random_() % 8));
    }
    if (Chance(impairments_.duplicate)) {
      rte_mbuf* copy = rte_pktmbuf_copy(m, copy_pool_, 0, UINT32_MAX);
      if (copy != nullptr) {
        ++counters_.duplicated;
        Enqueue(dir, copy);
      }
    }
    Enqueue(dir, m);
  }
  return n;
}

uint16_t LossyLink::Receive(Direction* dir, rte_mbuf** pkts, uint16_t n) {
  ++dir->now;
  // Deliver the due frames in (time, arrival) order. The list stays short, so
  // a partial sort of the due ones is cheap.
  auto due_end = std::partition(dir->frames.begin(), dir->frames.end(),
                                [now = dir->now](const InFlight& f) { return f.deliver_at <= now; });
  std::sort(dir->frames.begin(), due_end, [](const InFlight& x, const InFlight& y) {
    return x.deliver_at != y.deliver_at ? x.deliver_at < y.deliver_at : x.order < y.order;
  });
  const size_t due = static_cast<size_t>(due_end - dir->frames.begin());
  const uint16_t count = static_cast<uint16_t>(std::min<size_t>(due, n));
  for (uint16_t i = 0; i < count; ++i) pkts[i] = dir->frames[i].mbuf;
  dir->frames.erase(dir->frames.begin(), dir->frames.begin() + count);
  counters_.delivered += count;
  return count;
}

}  // namespace uroce::transport
