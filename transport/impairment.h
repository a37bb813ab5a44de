// Network faults from a seed: what an impaired wire does to the frames that
// cross it (loss, duplication, reordering, delay, corruption, and a
// bottleneck that queues, drops and marks CE), decided frame
// by frame by one seeded generator, so that the same seed and the same frame
// sequence give the same faults. One implementation serves the in-memory
// LossyLink of the tests and `uroce soak` (testing/lossy_link.h) and the
// impairment of real ports (`[impair]`, pmd/impaired_port_io.h); the
// responder's RNR storm (EngineConfig::rnr_storm) draws from the same kind
// of generator.
//
// Time is the caller's: ticks of a virtual clock on the LossyLink, TSC
// cycles on a real port (delays are drawn in `Impairments` units and scaled
// by ImpairmentStage's cycles_per_unit).
//
// Threads: a stage, its generator and its counters belong to one thread (the
// engine thread of the port, or the test's thread).
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "transport/packet_io.h"
#include "transport/peer_memory.h"

namespace uroce::transport {

struct Impairments {
  double loss = 0;       // probability a frame is dropped
  double duplicate = 0;  // probability a frame is delivered twice
  double reorder = 0;    // probability a frame is held back behind later ones
  double corrupt = 0;    // probability one bit of a byte past the Ethernet header flips
  uint32_t max_delay = 0;      // extra delay of every frame, uniform in [0, max] units
  uint32_t reorder_delay = 4;  // how long (units) a reordered frame is held back
  // A bottleneck, congestion that can be reproduced: frames leave one after
  // another at `rate` bytes per unit, each behind those queued before it. A
  // frame that finds `queue_frames` queued is dropped (tail drop); one that
  // finds more than `ecn_frames` queued (0: never) and is ECN-capable (ECT(0)
  // or ECT(1)) leaves marked CE (RFC 3168 section 5), as a switch marking
  // above a threshold K does for DCQCN (Zhu et al., SIGCOMM 2015).
  double rate = 0;            // bytes per unit; 0: no bottleneck
  uint32_t queue_frames = 0;  // with a rate: the queue's depth (0: the hold queue's capacity)
  uint32_t ecn_frames = 0;    // with a rate: mark CE above this many queued (0: never)
  // Loss spares acknowledgements (RoCE ACK, NAK, atomic ACK): only requests
  // and READ responses are lost. For programs that tear down on their last
  // completion, such as ibv_rc_pingpong, whose final ACK no one would be
  // left to repair. The loss draw is still made for every frame, so a seed
  // keeps its meaning.
  bool spare_acks = false;
  bool any() const {
    return loss > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || max_delay > 0 || rate > 0;
  }
};

struct ImpairmentCounters {
  uint64_t sent = 0;        // frames offered to the impaired wire
  uint64_t delivered = 0;   // frames (copies included) handed on
  uint64_t dropped = 0;     // lost on purpose
  uint64_t duplicated = 0;  // copies made
  uint64_t reordered = 0;   // held back behind later frames
  uint64_t delayed = 0;     // given a nonzero random delay
  uint64_t corrupted = 0;   // one bit flipped
  uint64_t overflowed = 0;  // a copy that found the hold queue full, dropped
  uint64_t queue_dropped = 0;  // found the bottleneck's queue full (Impairments::queue_frames)
  uint64_t ce_marked = 0;      // left the bottleneck marked CE (Impairments::ecn_frames)
};

// The seeded decisions. Every draw is in a fixed order per frame (see
// ImpairmentStage::Admit), so a seed names one fault sequence.
class FaultGenerator {
 public:
  explicit FaultGenerator(uint64_t seed) : random_(seed) {}
  // True with probability p; draws nothing when p <= 0.
  bool Chance(double p) {
    if (p <= 0) return false;
    return std::uniform_real_distribution<double>(0.0, 1.0)(random_) < p;
  }
  // Uniform in [0, max].
  uint32_t Uniform(uint32_t max) { return std::uniform_int_distribution<uint32_t>(0, max)(random_); }
  // Flips one bit of one byte after the Ethernet header of the first
  // segment; false (and no draw) if the frame has no such byte. The caller
  // makes sure `m` is its own to write.
  bool CorruptFrame(rte_mbuf* m);

 private:
  std::mt19937_64 random_;
};

// One direction of an impaired wire. Admit takes frames and decides their
// fate; the survivors (and copies) wait in a bounded hold queue, allocated
// up front, until their time; Release hands out the due ones in (due time,
// arrival) order. Frames still held when the stage dies are freed.
class ImpairmentStage {
 public:
  // `generator`, `impairments` and `counters` may be shared with other
  // stages (the LossyLink's two directions share them) and must outlive
  // this one. Copies for duplicates come from `copy_pool`. `capacity`:
  // frames the hold queue keeps at most.
  ImpairmentStage(FaultGenerator* generator, const Impairments* impairments, ImpairmentCounters* counters,
                  rte_mempool* copy_pool, uint32_t capacity, uint64_t cycles_per_unit = 1);
  ~ImpairmentStage();
  ImpairmentStage(const ImpairmentStage&) = delete;
  ImpairmentStage& operator=(const ImpairmentStage&) = delete;

  // For targeted tests: frames for which *filter returns true are lost too
  // (asked only of frames the generator did not drop). Null: none.
  void set_drop_filter(const std::function<bool(const rte_mbuf*)>* filter) { drop_filter_ = filter; }
  // Frames `port` says came in link form (PeerMemory::LinkFrame,
  // transport/link_frame.h) have no ICRC: corrupting one loses it, as the
  // ICRC check would have on a wire, instead of handing on damage nothing
  // can catch. Null: every frame is a wire frame.
  void set_link_frames(PeerMemory* port) { link_frames_ = port; }

  // Takes pkts[0..k) (k returned, k < n only when the hold queue is full:
  // back-pressure, the rest stay the caller's, like a full TX ring), at time
  // `now`. Dropped frames are freed here.
  uint16_t Admit(rte_mbuf** pkts, uint16_t n, uint64_t now);
  // Up to n frames due at `now`, to the caller.
  uint16_t Release(uint64_t now, rte_mbuf** out, uint16_t n);
  // The frames due at `now` to port.TxBurst; what it refuses stays held, in
  // order, for the next call. Returns the frames it took.
  uint32_t ReleaseTo(uint64_t now, PacketIo& port);

  size_t held() const { return held_.size(); }
  bool full() const { return held_.size() >= capacity_; }
  // The due time of the earliest held frame (held() > 0).
  uint64_t next_due() const { return held_.front().due; }
  // Frees every held frame.
  void FreeAll();

 private:
  struct Held {
    rte_mbuf* mbuf;
    uint64_t due;
    uint64_t order;  // arrival order, to keep FIFO among equal times
  };
  // A min-heap on (due, order) for std::push_heap / pop_heap.
  static bool Later(const Held& x, const Held& y) {
    return x.due != y.due ? x.due > y.due : x.order > y.order;
  }
  void Hold(rte_mbuf* m, uint64_t now);
  Held PopEarliest();
  // The bottleneck (Impairments::rate): when `m` leaves it, or 0 when it is
  // dropped (freed here). May replace *m by a writable copy to mark it.
  uint64_t Queue(rte_mbuf** m, uint64_t now);

  FaultGenerator* const generator_;
  const Impairments* const impairments_;
  ImpairmentCounters* const counters_;
  rte_mempool* const copy_pool_;
  const uint32_t capacity_;
  const uint64_t cycles_per_unit_;
  const std::function<bool(const rte_mbuf*)>* drop_filter_ = nullptr;
  PeerMemory* link_frames_ = nullptr;
  bool LinkFrame(const rte_mbuf* m) const { return link_frames_ != nullptr && link_frames_->LinkFrame(m); }
  std::vector<Held> held_;  // capacity reserved up front: no allocation after
  uint64_t next_order_ = 0;
  // The bottleneck's queue: when each frame in it leaves, oldest first (a
  // ring of the hold queue's capacity: every queued frame is held).
  std::vector<uint64_t> departures_;
  size_t departures_head_ = 0, queued_ = 0;
  uint64_t last_departure_ = 0;
};

}  // namespace uroce::transport
