// An in-memory Ethernet link between two endpoints that drops, duplicates,
// reorders, delays and corrupts frames, all decided by one seeded generator so
// that any failure replays from its seed. For tests and `uroce soak`.
//
// Time on the link is counted in "ticks": each RxBurst on an endpoint is one
// tick of that direction's clock, so delays do not depend on the machine's
// speed. Deterministic as long as the callers poll in a deterministic order
// (inline progress on one thread).
//
// Threads: one thread drives both endpoints (engine thread / test thread).
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "transport/packet_io.h"

namespace uroce::transport {

struct LinkImpairments {
  double loss = 0;       // probability a frame is dropped
  double duplicate = 0;  // probability a frame is delivered twice
  double reorder = 0;    // probability a frame is held back behind later ones
  double corrupt = 0;    // probability one byte past the Ethernet header flips
  uint32_t max_delay_ticks = 0;  // extra delay, uniform in [0, max]
  uint32_t reorder_ticks = 4;    // how long a reordered frame is held
};

struct LinkCounters {
  uint64_t sent = 0, delivered = 0, dropped = 0, duplicated = 0, reordered = 0, corrupted = 0, overflowed = 0;
};

class LossyLink {
 public:
  // `copy_pool` supplies the copies made for duplicates. `capacity` frames can
  // be in flight per direction; a full direction refuses more (TxBurst returns
  // fewer, like a full NIC TX ring), and a duplicate that finds it full is
  // dropped and counted as overflowed.
  LossyLink(rte_mempool* copy_pool, uint64_t seed, const LinkImpairments& impairments, uint32_t capacity = 8192);
  ~LossyLink();
  LossyLink(const LossyLink&) = delete;
  LossyLink& operator=(const LossyLink&) = delete;

  PacketIo& a() { return end_a_; }
  PacketIo& b() { return end_b_; }

  void set_impairments(const LinkImpairments& impairments) { impairments_ = impairments; }
  // For targeted tests: frames for which `drop` returns true are lost (on top
  // of the random impairments). Empty: none.
  void set_drop_filter(std::function<bool(const rte_mbuf*)> drop) { drop_filter_ = std::move(drop); }
  const LinkCounters& counters() const { return counters_; }
  // Frames still on the wire, both directions.
  size_t in_flight() const { return a_to_b_.frames.size() + b_to_a_.frames.size(); }

 private:
  struct InFlight {
    rte_mbuf* mbuf;
    uint64_t deliver_at;
    uint64_t order;  // arrival order, to keep FIFO among equal times
  };
  struct Direction {
    std::vector<InFlight> frames;  // kept small; capacity reserved up front
    uint64_t now = 0;
    uint64_t next_order = 0;
  };
  class End : public PacketIo {
   public:
    End(LossyLink* link, Direction* out, Direction* in) : link_(link), out_(out), in_(in) {}
    uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override { return link_->Receive(in_, pkts, n); }
    uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override { return link_->Send(out_, pkts, n); }

   private:
    LossyLink* link_;
    Direction* out_;
    Direction* in_;
  };

  uint16_t Send(Direction* dir, rte_mbuf** pkts, uint16_t n);
  uint16_t Receive(Direction* dir, rte_mbuf** pkts, uint16_t n);
  void Enqueue(Direction* dir, rte_mbuf* m);
  bool Chance(double p);

  rte_mempool* copy_pool_;
  std::mt19937_64 random_;
  LinkImpairments impairments_;
  std::function<bool(const rte_mbuf*)> drop_filter_;
  const uint32_t capacity_;
  LinkCounters counters_;
  Direction a_to_b_, b_to_a_;
  End end_a_{this, &a_to_b_, &b_to_a_};
  End end_b_{this, &b_to_a_, &a_to_b_};
};

}  // namespace uroce::transport
