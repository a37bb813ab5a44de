// uroce's bounded lock-free rings, all in this file:
//   MpmcRing<T>   any number of producers and consumers (Vyukov's bounded
//                 MPMC queue, a sequence number per slot): verbs completions
//                 (the engine produces, application threads consume),
//                 doorbells and events;
//   StridedRing   the same algorithm over slots whose size a QP's
//                 capabilities decide: send and receive work requests (any
//                 application thread produces, the engine consumes);
//   SpscRing<T>   one producer thread and one consumer at a time, in bursts,
//                 with peeking: libfabric completion queues (the engine
//                 produces, readers take turns under their own lock).
// The ring a daemon shares with another process (host/shm_channel.h) is not
// one of these: its indices live in memory the other side may write, so it
// checks every value it reads there, which these rings, shared only between
// threads of one process, do not need to.
//
// In MpmcRing and StridedRing, producer and consumer positions sit on their
// own cache lines, and every hand-over is an acquire/release pair on the
// slot's sequence number, so a consumer never sees a half-written slot. No
// ring allocates after construction, takes a lock or makes a system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace uroce {

inline constexpr size_t kCacheLine = 64;

// Memory for a ring's slots that its owner supplies instead of the ring
// allocating it: verbs parent domains' allocators (ibv_alloc_parent_domain(3))
// give a QP's, SRQ's or CQ's buffers from the application's memory. `bytes`
// holds at least the ring's StorageBytesFor, aligned to kCacheLine;
// `release` gives it back when the ring goes. Control path only.
struct RingStorage {
  void* bytes = nullptr;
  std::function<void(void*)> release;
};
// Makes a RingStorage of `bytes` bytes aligned to `alignment`; a storage
// with bytes == nullptr means the allocator failed.
using RingAllocator = std::function<RingStorage(size_t bytes, size_t alignment)>;

namespace ring_detail {
// The storage a ring was given, or its own (aligned operator new).
inline std::byte* TakeStorage(RingStorage& given, size_t bytes) {
  if (given.bytes != nullptr) return static_cast<std::byte*>(given.bytes);
  return static_cast<std::byte*>(::operator new(bytes, std::align_val_t{kCacheLine}));
}
inline void GiveBack(RingStorage& given, void* storage) {
  if (given.bytes != nullptr) {
    if (given.release) given.release(storage);
  } else {
    ::operator delete(storage, std::align_val_t{kCacheLine});
  }
}
}  // namespace ring_detail

constexpr size_t RoundUpPow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <typename T>
class MpmcRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring slots are copied bytewise");

 public:
  // Capacity is `min_capacity` rounded up to a power of two (at least 2);
  // the slots in `storage` (StorageBytesFor bytes) when given, else its own.
  explicit MpmcRing(size_t min_capacity, RingStorage storage = {})
      : mask_(RoundUpPow2(min_capacity < 2 ? 2 : min_capacity) - 1),
        given_(std::move(storage)),
        slots_(reinterpret_cast<Slot*>(ring_detail::TakeStorage(given_, (mask_ + 1) * sizeof(Slot)))) {
    for (size_t i = 0; i <= mask_; ++i) new (&slots_[i]) Slot{{i}, T{}};
  }
  ~MpmcRing() {
    for (size_t i = 0; i <= mask_; ++i) slots_[i].~Slot();
    ring_detail::GiveBack(given_, slots_);
  }

  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  // The bytes a ring of `min_capacity` keeps its slots in.
  static size_t StorageBytesFor(size_t min_capacity) {
    return RoundUpPow2(min_capacity < 2 ? 2 : min_capacity) * sizeof(Slot);
  }

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

  // Any thread: claims a slot and lets `fill(T&)` write the value in place,
  // then publishes it. False when the ring is full (`fill` not called).
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
  RingStorage given_;
  Slot* const slots_;
  Position tail_;  // producers
  Position head_;  // consumers
};

// The same ring for work requests whose size a queue's capabilities decide
// (memory per QP): each slot is a sequence number followed by
// `payload_bytes` of raw storage, and the stride between slots is chosen at
// run time, so a QP with one SGE and no inline data pays for one SGE, not
// for the device's largest request. The payload is bytes: users write and
// read it through small view types (work_request.h) that never touch memory
// past `payload_bytes`. Slots are 8-byte aligned, not cache-line aligned:
// at 256 requests per queue a cache line per slot would cost more than the
// requests themselves (the positions keep their own cache lines).
//
// Besides push / pop, the single consumer may take a slot without freeing
// it (TryTakeSingleConsumer) and free it later, in order (Release): the send
// queue is then also the requester's window, and a work request is written
// once, by the poster, and read in place until it retires.
class StridedRing {
 public:
  // Capacity is `min_capacity` rounded up to a power of two (at least 2).
  // The slots in `storage` (StorageBytesFor bytes) when given, else its own.
  StridedRing(size_t min_capacity, size_t payload_bytes, RingStorage storage = {})
      : mask_(RoundUpPow2(min_capacity < 2 ? 2 : min_capacity) - 1),
        payload_bytes_(RoundUp8(payload_bytes)),
        stride_(sizeof(Sequence) + payload_bytes_),
        given_(std::move(storage)),
        storage_(ring_detail::TakeStorage(given_, stride_ * (mask_ + 1))) {
    for (size_t i = 0; i <= mask_; ++i) new (storage_ + i * stride_) Sequence(i);
  }
  ~StridedRing() {
    for (size_t i = 0; i <= mask_; ++i) sequence(i).~Sequence();
    ring_detail::GiveBack(given_, storage_);
  }

  // The bytes a ring of `min_capacity` slots of `payload_bytes` keeps them in.
  static size_t StorageBytesFor(size_t min_capacity, size_t payload_bytes) {
    return RoundUpPow2(min_capacity < 2 ? 2 : min_capacity) * (sizeof(Sequence) + RoundUp8(payload_bytes));
  }

  StridedRing(const StridedRing&) = delete;
  StridedRing& operator=(const StridedRing&) = delete;

  size_t capacity() const { return mask_ + 1; }
  size_t payload_bytes() const { return payload_bytes_; }
  // What the slots take (the object itself aside).
  size_t StorageBytes() const { return stride_ * (mask_ + 1); }

  // Any thread: claims a slot, lets `fill(std::byte* payload)` write at most
  // payload_bytes() bytes into it, then publishes it. False when full.
  template <typename Fill>
  bool TryPushWith(Fill&& fill) {
    size_t pos = tail_.value.load(std::memory_order_relaxed);
    for (;;) {
      Sequence& seq = sequence(pos & mask_);
      const size_t s = seq.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(s) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.value.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          fill(payload(pos & mask_));
          seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.value.load(std::memory_order_relaxed);
      }
    }
  }

  // One consumer at a time (the engine thread, or a control call holding
  // the progress token, whose acquire/release orders one consumer after the
  // other; no compare-exchange on a single-consumer path): lets
  // `take(const std::byte* payload)` read the oldest request in place and
  // frees its slot. False when empty.
  template <typename Take>
  bool TryPopSingleConsumer(Take&& take) {
    const size_t pos = head_.value.load(std::memory_order_relaxed);
    Sequence& seq = sequence(pos & mask_);
    if (seq.load(std::memory_order_acquire) != pos + 1) return false;
    take(static_cast<const std::byte*>(payload(pos & mask_)));
    head_.value.store(pos + 1, std::memory_order_relaxed);
    seq.store(pos + mask_ + 1, std::memory_order_release);
    return true;
  }

  // One consumer at a time: takes the oldest published request at position
  // head() and returns its payload, but keeps its slot: producers cannot
  // reuse it until Release(that position). nullptr when empty.
  std::byte* TryTakeSingleConsumer() {
    const size_t pos = head_.value.load(std::memory_order_relaxed);
    if (sequence(pos & mask_).load(std::memory_order_acquire) != pos + 1) return nullptr;
    head_.value.store(pos + 1, std::memory_order_relaxed);
    return payload(pos & mask_);
  }

  // Frees the slot of a taken position (the consumer has finished reading
  // it; a producer may write it from now on).
  void Release(size_t pos) { sequence(pos & mask_).store(pos + mask_ + 1, std::memory_order_release); }

  // The consumer's position: the next request TryTake/TryPop would return.
  size_t head() const { return head_.value.load(std::memory_order_relaxed); }

  // Published requests not yet taken or popped; a snapshot, exact only when
  // no thread pushes or pops meanwhile.
  size_t ApproxSize() const {
    const size_t tail = tail_.value.load(std::memory_order_acquire);
    const size_t head = head_.value.load(std::memory_order_acquire);
    return tail >= head ? tail - head : 0;
  }

 private:
  using Sequence = std::atomic<size_t>;
  static_assert(alignof(Sequence) <= 8 && sizeof(Sequence) == 8, "a slot is an 8-byte sequence then the payload");
  struct alignas(kCacheLine) Position {
    std::atomic<size_t> value{0};
  };

  static constexpr size_t RoundUp8(size_t n) { return (n + 7) & ~size_t{7}; }
  Sequence& sequence(size_t index) { return *std::launder(reinterpret_cast<Sequence*>(storage_ + index * stride_)); }
  std::byte* payload(size_t index) { return storage_ + index * stride_ + sizeof(Sequence); }

  const size_t mask_;
  const size_t payload_bytes_;
  const size_t stride_;
  RingStorage given_;
  std::byte* const storage_;
  Position tail_;  // producers
  Position head_;  // consumer
};

// A bounded ring with one producer thread and one consumer at a time
// (consumers that take turns under a lock of their own count as one), moved
// in bursts: the producer writes several slots in place and publishes them
// with one store; the consumer reads published slots in place, as many as it
// likes and without taking them, then frees a prefix with one store. No
// sequence numbers: the two positions say everything.
//
// Ordering. The producer writes slots, then stores its position (release,
// or seq_cst for a caller whose wake-up protocol needs one total order,
// cq/wait_object.h); the consumer loads it (acquire) before reading slots,
// and stores its own position (release) after its reads are done; the
// producer loads that (acquire) before writing a slot again, so a slot is
// never overwritten while it is read. The producer keeps a private copy of
// the consumer's position and reloads it only when the copy shows too little
// room. The positions are 64-bit counters on cache lines of their own; they
// never wrap in practice.
//
// The slots are given at construction (the caller allocates them, so that a
// failed allocation is its error to report, not an exception).
template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring slots are copied bytewise");

 public:
  // `slots` holds `capacity` elements; capacity is a power of two.
  SpscRing(std::unique_ptr<T[]> slots, size_t capacity) : mask_(capacity - 1), slots_(std::move(slots)) {}

  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return mask_ + 1; }

  // Producer: how many slots may be written now, at most `wanted`.
  size_t Writable(size_t wanted) {
    const uint64_t tail = producer_.tail.load(std::memory_order_relaxed);
    size_t room = capacity() - static_cast<size_t>(tail - producer_.cached_head);
    if (room < wanted) {
      // Pairs with the consumer's release store in Consume: its reads of the
      // slots about to be written again are finished.
      producer_.cached_head = consumer_.head.load(std::memory_order_acquire);
      room = capacity() - static_cast<size_t>(tail - producer_.cached_head);
    }
    return room < wanted ? room : wanted;
  }
  // Producer: the `i`th unpublished slot (i < Writable()).
  T& WriteSlot(size_t i) { return slots_[(producer_.tail.load(std::memory_order_relaxed) + i) & mask_]; }
  // Producer: hands the first `n` written slots to the consumer.
  void Publish(size_t n, std::memory_order order = std::memory_order_release) {
    producer_.tail.store(producer_.tail.load(std::memory_order_relaxed) + n, order);
  }

  // Consumer: published slots not yet freed.
  size_t Readable() const {
    // Acquire pairs with Publish: the slots up to tail are complete.
    return static_cast<size_t>(producer_.tail.load(std::memory_order_acquire) -
                               consumer_.head.load(std::memory_order_relaxed));
  }
  // Consumer: the `i`th published slot, read in place (i < Readable()).
  const T& ReadSlot(size_t i) const { return slots_[(consumer_.head.load(std::memory_order_relaxed) + i) & mask_]; }
  // Consumer: frees the first `n` published slots for the producer.
  void Consume(size_t n) {
    consumer_.head.store(consumer_.head.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  // Any thread, without the consumer's turn: whether nothing was published
  // and not freed when both positions were loaded (head never passes tail).
  bool LooksEmpty() const {
    return consumer_.head.load(std::memory_order_acquire) == producer_.tail.load(std::memory_order_acquire);
  }
  // Any thread: published slots not yet freed, with both positions loaded
  // seq_cst (a waiter's test in cq/wait_object.h's protocol). The consumer's
  // position first: loaded after it, the producer's is at least as far, so
  // the difference cannot wrap while a consumer frees slots meanwhile.
  size_t SizeSeqCst() const {
    const uint64_t head = consumer_.head.load(std::memory_order_seq_cst);
    return static_cast<size_t>(producer_.tail.load(std::memory_order_seq_cst) - head);
  }

 private:
  const uint64_t mask_;
  const std::unique_ptr<T[]> slots_;
  // Written by the producer only.
  struct alignas(kCacheLine) ProducerSide {
    std::atomic<uint64_t> tail{0};
    uint64_t cached_head = 0;
  } producer_;
  // Written by the consumer whose turn it is only.
  struct alignas(kCacheLine) ConsumerSide {
    std::atomic<uint64_t> head{0};
  } consumer_;
};

}  // namespace uroce
