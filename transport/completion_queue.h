// A completion queue of struct ibv_wc with ibv_poll_cq(3) semantics: the
// engine pushes, application threads poll, oldest first. Lock-free (an
// MpmcRing); no allocation after creation. Behind a libfabric endpoint it
// has sinks instead of readers: completions go straight to them (Push).
//
// Overrun (IBTA 11.4.2.1, "CQ overrun"): when the engine finds the queue full
// the completion is not written, the queue is marked overrun (a fatal CQ
// error, IBV_EVENT_CQ_ERR in verbs terms) and the overrun counter grows.
// Entries already in the queue can still be polled.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/ring.h"
#include "cq/completion_sink.h"

namespace uroce::transport {

class CompletionQueue {
 public:
  // Holds at least `min_entries` completions.
  // The ring's slots from `allocator` when given (a verbs parent domain's),
  // else from the heap; Resize takes the new ring's from it too.
  explicit CompletionQueue(uint32_t min_entries, RingAllocator allocator = {})
      : allocator_(std::move(allocator)), ring_(MakeRing(min_entries)) {}

  // ibv_resize_cq(3): at least `min_entries` from now on, the completions
  // waiting kept in order. False (nothing changed) when more completions
  // wait than the new size holds. Control path, and only while nothing
  // pushes or polls: the engine held between polls (ProgressToken) and no
  // application thread polling this CQ (verbs: a CQ is not polled while it
  // is resized). Allocates; never on the fast path.
  bool Resize(uint32_t min_entries) {
    const size_t waiting = ring_->ApproxSize();  // exact: nobody pushes or pops
    auto resized = MakeRing(min_entries);
    if (resized == nullptr || waiting > resized->capacity()) return false;
    std::vector<ibv_wc> moving(waiting);
    const size_t taken = ring_->PopBurst(moving.data(), waiting);
    for (size_t i = 0; i < taken; ++i) (void)resized->TryPush(moving[i]);
    ring_ = std::move(resized);
    return true;
  }

  // Control path, the engine held between polls: takes the completions of
  // QP `qpn` out of the queue, the others keep their order (a QP moved to
  // RESET, modify_qp.cc). A thread polling meanwhile may find the queue
  // briefly empty, never out of order. Allocates; never on the fast path.
  void RemoveCompletionsOf(uint32_t qpn) {
    if (has_sinks_) return;  // the cq layer owns a libfabric CQ's entries
    std::vector<ibv_wc> waiting(ring_->ApproxSize());
    const size_t taken = ring_->PopBurst(waiting.data(), waiting.size());
    for (size_t i = 0; i < taken; ++i) {
      if (waiting[i].qp_num != qpn) (void)ring_->TryPush(waiting[i]);
    }
  }

  // Engine thread. False (and the queue marked overrun) when full.
  //
  // With sinks attached (a libfabric CQ or counter behind this one) a
  // completion goes straight into them: one hop from the engine to the
  // application's fi_cq_read, no ring in between (a CAS pop from a ring in
  // a forwarding bounce would be a fifth of Poll's own time in
  // fi_pingpong). Only when a full libfabric CQ holds completions back
  // (back-pressure) do later ones queue in the ring behind them, in order;
  // ForwardToSinks moves them on as the CQ drains.
  bool Push(const ibv_wc& wc) {
    if (has_sinks_ && carry_count_ == 0 && ring_->ApproxSize() == 0) {
      // The engine thread is the ring's only producer and (with sinks) its
      // only consumer, so the size is exact here.
      if (counter_sink_ != nullptr) counter_sink_->PushCompletions(&wc, 1);
      if (cq_sink_ == nullptr || cq_sink_->PushCompletions(&wc, 1) == 1) {
        Count(pushed_);
        return true;
      }
      // The CQ is full: counted already, so it waits in the carry (whose
      // entries the counter has seen), not in the ring.
      carry_[0] = wc;
      carry_start_ = 0;
      carry_count_ = 1;
      Count(pushed_);
      return true;
    }
    if (ring_->TryPush(wc)) {
      Count(pushed_);
      return true;
    }
    Count(overruns_);
    overrun_.store(true, std::memory_order_release);
    return false;
  }

  // Any thread: up to `n` completions into `out`, the number returned.
  int Poll(int n, ibv_wc* out) {
    if (n <= 0) return 0;
    return static_cast<int>(ring_->PopBurst(out, static_cast<size_t>(n)));
  }

  // Control path, before traffic: completions go on to a libfabric CQ and/or
  // counter of the cq layer (the engine forwards them every poll; the
  // application then reads the fid, not this ring).
  void AttachSinks(cq::CompletionSink* cq_sink, cq::CompletionSink* counter_sink) {
    cq_sink_ = cq_sink;
    counter_sink_ = counter_sink;
    has_sinks_ = cq_sink_ != nullptr || counter_sink_ != nullptr;
  }
  bool has_sinks() const { return has_sinks_; }

  // Engine thread: moves the completions a full libfabric CQ held back (and
  // any pushed before the sinks were attached) on to the sinks. What the CQ
  // still does not take waits for the next poll (back-pressure; nothing is
  // lost). Returns how many moved.
  size_t ForwardToSinks() {
    size_t moved = 0;
    for (;;) {
      if (carry_count_ == 0) {
        carry_count_ = ring_->PopBurst(carry_, kCarry);
        carry_start_ = 0;
        if (carry_count_ == 0) break;
        if (counter_sink_ != nullptr) counter_sink_->PushCompletions(carry_, carry_count_);
      }
      size_t taken = carry_count_;
      if (cq_sink_ != nullptr) taken = cq_sink_->PushCompletions(carry_ + carry_start_, carry_count_);
      carry_start_ += taken;
      carry_count_ -= taken;
      moved += taken;
      if (carry_count_ != 0) break;  // the CQ is full
    }
    return moved;
  }

  // False when the allocator gave no memory for the ring (the CQ is unusable).
  bool has_ring() const { return ring_ != nullptr; }
  uint32_t capacity() const { return static_cast<uint32_t>(ring_->capacity()); }
  bool overrun() const { return overrun_.load(std::memory_order_acquire); }
  uint64_t overruns() const { return overruns_.load(std::memory_order_relaxed); }
  uint64_t pushed() const { return pushed_.load(std::memory_order_relaxed); }
  size_t ApproxDepth() const { return ring_->ApproxSize(); }

 private:
  // Engine thread only writes these counters: a plain load and store, not a
  // locked read-modify-write per completion.
  static void Count(std::atomic<uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  static constexpr size_t kCarry = 32;
  // A ring of at least `min_entries`, its slots from allocator_ if any;
  // null when the allocator gives nothing.
  std::unique_ptr<MpmcRing<ibv_wc>> MakeRing(uint32_t min_entries) {
    RingStorage storage;
    if (allocator_) {
      storage = allocator_(MpmcRing<ibv_wc>::StorageBytesFor(min_entries), kCacheLine);
      if (storage.bytes == nullptr) return nullptr;
    }
    return std::make_unique<MpmcRing<ibv_wc>>(min_entries, std::move(storage));
  }

  RingAllocator allocator_;
  // Behind a pointer only so that Resize can replace it.
  std::unique_ptr<MpmcRing<ibv_wc>> ring_;
  bool has_sinks_ = false;
  cq::CompletionSink* cq_sink_ = nullptr;
  cq::CompletionSink* counter_sink_ = nullptr;
  ibv_wc carry_[kCarry];  // engine thread only
  size_t carry_start_ = 0, carry_count_ = 0;
  std::atomic<bool> overrun_{false};
  std::atomic<uint64_t> overruns_{0};
  std::atomic<uint64_t> pushed_{0};
};

}  // namespace uroce::transport
