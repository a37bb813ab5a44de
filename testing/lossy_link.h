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
#include <vector>

#include "transport/impairment.h"
#include "transport/packet_io.h"

namespace uroce::transport {

// The faults and their counters are transport/impairment.h's (shared with
// the impairment of real ports, `[impair]`); delays here are in ticks.
using LinkImpairments = Impairments;
using LinkCounters = ImpairmentCounters;

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
  size_t in_flight() const { return a_to_b_.stage.held() + b_to_a_.stage.held(); }

 private:
  struct Direction {
    Direction(LossyLink* link, uint32_t capacity)
        : stage(&link->generator_, &link->impairments_, &link->counters_, link->copy_pool_, capacity) {
      stage.set_drop_filter(&link->drop_filter_);
    }
    ImpairmentStage stage;
    uint64_t now = 0;  // ticks: one per RxBurst on the receiving end
  };
  class End : public PacketIo {
   public:
    End(Direction* out, Direction* in) : out_(out), in_(in) {}
    uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override { return in_->stage.Release(++in_->now, pkts, n); }
    uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override { return out_->stage.Admit(pkts, n, out_->now); }

   private:
    Direction* out_;
    Direction* in_;
  };

  rte_mempool* copy_pool_;
  FaultGenerator generator_;
  Impairments impairments_;
  std::function<bool(const rte_mbuf*)> drop_filter_;
  LinkCounters counters_;
  const uint32_t capacity_;
  Direction a_to_b_{this, capacity_};
  Direction b_to_a_{this, capacity_};
  End end_a_{&a_to_b_, &b_to_a_};
  End end_b_{&b_to_a_, &a_to_b_};
};

}  // namespace uroce::transport
