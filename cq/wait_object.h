// Wait objects for CQs, counters and EQs (fi_cq(3), fi_cntr(3), fi_eq(3)
// "wait_obj"; fi_poll(3) "fi_trywait"), and the deadline arithmetic of their
// blocking calls.
//
// Who calls what:
//   NotifyAfterPublish  the producer (for a CQ or counter the engine's poll
//                       thread), right after it published entries or a new
//                       value. No lock, no allocation, no system call unless
//                       a waiter has announced itself.
//   Wait                a thread blocking in fi_cq_sread, fi_cntr_wait,
//                       fi_eq_sread (any application thread, several at once).
//   TryWait             fi_trywait for a native wait (poll on the fd, or
//                       pthread_cond_wait on the mutex/cond of FI_GETWAIT).
//   Interrupt           fi_cq_signal (any thread).
//
// Lost wake-ups, and why the producer needs no lock and no system call:
//
//   waiter                                producer
//   W1 blocked_waiters_ += 1  (seq_cst)   P1 publish: tail / value (seq_cst)
//   W2 test the condition: loads of       P2 load blocked_waiters_ and
//      tail / value           (seq_cst)      external_armed_      (seq_cst)
//   W3 sleep on the condition variable    P3 if either is set: lock the
//      (holding the mutex from W2 to W3,     mutex, broadcast, unlock; write
//      which pthread_cond_wait releases      the eventfd for an fd waiter
//      atomically)
//
// All four are seq_cst, so they sit in one total order. If W1 precedes P2,
// the producer sees the waiter and wakes it; otherwise P1 precedes W2 (P1 is
// before P2 and W1 before W2 in program order) and the waiter sees the new
// entries and does not sleep. This is the store-buffering pattern, which
// seq_cst forbids and release/acquire alone would not. P3 takes the mutex,
// so its broadcast cannot fall between W2 and W3. When nobody waits, P2 reads
// two zeros and the producer's whole cost is a seq_cst store and two loads.
// (Standalone fences would do the same, but GCC cannot instrument them under
// ThreadSanitizer, so the publishing operations themselves are seq_cst.)
//
// fi_trywait is the same protocol with external_armed_ as the announcement:
// an application must call fi_trywait and get 0 before it blocks on the fd or
// the condition variable ("Failure to do so may result in the wait object not
// being signaled", fi_poll(3)). The producer consumes the announcement when
// it signals, so an fd that nobody polls costs no system call either. With
// FI_WAIT_MUTEX_COND the application calls fi_trywait holding the mutex and
// then pthread_cond_wait; the producer signals under the mutex.
#pragma once

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>

#include "common/status.h"

namespace uroce::cq {

// When a blocking call gives up. Timeouts are in milliseconds and a negative
// value means forever (fi_cq(3) "timeout"). A deadline is absolute, so a wait
// that resumes after a spurious wake-up uses only the time that remains.
class Deadline {
 public:
  static Deadline AfterMilliseconds(int timeout_ms);
  static Deadline Never() { return Deadline(); }

  bool never() const { return never_; }
  bool Expired() const;
  // CLOCK_MONOTONIC (steady_clock on Linux), for pthread_cond_clockwait.
  timespec MonotonicTimespec() const;

 private:
  Deadline() = default;
  bool never_ = true;
  std::chrono::steady_clock::time_point at_{};
};

enum class WaitOutcome {
  kReady,        // the condition holds
  kTimedOut,     // the deadline passed first
  kInterrupted,  // Interrupt() (fi_cq_signal) was called
};

class WaitObject {
 public:
  // Checks `kind` (and wait_set) as the man pages describe wait_obj and
  // returns the wait object, or a null pointer for FI_WAIT_NONE.
  //   FI_WAIT_NONE        no wait object: blocking calls are refused.
  //   FI_WAIT_UNSPEC      FI_WAIT_FD (FI_GETWAITOBJ reports it): what
  //                       libfabric's utility providers (ofi_rxm) can add
  //                       to their epoll sets; see wait_object.cc.
  //   FI_WAIT_FD          an eventfd for poll/select/epoll, plus the internal
  //                       mutex/cond that blocking calls sleep on.
  //   FI_WAIT_MUTEX_COND  the mutex/cond that FI_GETWAIT returns.
  //   FI_WAIT_YIELD       no object: blocking calls spin with sched_yield.
  //   FI_WAIT_SET         refused: without a wait set it is invalid, and wait
  //                       sets are not implemented yet.
  //   anything else       invalid (FI_WAIT_POLLFD belongs to wait sets).
  // `kind` is an fi_wait_obj read as an integer (it comes from a C caller and
  // may hold any value; see common/raw_enum.h).
  static StatusOr<std::unique_ptr<WaitObject>> Create(int kind,
                                                      const fid_wait* wait_set);
  ~WaitObject();
  WaitObject(const WaitObject&) = delete;
  WaitObject& operator=(const WaitObject&) = delete;

  // The wait object actually used (FI_GETWAITOBJ).
  fi_wait_obj kind() const { return kind_; }

  // Producer side; see the ordering argument above. The caller published its
  // change with a seq_cst store or read-modify-write before calling.
  void NotifyAfterPublish() {
    if (blocked_waiters_.load(std::memory_order_seq_cst) == 0 &&
        !external_armed_.load(std::memory_order_seq_cst)) {
      return;  // the common case: nobody waits
    }
    WakeAll();
  }

  // fi_cq_signal: every thread blocked in Wait returns kInterrupted. A signal
  // that finds no blocked thread is kept for the next Wait, so a thread that
  // was about to block is not missed (libfabric's utility CQ does the same).
  void Interrupt();

  // Blocks until ready() holds, the deadline passes or Interrupt() is called.
  // ready() is called with the wait mutex held (for mutex/cond objects), must
  // read the published state with seq_cst loads, and must not block.
  template <typename Ready>
  WaitOutcome Wait(const Ready& ready, const Deadline& deadline);

  // fi_trywait (fi_poll(3)): announces a native waiter, then returns
  // -FI_EAGAIN if ready() already holds (read first, then try again) and 0 if
  // it is safe to block on the object FI_GETWAIT returned. For FI_WAIT_FD it
  // first empties the eventfd, so poll(2) blocks until the next signal.
  // -FI_EINVAL for FI_WAIT_YIELD, which has no native object.
  template <typename Ready>
  int TryWait(const Ready& ready);

  // FI_GETWAIT: an int fd for FI_WAIT_FD (and FI_WAIT_UNSPEC), the struct
  // fi_mutex_cond for FI_WAIT_MUTEX_COND; -FI_ENODATA for FI_WAIT_YIELD.
  // The condition variable uses the default clock (CLOCK_REALTIME) so that an
  // application can pthread_cond_timedwait on it as usual. The mutex is the
  // one blocking calls sleep under: an application must not hold it while it
  // calls fi_cq_sread, fi_cntr_wait or fi_eq_sread (it is not recursive).
  int GetWait(void* arg);

 private:
  explicit WaitObject(fi_wait_obj kind) : kind_(kind) {}
  Status Init();

  bool HasCondition() const { return kind_ != FI_WAIT_YIELD; }
  // Consumes a pending Interrupt() for a waiter that began at `start_gen`.
  bool TakeInterrupt(uint64_t start_gen);
  // Producer side, slow path: somebody waits.
  void WakeAll();
  // Sleeps on the condition variable (mutex held) until woken or `deadline`.
  void SleepLocked(const Deadline& deadline);
  void DrainEventFd();
  void Lock() { pthread_mutex_lock(&mutex_); }
  void Unlock() { pthread_mutex_unlock(&mutex_); }

  const fi_wait_obj kind_;
  std::atomic<uint32_t> blocked_waiters_{0};
  std::atomic<bool> external_armed_{false};
  std::atomic<uint64_t> interrupt_generation_{0};
  std::atomic<bool> interrupt_pending_{false};
  pthread_mutex_t mutex_;
  pthread_cond_t cond_;
  bool sync_initialized_ = false;
  int event_fd_ = -1;  // FI_WAIT_FD only
};

// fi_control(3) for the commands every object with a wait object answers
// alike (CQs, counters, EQs): FI_GETWAIT (WaitObject::GetWait; -FI_ENODATA
// without one) and FI_GETWAITOBJ (its kind; FI_WAIT_NONE without one).
// `wait` may be null. -FI_ENOSYS for any other command.
int ControlWait(WaitObject* wait, int command, void* arg);

template <typename Ready>
WaitOutcome WaitObject::Wait(const Ready& ready, const Deadline& deadline) {
  const uint64_t start_gen =
      interrupt_generation_.load(std::memory_order_seq_cst);
  if (!HasCondition()) {
    // FI_WAIT_YIELD: "wait without a wait object but instead yield on every
    // wait" (fi_cq(3)). The producer never has to wake anybody.
    for (;;) {
      if (ready()) return WaitOutcome::kReady;
      if (TakeInterrupt(start_gen)) return WaitOutcome::kInterrupted;
      if (deadline.Expired()) return WaitOutcome::kTimedOut;
      sched_yield();
    }
  }
  Lock();
  blocked_waiters_.fetch_add(1, std::memory_order_seq_cst);  // W1
  WaitOutcome outcome;
  for (;;) {
    if (ready()) {  // W2
      outcome = WaitOutcome::kReady;
      break;
    }
    if (TakeInterrupt(start_gen)) {
      outcome = WaitOutcome::kInterrupted;
      break;
    }
    if (deadline.Expired()) {
      outcome = WaitOutcome::kTimedOut;
      break;
    }
    SleepLocked(deadline);  // W3; spurious wake-ups just test again
  }
  blocked_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  Unlock();
  return outcome;
}

template <typename Ready>
int WaitObject::TryWait(const Ready& ready) {
  if (!HasCondition()) return -FI_EINVAL;
  if (kind_ == FI_WAIT_FD) DrainEventFd();
  external_armed_.store(true, std::memory_order_seq_cst);
  return ready() ? -FI_EAGAIN : 0;
}

}  // namespace uroce::cq
