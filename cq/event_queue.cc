#include "common/raw_enum.h"
#include "cq/event_queue.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>
#include <string>

#include "cq/fid_ops.h"

namespace uroce::cq {
namespace {

EventQueue* Owner(fid_eq* eq) { return EventQueue::FromFid(eq); }

ssize_t EqRead(fid_eq* eq, uint32_t* event, void* buf, size_t len,
               uint64_t flags) {
  EventQueue* self = Owner(eq);
  if (self == nullptr) return -FI_EINVAL;
  return self->Read(event, buf, len, flags);
}
ssize_t EqReadErr(fid_eq* eq, fi_eq_err_entry* entry, uint64_t flags) {
  EventQueue* self = Owner(eq);
  if (self == nullptr) return -FI_EINVAL;
  return self->ReadErr(entry, flags);
}
ssize_t EqWrite(fid_eq* eq, uint32_t event, const void* buf, size_t len,
                uint64_t flags) {
  EventQueue* self = Owner(eq);
  if (self == nullptr) return -FI_EINVAL;
  return self->Write(event, buf, len, flags);
}
ssize_t EqSRead(fid_eq* eq, uint32_t* event, void* buf, size_t len,
                int timeout, uint64_t flags) {
  EventQueue* self = Owner(eq);
  if (self == nullptr) return -FI_EINVAL;
  return self->SRead(event, buf, len, timeout, flags);
}
const char* EqStrError(fid_eq* eq, int prov_errno, const void* err_data,
                       char* buf, size_t len) {
  EventQueue* self = Owner(eq);
  if (self == nullptr) return "not a uroce event queue";
  return self->StrError(prov_errno, err_data, buf, len);
}

fi_ops_eq kEqOps = {
    sizeof(fi_ops_eq), EqRead, EqReadErr, EqWrite, EqSRead, EqStrError,
};

// Connection events carry application data after the fi_eq_cm_entry; the
// reader gets as much of it as fits ("limited to the buffer space provided by
// the application when fi_eq_read is called").
bool IsConnectionEvent(uint32_t event) {
  return event == FI_CONNREQ || event == FI_CONNECTED || event == FI_SHUTDOWN;
}

// Names for the fabric errnos above 255 (fi_errno(3)); others are system
// errno values.
const char* FabricErrnoText(int errnum) {
  switch (errnum) {
    case FI_EOTHER: return "unspecified error";
    case FI_ETOOSMALL: return "provided buffer is too small";
    case FI_EOPBADSTATE: return "operation not permitted in current state";
    case FI_EAVAIL: return "error available";
    case FI_EBADFLAGS: return "flags not supported";
    case FI_ENOEQ: return "missing or unavailable event queue";
    case FI_EDOMAIN: return "invalid resource domain";
    case FI_ENOCQ: return "missing or unavailable completion queue";
    case FI_ECRC: return "CRC error";
    case FI_ETRUNC: return "truncation error";
    case FI_ENOKEY: return "required key not available";
    case FI_ENOAV: return "missing or unavailable address vector";
    case FI_EOVERRUN: return "queue has been overrun";
    case FI_ENORX: return "receiver not ready, no receive buffers available";
    default: return nullptr;
  }
}

}  // namespace

StatusOr<std::unique_ptr<EventQueue>> EventQueue::Open(const fi_eq_attr& attr,
                                                       void* context) {
  // fi_eq(3) "flags": FI_WRITE (fi_eq_write allowed) and FI_AFFINITY.
  if ((attr.flags & ~static_cast<uint64_t>(FI_WRITE | FI_AFFINITY)) != 0) {
    return InvalidArgument("unsupported fi_eq_attr.flags");
  }
  if (attr.size > kMaxEqSize) {
    return InvalidArgument("EQ size " + std::to_string(attr.size) +
                           " is above the maximum " +
                           std::to_string(kMaxEqSize));
  }
  StatusOr<std::unique_ptr<WaitObject>> wait =
      WaitObject::Create(RawEnum(attr.wait_obj), attr.wait_set);
  if (!wait.ok()) return wait.status();
  const size_t capacity = attr.size == 0 ? kDefaultEqSize : attr.size;
  return std::unique_ptr<EventQueue>(
      new EventQueue(attr, capacity, std::move(*wait), context));
}

EventQueue::EventQueue(const fi_eq_attr& attr, size_t capacity,
                       std::unique_ptr<WaitObject> wait, void* context)
    : flags_(attr.flags), capacity_(capacity), wait_(std::move(wait)) {
  std::memset(&fid_, 0, sizeof(fid_));
  fid_.eq.fid.fclass = FI_CLASS_EQ;
  fid_.eq.fid.context = context;
  fid_.eq.fid.ops = &FidOps<EventQueue>::table;
  fid_.eq.ops = &kEqOps;
  fid_.owner = this;
}

EventQueue::~EventQueue() = default;

EventQueue* EventQueue::FromFid(fid_eq* eq) {
  if (eq == nullptr) return nullptr;
  return FromFid(&eq->fid);
}

EventQueue* EventQueue::FromFid(struct fid* fid) {
  if (fid == nullptr || fid->fclass != FI_CLASS_EQ || fid->ops != &FidOps<EventQueue>::table) {
    return nullptr;
  }
  return reinterpret_cast<EqFid*>(fid)->owner;
}

ssize_t EventQueue::Enqueue(StoredEvent stored, size_t len) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // "Write operations against an overrun EQ will fail with -FI_EOVERRUN."
    if (overrun_) return -FI_EOVERRUN;
    if (events_.size() >= capacity_) {
      overrun_ = true;
      return -FI_EOVERRUN;
    }
    try {
      events_.push_back(std::move(stored));
    } catch (const std::bad_alloc&) {
      return -FI_ENOMEM;
    }
  }
  // The mutex orders the push before any waiter's test (see ReadyForWaiter):
  // a waiter that announced itself before our unlock is seen here.
  if (wait_ != nullptr) wait_->NotifyAfterPublish();
  return static_cast<ssize_t>(len);
}

ssize_t EventQueue::WriteEvent(uint32_t event, const void* buf, size_t len) {
  if (buf == nullptr || len == 0 || len > kMaxEqEventBytes) return -FI_EINVAL;
  StoredEvent stored;
  stored.event = event;
  try {
    const auto* bytes = static_cast<const uint8_t*>(buf);
    stored.bytes.assign(bytes, bytes + len);
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
  return Enqueue(std::move(stored), len);
}

ssize_t EventQueue::WriteError(const fi_eq_err_entry& error) {
  if (error.err_data_size > kMaxEqEventBytes ||
      (error.err_data_size > 0 && error.err_data == nullptr)) {
    return -FI_EINVAL;
  }
  StoredEvent stored;
  stored.is_error = true;
  stored.error = error;
  stored.error.err_data = nullptr;
  stored.error.err_data_size = 0;
  try {
    const auto* bytes = static_cast<const uint8_t*>(error.err_data);
    if (error.err_data_size > 0) {
      stored.err_data.assign(bytes, bytes + error.err_data_size);
    }
  } catch (const std::bad_alloc&) {
    return -FI_ENOMEM;
  }
  return Enqueue(std::move(stored), sizeof(fi_eq_err_entry));
}

size_t EventQueue::DropEventsFor(const struct fid* fid) { return DropEventsFor(fid, nullptr); }

size_t EventQueue::DropEventsFor(
    const struct fid* fid, const std::function<void(uint32_t event, const std::vector<uint8_t>& bytes)>& dropped) {
  std::vector<StoredEvent> removed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto names_fid = [fid](const StoredEvent& e) {
      if (e.is_error) return e.error.fid == fid;
      // fi_eq_entry and fi_eq_cm_entry both begin with the fid (fi_eq(3)).
      struct fid* owner = nullptr;
      if (e.bytes.size() < sizeof(owner)) return false;
      std::memcpy(&owner, e.bytes.data(), sizeof(owner));
      return owner == fid;
    };
    auto first = std::stable_partition(events_.begin(), events_.end(),
                                       [&](const StoredEvent& e) { return !names_fid(e); });
    std::move(first, events_.end(), std::back_inserter(removed));
    events_.erase(first, events_.end());
  }
  if (dropped) {
    for (const StoredEvent& e : removed) {
      if (!e.is_error) dropped(e.event, e.bytes);
    }
  }
  return removed.size();
}

void EventQueue::Signal() {
  if (wait_ != nullptr) wait_->Interrupt();
}

ssize_t EventQueue::Read(uint32_t* event, void* buf, size_t len,
                         uint64_t flags) {
  if (event == nullptr || buf == nullptr) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_PEEK)) != 0) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return overrun_ ? -FI_EOVERRUN : -FI_EAGAIN;
  const StoredEvent& next = events_.front();
  if (next.is_error) return -FI_EAVAIL;
  size_t copied = next.bytes.size();
  if (len < copied) {
    // The fixed part must fit; only a connection event's data may be cut.
    if (!IsConnectionEvent(next.event) || len < sizeof(fi_eq_cm_entry)) {
      return -FI_ETOOSMALL;
    }
    copied = len;
  }
  std::memcpy(buf, next.bytes.data(), copied);
  *event = next.event;
  // FI_PEEK: "read from the EQ without being consumed".
  if ((flags & FI_PEEK) == 0) events_.pop_front();
  return static_cast<ssize_t>(copied);
}

ssize_t EventQueue::ReadErr(fi_eq_err_entry* entry, uint64_t flags) {
  if (entry == nullptr) return -FI_EINVAL;
  if ((flags & ~static_cast<uint64_t>(FI_PEEK)) != 0) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.empty()) return overrun_ ? -FI_EOVERRUN : -FI_EAGAIN;
  StoredEvent& next = events_.front();
  if (!next.is_error) return -FI_EAGAIN;
  void* const user_err_data = entry->err_data;
  const size_t user_err_data_size = entry->err_data_size;
  *entry = next.error;
  // fi_eq(3) "err_data_size": with 0 on input, a buffer of ours that stays
  // valid until the next read call; otherwise copy what fits and say how
  // much was copied.
  if (user_err_data_size == 0 || user_err_data == nullptr) {
    err_data_.swap(next.err_data);
    if ((flags & FI_PEEK) != 0) next.err_data = err_data_;
    entry->err_data = err_data_.empty() ? nullptr : err_data_.data();
    entry->err_data_size = err_data_.size();
  } else {
    const size_t copied = std::min(user_err_data_size, next.err_data.size());
    if (copied > 0) std::memcpy(user_err_data, next.err_data.data(), copied);
    entry->err_data = user_err_data;
    entry->err_data_size = copied;
  }
  if ((flags & FI_PEEK) == 0) events_.pop_front();
  return static_cast<ssize_t>(sizeof(fi_eq_err_entry));
}

ssize_t EventQueue::Write(uint32_t event, const void* buf, size_t len,
                          uint64_t flags) {
  // "If the FI_WRITE flag is not set, then the application may not invoke
  // fi_eq_write."
  if ((flags_ & FI_WRITE) == 0) return -FI_ENOSYS;
  if (flags != 0) return -FI_EBADFLAGS;
  return WriteEvent(event, buf, len);
}

bool EventQueue::ReadyForWaiter() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !events_.empty() || overrun_;
}

ssize_t EventQueue::SRead(uint32_t* event, void* buf, size_t len,
                          int timeout_ms, uint64_t flags) {
  // "It is invalid for applications to call this function if the EQ has been
  // configured with a wait object of FI_WAIT_NONE or FI_WAIT_SET."
  if (wait_ == nullptr) return -FI_ENOSYS;
  const Deadline deadline = Deadline::AfterMilliseconds(timeout_ms);
  for (;;) {
    const ssize_t n = Read(event, buf, len, flags);
    if (n != -FI_EAGAIN) return n;
    const WaitOutcome outcome =
        wait_->Wait([&] { return ReadyForWaiter(); }, deadline);
    if (outcome != WaitOutcome::kReady) {
      // Timed out or signalled: one last look, else -FI_EAGAIN.
      return Read(event, buf, len, flags);
    }
  }
}

const char* EventQueue::StrError(int prov_errno, const void* err_data,
                                 char* buf, size_t len) const {
  // EQ errors carry a positive errno or fabric errno as prov_errno.
  const int errnum = prov_errno < 0 ? -prov_errno : prov_errno;
  const char* text = FabricErrnoText(errnum);
  if (text == nullptr) text = strerrordesc_np(errnum);  // static, any thread
  if (text == nullptr) text = "unknown provider error";
  if (buf == nullptr || len == 0) return text;
  std::snprintf(buf, len, "%s", text);
  return buf;
}

int EventQueue::Control(int command, void* arg) { return ControlWait(wait_.get(), command, arg); }

int EventQueue::TryWait() {
  if (wait_ == nullptr) return -FI_EINVAL;
  return wait_->TryWait([&] { return ReadyForWaiter(); });
}

int EventQueue::CheckClosable() const {
  // "The EQ must not be bound to any other objects prior to being closed,
  // otherwise the call will return -FI_EBUSY."
  return bindings_.count() != 0 ? -FI_EBUSY : 0;
}

}  // namespace uroce::cq
