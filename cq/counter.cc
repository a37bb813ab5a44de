#include "common/raw_enum.h"
#include "cq/counter.h"

#include <rdma/fi_errno.h>

#include <cstring>

#include "cq/fid_ops.h"

namespace uroce::cq {
namespace {

Counter* Owner(fid_cntr* cntr) { return Counter::FromFid(cntr); }

// fi_cntr_read cannot return an error; a fid that is not ours reads as 0.
uint64_t CntrRead(fid_cntr* cntr) {
  Counter* self = Owner(cntr);
  return self != nullptr ? self->Read() : 0;
}
uint64_t CntrReadErr(fid_cntr* cntr) {
  Counter* self = Owner(cntr);
  return self != nullptr ? self->ReadErr() : 0;
}
int CntrAdd(fid_cntr* cntr, uint64_t value) {
  Counter* self = Owner(cntr);
  if (self == nullptr) return -FI_EINVAL;
  return self->Add(value);
}
int CntrSet(fid_cntr* cntr, uint64_t value) {
  Counter* self = Owner(cntr);
  if (self == nullptr) return -FI_EINVAL;
  return self->Set(value);
}
int CntrWait(fid_cntr* cntr, uint64_t threshold, int timeout) {
  Counter* self = Owner(cntr);
  if (self == nullptr) return -FI_EINVAL;
  return self->Wait(threshold, timeout);
}
int CntrAddErr(fid_cntr* cntr, uint64_t value) {
  Counter* self = Owner(cntr);
  if (self == nullptr) return -FI_EINVAL;
  return self->AddErr(value);
}
int CntrSetErr(fid_cntr* cntr, uint64_t value) {
  Counter* self = Owner(cntr);
  if (self == nullptr) return -FI_EINVAL;
  return self->SetErr(value);
}

fi_ops_cntr kCntrOps = {
    sizeof(fi_ops_cntr), CntrRead, CntrReadErr, CntrAdd,
    CntrSet,             CntrWait, CntrAddErr,  CntrSetErr,
};

}  // namespace

StatusOr<std::unique_ptr<Counter>> Counter::Open(const fi_cntr_attr& attr,
                                                 void* context,
                                                 Progress* progress) {
  if (attr.events != FI_CNTR_EVENTS_COMP) {
    return InvalidArgument("fi_cntr_attr.events must be FI_CNTR_EVENTS_COMP");
  }
  // "Flags are reserved for future use, and must be set to 0."
  if (attr.flags != 0) return InvalidArgument("fi_cntr_attr.flags must be 0");
  StatusOr<std::unique_ptr<WaitObject>> wait =
      WaitObject::Create(RawEnum(attr.wait_obj), attr.wait_set);
  if (!wait.ok()) return wait.status();
  return std::unique_ptr<Counter>(
      new Counter(std::move(*wait), context, progress));
}

Counter::Counter(std::unique_ptr<WaitObject> wait, void* context,
                 Progress* progress)
    : wait_(std::move(wait)), progress_(progress) {
  std::memset(&fid_, 0, sizeof(fid_));
  fid_.cntr.fid.fclass = FI_CLASS_CNTR;
  fid_.cntr.fid.context = context;
  fid_.cntr.fid.ops = &FidOps<Counter>::table;
  fid_.cntr.ops = &kCntrOps;
  fid_.owner = this;
}

Counter::~Counter() = default;

Counter* Counter::FromFid(fid_cntr* cntr) {
  if (cntr == nullptr) return nullptr;
  return FromFid(&cntr->fid);
}

Counter* Counter::FromFid(struct fid* fid) {
  if (fid == nullptr || fid->fclass != FI_CLASS_CNTR ||
      fid->ops != &FidOps<Counter>::table) {
    return nullptr;
  }
  return reinterpret_cast<CntrFid*>(fid)->owner;
}

size_t Counter::PushCompletions(const ibv_wc* wcs, size_t count) {
  uint64_t succeeded = 0;
  for (size_t i = 0; i < count; ++i) {
    if (wcs[i].status == IBV_WC_SUCCESS) ++succeeded;
  }
  const uint64_t failed = count - succeeded;
  if (succeeded != 0) value_.fetch_add(succeeded, std::memory_order_seq_cst);
  if (failed != 0) error_.fetch_add(failed, std::memory_order_seq_cst);
  if (count != 0) Changed();
  return count;
}

uint64_t Counter::Read() {
  DriveProgress();
  const uint64_t value = value_.load(std::memory_order_seq_cst);
  value_seen_.store(value, std::memory_order_relaxed);
  return value;
}

uint64_t Counter::ReadErr() {
  DriveProgress();
  const uint64_t error = error_.load(std::memory_order_seq_cst);
  error_seen_.store(error, std::memory_order_relaxed);
  return error;
}

int Counter::Add(uint64_t value) {
  value_.fetch_add(value, std::memory_order_seq_cst);
  Changed();
  return 0;
}

int Counter::AddErr(uint64_t value) {
  error_.fetch_add(value, std::memory_order_seq_cst);
  Changed();
  return 0;
}

int Counter::Set(uint64_t value) {
  value_.store(value, std::memory_order_seq_cst);
  Changed();
  return 0;
}

int Counter::SetErr(uint64_t value) {
  error_.store(value, std::memory_order_seq_cst);
  Changed();
  return 0;
}

int Counter::Wait(uint64_t threshold, int timeout_ms) {
  if (wait_ == nullptr) return -FI_ENOSYS;
  DriveProgress();
  const uint64_t error_at_start = error_.load(std::memory_order_seq_cst);
  auto reached = [&] {
    return value_.load(std::memory_order_seq_cst) >= threshold;
  };
  auto error_changed = [&] {
    return error_.load(std::memory_order_seq_cst) != error_at_start;
  };
  NoteBlocking();
  const WaitOutcome outcome = wait_->Wait(
      [&] { return reached() || error_changed(); },
      Deadline::AfterMilliseconds(timeout_ms));
  // "Upon successful return from this call, the counter will be greater than
  // or equal to the input threshold value."
  if (reached()) return 0;
  if (error_changed()) return -FI_EAVAIL;
  // No fi_cntr_signal exists, so an interrupt cannot come from the API; treat
  // one like the timeout. "The error value ... remains unchanged."
  (void)outcome;
  return -FI_ETIMEDOUT;
}

int Counter::Control(int command, void* arg) {
  switch (command) {
    case FI_GETOPSFLAG:
      if (arg == nullptr) return -FI_EINVAL;
      *static_cast<uint64_t*>(arg) = ops_flags_.load(std::memory_order_acquire);
      return 0;
    case FI_SETOPSFLAG:
      if (arg == nullptr) return -FI_EINVAL;
      ops_flags_.store(*static_cast<const uint64_t*>(arg),
                       std::memory_order_release);
      return 0;
    default:
      return ControlWait(wait_.get(), command, arg);
  }
}

int Counter::TryWait() {
  if (wait_ == nullptr) return -FI_EINVAL;
  const int result = wait_->TryWait([&] {
    return value_.load(std::memory_order_seq_cst) !=
               value_seen_.load(std::memory_order_relaxed) ||
           error_.load(std::memory_order_seq_cst) !=
               error_seen_.load(std::memory_order_relaxed);
  });
  if (result == FI_SUCCESS) NoteBlocking();  // the caller may sleep on the wait object now
  return result;
}

int Counter::CheckClosable() const {
  // fi_cntr(3) fi_close: -FI_EBUSY while endpoints are associated.
  return bindings().count() != 0 ? -FI_EBUSY : 0;
}

}  // namespace uroce::cq
