// A completion queue of struct ibv_wc with ibv_poll_cq(3) semantics: the
// engine pushes, application threads poll, oldest first. Lock-free (an
// MpmcRing); no allocation after creation.
//
// Overrun (IBTA 11.4.2.1, "CQ overrun"): when the engine finds the queue full
// the completion is not written, the queue is marked overrun (a fatal CQ
// error, IBV_EVENT_CQ_ERR in verbs terms) and the overrun counter grows.
// Entries already in the queue can still be polled.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "cq/completion_sink.h"
#include "transport/mpmc_ring.h"

namespace uroce::transport {

class CompletionQueue {
 public:
  // Holds at least `min_entries` completions.
  explicit CompletionQueue(uint32_t min_entries) : ring_(min_entries) {}

  // Engine thread. False (and the queue marked overrun) when full.
  bool Push(const ibv_wc& wc) {
    if (ring_.TryPush(wc)) {
      pushed_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    overruns_.fetch_add(1, std::memory_order_relaxed);
    overrun_.store(true, std::memory_order_release);
    return false;
  }

  // Any thread: up to `n` completions into `out`, the number returned.
  int Poll(int n, ibv_wc* out) {
    if (n <= 0) return 0;
    return static_cast<int>(ring_.PopBurst(out, static_cast<size_t>(n)));
  }

  // Control path, before traffic: completions go on to a libfabric CQ and/or
  // counter of the cq layer (the engine forwards them every poll; the
  // application then reads the fid, not this ring).
  void AttachSinks(cq::CompletionSink* cq_sink, cq::CompletionSink* counter_sink) {
    cq_sink_ = cq_sink;
    counter_sink_ = counter_sink;
  }
  bool has_sinks() const { return cq_sink_ != nullptr || counter_sink_ != nullptr; }

  // Engine thread: moves completions from the ring to the sinks. What a full
  // libfabric CQ does not take waits here for the next poll (back-pressure;
  // nothing is lost). Returns how many moved.
  size_t ForwardToSinks() {
    size_t moved = 0;
    for (;;) {
      if (carry_count_ == 0) {
        carry_count_ = ring_.PopBurst(carry_, kCarry);
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

  uint32_t capacity() const { return static_cast<uint32_t>(ring_.capacity()); }
  bool overrun() const { return overrun_.load(std::memory_order_acquire); }
  uint64_t overruns() const { return overruns_.load(std::memory_order_relaxed); }
  uint64_t pushed() const { return pushed_.load(std::memory_order_relaxed); }
  size_t ApproxDepth() const { return ring_.ApproxSize(); }

 private:
  static constexpr size_t kCarry = 32;
  MpmcRing<ibv_wc> ring_;
  cq::CompletionSink* cq_sink_ = nullptr;
  cq::CompletionSink* counter_sink_ = nullptr;
  ibv_wc carry_[kCarry];  // engine thread only
  size_t carry_start_ = 0, carry_count_ = 0;
  std::atomic<bool> overrun_{false};
  std::atomic<uint64_t> overruns_{0};
  std::atomic<uint64_t> pushed_{0};
};

}  // namespace uroce::transport
