// A bounded lock-free ring with a sequence number per slot (Vyukov's bounded
// MPMC queue). uroce uses it where application threads and the engine meet:
// send and receive work requests (any application thread produces, the engine
// consumes) and completions (the engine produces, application threads
// consume). Producer and consumer positions sit on their own cache lines; every
// hand-over is an acquire/release pair on the slot's sequence number, so a
// consumer never sees a half-written slot. No allocation after construction,
// no locks, no system calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace uroce::transport {

inline constexpr size_t kCacheLine = 64;

constexpr size_t RoundUpPow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <typename T>
class MpmcRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring slots are copied bytewise");

 public:
  // Capacity is `min_capacity` rounded up to a power of two (at least 2).
  explicit MpmcRing(size_t min_capacity)
      : mask_(RoundUpPow2(min_capacity < 2 ? 2 : min_capacity) - 1),
        slots_(new Slot[mask_ + 1]) {
    for (size_t i = 0; i <= mask_; ++i) slots_[i].sequence.store(i, std::memory_order_relaxed);
  }

  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  size_t capacity() const { return mask_ + 1; }

  // Any thread. False when the ring is full.
  bool TryPush(const T& value) {
    return TryPushWith([&value](T& slot) { slot = value; });
  }

  // Any thread. False when the ring is empty.
  bool TryPop(T* out) {
    size_t pos = head_.value.load(std::memory_order_relaxed);
    for (;;) {
      Slot& slot = slots_[pos & mask_];
      const size_t seq = slot.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = slot.value;
          slot.sequence.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = head_.value.load(std::memory_order_relaxed);
      }
    }
  }

  // Any thread: claims a slot and lets `fill(T&)` write the value in place
  // (only the bytes it needs: a work request sized by what it carries,
  // issue 16), then publishes it. False when the ring is full (`fill` not
  // called).
  template <typename Fill>
  bool TryPushWith(Fill&& fill) {
    size_t pos = tail_.value.load(std::memory_order_relaxed);
    for (;;) {
      Slot& slot = slots_[pos & mask_];
      const size_t seq = slot.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          fill(slot.value);
          slot.sequence.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.value.load(std::memory_order_relaxed);
      }
    }
  }

  // For rings with one consumer at a time (the engine's work request rings:
  // the engine thread, or a control call holding the progress token, whose
  // acquire/release orders one consumer after the other): lets
  // `take(const T&)` read the oldest value in place and frees its slot, with
  // no compare-exchange (issue 16: no CAS on a single-consumer path). False
  // when empty. Never mixed with TryPop on the same ring.
  template <typename Take>
  bool TryPopSingleConsumer(Take&& take) {
    const size_t pos = head_.value.load(std::memory_order_relaxed);
    Slot& slot = slots_[pos & mask_];
    if (slot.sequence.load(std::memory_order_acquire) != pos + 1) return false;
    take(static_cast<const T&>(slot.value));
    head_.value.store(pos + 1, std::memory_order_relaxed);
    slot.sequence.store(pos + mask_ + 1, std::memory_order_release);
    return true;
  }

  // Pops up to `n` values into `out`; returns how many.
  size_t PopBurst(T* out, size_t n) {
    size_t got = 0;
    while (got < n && TryPop(out + got)) ++got;
    return got;
  }

  // A snapshot; exact only when no thread pushes or pops meanwhile.
  size_t ApproxSize() const {
    const size_t tail = tail_.value.load(std::memory_order_acquire);
    const size_t head = head_.value.load(std::memory_order_acquire);
    return tail >= head ? tail - head : 0;
  }

 private:
  struct alignas(kCacheLine) Slot {
    std::atomic<size_t> sequence;
    T value;
  };
  struct alignas(kCacheLine) Position {
    std::atomic<size_t> value{0};
  };

  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  Position tail_;  // producers
  Position head_;  // consumers
};

}  // namespace uroce::transport
