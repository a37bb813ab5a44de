#include "pmd/impaired_port_io.h"

#include <rte_cycles.h>

#include <algorithm>

namespace uroce::pmd {
namespace {

using transport::ImpairmentCounters;

// TSC cycles per microsecond, at least 1: delays are drawn in microseconds.
uint64_t CyclesPerMicrosecond() { return std::max<uint64_t>(1, rte_get_tsc_hz() / 1000000); }

void ToFields(const ImpairmentCounters& c, uint64_t (&f)[10]) {
  const uint64_t v[10] = {c.sent,      c.delivered, c.dropped,    c.duplicated,    c.reordered,
                          c.delayed,   c.corrupted, c.overflowed, c.queue_dropped, c.ce_marked};
  std::copy(v, v + 10, f);
}

ImpairmentCounters FromFields(const uint64_t (&f)[10]) {
  ImpairmentCounters c;
  c.sent = f[0];
  c.delivered = f[1];
  c.dropped = f[2];
  c.duplicated = f[3];
  c.reordered = f[4];
  c.delayed = f[5];
  c.corrupted = f[6];
  c.overflowed = f[7];
  c.queue_dropped = f[8];
  c.ce_marked = f[9];
  return c;
}

std::string OneSummary(const char* name, const ImpairmentCounters& c) {
  return std::string(name) + ": frames " + std::to_string(c.sent) + ", dropped " + std::to_string(c.dropped) +
         ", duplicated " + std::to_string(c.duplicated) + ", reordered " + std::to_string(c.reordered) +
         ", delayed " + std::to_string(c.delayed) + ", corrupted " + std::to_string(c.corrupted) +
         (c.overflowed != 0 ? ", overflowed " + std::to_string(c.overflowed) : "") +
         (c.queue_dropped != 0 ? ", queue full " + std::to_string(c.queue_dropped) : "") +
         (c.ce_marked != 0 ? ", CE marked " + std::to_string(c.ce_marked) : "");
}

}  // namespace

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  // SplitMix64 (Steele, Lea, Flood 2014): distinct streams give unrelated
  // seeds for std::mt19937_64.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string ImpairmentSummary(const ImpairedPortCounters& c) {
  return OneSummary("tx", c.tx) + "; " + OneSummary("rx", c.rx);
}

ImpairedPortIo::ImpairedPortIo(transport::PacketIo* port, rte_mempool* copy_pool, const PortImpairment& config)
    : port_(port),
      faults_(config.faults),
      impair_tx_(config.tx),
      impair_rx_(config.rx),
      hold_frames_(config.hold_frames),
      tx_generator_(DeriveSeed(config.seed, 0)),
      rx_generator_(DeriveSeed(config.seed, 1)),
      tx_(&tx_generator_, &faults_, &tx_counters_, copy_pool, config.hold_frames, CyclesPerMicrosecond()),
      rx_(&rx_generator_, &faults_, &rx_counters_, copy_pool, config.hold_frames, CyclesPerMicrosecond()) {
  rx_.set_link_frames(config.link_frames);
}

ImpairedPortIo::~ImpairedPortIo() { FreeHeld(); }

void ImpairedPortIo::FreeHeld() {
  tx_.FreeAll();
  rx_.FreeAll();
}

uint16_t ImpairedPortIo::TxBurst(rte_mbuf** pkts, uint16_t n) {
  if (!impair_tx_) return port_->TxBurst(pkts, n);
  const uint64_t now = rte_get_tsc_cycles();
  // Older frames first, then this burst's; what the port refuses waits in
  // the hold queue (RxBurst, called every poll, keeps it moving).
  tx_.ReleaseTo(now, *port_);
  const uint16_t taken = tx_.Admit(pkts, n, now);
  tx_.ReleaseTo(now, *port_);
  if (taken != 0) Publish();
  return taken;
}

uint16_t ImpairedPortIo::RxBurst(rte_mbuf** pkts, uint16_t n) {
  const bool tx_waiting = impair_tx_ && tx_.held() > 0;
  if (!impair_rx_ && !tx_waiting) return port_->RxBurst(pkts, n);
  const uint64_t now = rte_get_tsc_cycles();
  bool moved = false;
  if (tx_waiting) moved |= tx_.ReleaseTo(now, *port_) != 0;
  if (!impair_rx_) {
    if (moved) Publish();
    return port_->RxBurst(pkts, n);
  }
  // Take from the port only what the hold queue has room for, a copy
  // included, so that every frame received is decided and kept.
  const size_t room = hold_frames_ - std::min<size_t>(hold_frames_, rx_.held());
  const uint16_t want = static_cast<uint16_t>(std::min<size_t>(n, room / 2));
  const uint16_t got = want != 0 ? port_->RxBurst(pkts, want) : 0;
  rx_.Admit(pkts, got, now);
  const uint16_t released = rx_.Release(now, pkts, n);
  if (moved || got != 0 || released != 0) Publish();
  return released;
}

void ImpairedPortIo::Publish() {
  const ImpairmentCounters* sides[2] = {&tx_counters_, &rx_counters_};
  for (int s = 0; s < 2; ++s) {
    uint64_t f[kFields];
    ToFields(*sides[s], f);
    for (int i = 0; i < kFields; ++i) published_[s][i].store(f[i], std::memory_order_relaxed);
  }
}

ImpairedPortCounters ImpairedPortIo::counters() const {
  ImpairedPortCounters c;
  ImpairmentCounters* sides[2] = {&c.tx, &c.rx};
  for (int s = 0; s < 2; ++s) {
    uint64_t f[kFields];
    for (int i = 0; i < kFields; ++i) f[i] = published_[s][i].load(std::memory_order_relaxed);
    *sides[s] = FromFields(f);
  }
  return c;
}

}  // namespace uroce::pmd
