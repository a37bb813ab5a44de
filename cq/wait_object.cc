#include "cq/wait_object.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace uroce::cq {

Deadline Deadline::AfterMilliseconds(int timeout_ms) {
  Deadline deadline;
  if (timeout_ms < 0) return deadline;
  deadline.never_ = false;
  deadline.at_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  return deadline;
}

bool Deadline::Expired() const {
  return !never_ && std::chrono::steady_clock::now() >= at_;
}

timespec Deadline::MonotonicTimespec() const {
  const auto since_epoch = at_.time_since_epoch();
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds);
  timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds.count());
  ts.tv_nsec = static_cast<long>(nanoseconds.count());
  return ts;
}

StatusOr<std::unique_ptr<WaitObject>> WaitObject::Create(
    int raw_kind, const fid_wait* wait_set) {
  fi_wait_obj kind = FI_WAIT_NONE;
  switch (raw_kind) {
    case FI_WAIT_NONE:
      return std::unique_ptr<WaitObject>();
    case FI_WAIT_UNSPEC:
      // The provider's choice (fi_cq(3) "FI_WAIT_UNSPEC"), and one that
      // libfabric's utility code can wait on: ofi_rxm, in manual progress,
      // adds its core CQs' and EQ's wait objects to an epoll set through
      // fi_control(FI_GETWAIT) and refuses anything but an fd ("unsupported
      // wait object"), so with a mutex/cond an RDM server blocked in
      // fi_cq_sread never saw FI_CONNREQ. An eventfd, as libfabric's verbs
      // and tcp providers answer FI_WAIT_UNSPEC. Costs a descriptor, and a
      // system call only when fi_trywait armed it (NotifyAfterPublish).
      kind = FI_WAIT_FD;
      break;
    case FI_WAIT_FD:
    case FI_WAIT_MUTEX_COND:
    case FI_WAIT_YIELD:
      kind = static_cast<fi_wait_obj>(raw_kind);
      break;
    case FI_WAIT_SET:
      if (wait_set == nullptr) {
        return InvalidArgument("FI_WAIT_SET needs a wait_set");
      }
      return NotSupported("wait sets are not supported");
    default:
      return InvalidArgument("unknown wait object " + std::to_string(raw_kind));
  }
  std::unique_ptr<WaitObject> wait(new WaitObject(kind));
  UROCE_RETURN_IF_ERROR(wait->Init());
  return wait;
}

Status WaitObject::Init() {
  if (kind_ == FI_WAIT_YIELD) return Status::Ok();
  if (pthread_mutex_init(&mutex_, nullptr) != 0) {
    return ResourceExhausted("pthread_mutex_init failed");
  }
  if (pthread_cond_init(&cond_, nullptr) != 0) {
    pthread_mutex_destroy(&mutex_);
    return ResourceExhausted("pthread_cond_init failed");
  }
  sync_initialized_ = true;
  if (kind_ == FI_WAIT_FD) {
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) {
      return ResourceExhausted("eventfd failed: errno " + std::to_string(errno));
    }
  }
  return Status::Ok();
}

WaitObject::~WaitObject() {
  if (event_fd_ >= 0) close(event_fd_);
  if (sync_initialized_) {
    pthread_cond_destroy(&cond_);
    pthread_mutex_destroy(&mutex_);
  }
}

bool WaitObject::TakeInterrupt(uint64_t start_gen) {
  if (interrupt_generation_.load(std::memory_order_seq_cst) != start_gen) {
    interrupt_pending_.store(false, std::memory_order_seq_cst);
    return true;
  }
  return interrupt_pending_.exchange(false, std::memory_order_seq_cst);
}

void WaitObject::Interrupt() {
  interrupt_generation_.fetch_add(1, std::memory_order_seq_cst);
  interrupt_pending_.store(true, std::memory_order_seq_cst);
  if (!HasCondition()) return;  // yielding waiters see it on their next turn
  // Under the mutex, so it cannot fall between a waiter's test and its sleep.
  Lock();
  pthread_cond_broadcast(&cond_);
  Unlock();
}

void WaitObject::WakeAll() {
  if (!HasCondition()) return;
  if (blocked_waiters_.load(std::memory_order_seq_cst) != 0) {
    Lock();
    pthread_cond_broadcast(&cond_);
    Unlock();
  }
  // An fi_trywait announcement is good for one signal: the application calls
  // fi_trywait again before it blocks again (fi_poll(3)).
  if (external_armed_.exchange(false, std::memory_order_seq_cst)) {
    if (kind_ == FI_WAIT_FD) {
      const uint64_t one = 1;
      // Only fails if the counter would overflow, and then the fd is
      // readable already.
      [[maybe_unused]] ssize_t written = write(event_fd_, &one, sizeof(one));
    } else {
      // The application may sleep on this very condition variable.
      Lock();
      pthread_cond_broadcast(&cond_);
      Unlock();
    }
  }
}

void WaitObject::SleepLocked(const Deadline& deadline) {
  if (deadline.never()) {
    pthread_cond_wait(&cond_, &mutex_);
    return;
  }
  const timespec at = deadline.MonotonicTimespec();
  pthread_cond_clockwait(&cond_, &mutex_, CLOCK_MONOTONIC, &at);
}

void WaitObject::DrainEventFd() {
  uint64_t value;
  // Non-blocking: EAGAIN when there was nothing to drain.
  [[maybe_unused]] ssize_t got = read(event_fd_, &value, sizeof(value));
}

int WaitObject::GetWait(void* arg) {
  if (arg == nullptr) return -FI_EINVAL;
  switch (kind_) {
    case FI_WAIT_FD:
      *static_cast<int*>(arg) = event_fd_;
      return 0;
    case FI_WAIT_MUTEX_COND: {
      auto* mutex_cond = static_cast<fi_mutex_cond*>(arg);
      mutex_cond->mutex = &mutex_;
      mutex_cond->cond = &cond_;
      return 0;
    }
    default:
      return -FI_ENODATA;
  }
}

int ControlWait(WaitObject* wait, int command, void* arg) {
  switch (command) {
    case FI_GETWAIT:
      if (wait == nullptr) return -FI_ENODATA;
      return wait->GetWait(arg);
    case FI_GETWAITOBJ:
      if (arg == nullptr) return -FI_EINVAL;
      *static_cast<fi_wait_obj*>(arg) = wait == nullptr ? FI_WAIT_NONE : wait->kind();
      return 0;
    default:
      return -FI_ENOSYS;
  }
}

}  // namespace uroce::cq
