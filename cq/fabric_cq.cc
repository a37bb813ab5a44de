#include "common/raw_enum.h"
#include "cq/fabric_cq.h"

#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "cq/fid_ops.h"
#include "cq/wc_mapping.h"

namespace uroce::cq {
namespace {

FabricCq* Owner(fid_cq* cq) { return FabricCq::FromFid(cq); }

// fi_ops_cq.
ssize_t CqRead(fid_cq* cq, void* buf, size_t count) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->ReadFrom(buf, count, nullptr);
}
ssize_t CqReadFrom(fid_cq* cq, void* buf, size_t count, fi_addr_t* src_addr) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->ReadFrom(buf, count, src_addr);
}
ssize_t CqReadErr(fid_cq* cq, fi_cq_err_entry* entry, uint64_t flags) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->ReadErr(entry, flags);
}
ssize_t CqSRead(fid_cq* cq, void* buf, size_t count, const void* cond,
                int timeout) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->SReadFrom(buf, count, nullptr, cond, timeout);
}
ssize_t CqSReadFrom(fid_cq* cq, void* buf, size_t count, fi_addr_t* src_addr,
                    const void* cond, int timeout) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->SReadFrom(buf, count, src_addr, cond, timeout);
}
int CqSignal(fid_cq* cq) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return -FI_EINVAL;
  return self->Signal();
}
const char* CqStrError(fid_cq* cq, int prov_errno, const void* err_data,
                       char* buf, size_t len) {
  FabricCq* self = Owner(cq);
  if (self == nullptr) return "not a uroce completion queue";
  return self->StrError(prov_errno, err_data, buf, len);
}

fi_ops_cq kCqOps = {
    sizeof(fi_ops_cq), CqRead,   CqReadFrom, CqReadErr, CqSRead,
    CqSReadFrom,       CqSignal, CqStrError,
};

}  // namespace

StatusOr<std::unique_ptr<FabricCq>> FabricCq::Open(
    const fi_cq_attr& attr, void* context, Progress* progress) {
  // fi_cq(3) "flags": FI_AFFINITY is the only one; signaling_vector is a hint
  // that a software CQ has no interrupt to apply to.
  if ((attr.flags & ~static_cast<uint64_t>(FI_AFFINITY)) != 0) {
    return InvalidArgument("unsupported fi_cq_attr.flags");
  }
  const int raw_format = RawEnum(attr.format);
  if (raw_format != FI_CQ_FORMAT_UNSPEC && raw_format != FI_CQ_FORMAT_CONTEXT && raw_format != FI_CQ_FORMAT_MSG &&
      raw_format != FI_CQ_FORMAT_DATA && raw_format != FI_CQ_FORMAT_TAGGED) {
    return InvalidArgument("unknown CQ format " + std::to_string(raw_format));
  }
  fi_cq_format format = static_cast<fi_cq_format>(raw_format);
  if (format == FI_CQ_FORMAT_UNSPEC) format = FI_CQ_FORMAT_CONTEXT;
  if (attr.size > kMaxCqSize) {
    return InvalidArgument("CQ size " + std::to_string(attr.size) +
                           " is above the maximum " +
                           std::to_string(kMaxCqSize));
  }
  // "This field is ignored if wait_obj is set to FI_WAIT_NONE."
  fi_cq_wait_cond wait_cond = FI_CQ_COND_NONE;
  if (RawEnum(attr.wait_obj) != FI_WAIT_NONE) {
    const int raw_cond = RawEnum(attr.wait_cond);
    if (raw_cond != FI_CQ_COND_NONE && raw_cond != FI_CQ_COND_THRESHOLD) {
      return InvalidArgument("unknown wait_cond");
    }
    wait_cond = static_cast<fi_cq_wait_cond>(raw_cond);
  }
  StatusOr<std::unique_ptr<WaitObject>> wait =
      WaitObject::Create(RawEnum(attr.wait_obj), attr.wait_set);
  if (!wait.ok()) return wait.status();

  const size_t capacity =
      RoundUpPow2(attr.size == 0 ? kDefaultCqSize : attr.size);
  std::unique_ptr<CompletionRecord[]> records(new (std::nothrow) CompletionRecord[capacity]);
  if (!records) return ResourceExhausted("no memory for the CQ ring");
  fi_cq_attr resolved = attr;
  resolved.wait_cond = wait_cond;
  return std::unique_ptr<FabricCq>(
      new FabricCq(resolved, format, capacity, std::move(records),
                          std::move(*wait), context, progress));
}

FabricCq::FabricCq(const fi_cq_attr& attr, fi_cq_format format,
                                 size_t capacity,
                                 std::unique_ptr<CompletionRecord[]> records,
                                 std::unique_ptr<WaitObject> wait,
                                 void* context, Progress* progress)
    : format_(format),
      entry_size_(CqEntrySize(format)),
      wait_cond_(attr.wait_cond),
      wait_(std::move(wait)),
      progress_(progress),
      ring_(std::move(records), capacity) {
  std::memset(&fid_, 0, sizeof(fid_));
  fid_.cq.fid.fclass = FI_CLASS_CQ;
  fid_.cq.fid.context = context;
  fid_.cq.fid.ops = &FidOps<FabricCq>::table;
  fid_.cq.ops = &kCqOps;
  fid_.owner = this;
}

FabricCq::~FabricCq() = default;

FabricCq* FabricCq::FromFid(fid_cq* cq) {
  if (cq == nullptr) return nullptr;
  return FromFid(&cq->fid);
}

FabricCq* FabricCq::FromFid(struct fid* fid) {
  if (fid == nullptr || fid->fclass != FI_CLASS_CQ || fid->ops != &FidOps<FabricCq>::table) {
    return nullptr;
  }
  return reinterpret_cast<CqFid*>(fid)->owner;
}

size_t FabricCq::PushCompletions(const ibv_wc* wcs, size_t count) {
  return PushCompletionsFrom(wcs, nullptr, count);
}

size_t FabricCq::PushCompletionsFrom(const ibv_wc* wcs,
                                            const fi_addr_t* sources,
                                            size_t count) {
  const size_t writable = ring_.Writable(count);
  size_t consumed = 0;
  size_t written = 0;
  for (; consumed < count; ++consumed) {
    // An operation that asked for no completion (see kNoCompletionWrId):
    // taken, and not written.
    if (wcs[consumed].wr_id == kNoCompletionWrId) continue;
    if (written == writable) break;
    CompletionRecord& record = ring_.WriteSlot(written++);
    record.wc = wcs[consumed];
    record.source = sources != nullptr ? sources[consumed] : FI_ADDR_NOTAVAIL;
  }
  if (written == 0) return consumed;
  if (wait_ == nullptr) {
    ring_.Publish(written);
  } else {
    // seq_cst: step P1 of the protocol in wait_object.h.
    ring_.Publish(written, std::memory_order_seq_cst);
    wait_->NotifyAfterPublish();
  }
  return consumed;
}

template <typename Entry>
size_t FabricCq::CopyOut(size_t limit, void* buf, fi_addr_t* src_addr) {
  Entry* out = static_cast<Entry*>(buf);
  size_t n = 0;
  for (; n < limit; ++n) {
    const CompletionRecord& record = ring_.ReadSlot(n);
    if (record.wc.status != IBV_WC_SUCCESS) break;  // stays topmost
    ToCqEntry(record.wc, &out[n]);
    if (src_addr != nullptr) src_addr[n] = record.source;
  }
  return n;
}

bool FabricCq::TopmostFailedLocked() const {
  return ring_.Readable() != 0 && ring_.ReadSlot(0).wc.status != IBV_WC_SUCCESS;
}

ssize_t FabricCq::ReadFrom(void* buf, size_t count,
                                  fi_addr_t* src_addr) {
  DriveProgress();
  if (count > 0 && buf == nullptr) return -FI_EINVAL;
  // Empty, the usual answer to a polling loop: no lock (a mutex here costs
  // 6 % of fi_pingpong's CPU).
  if (ring_.LooksEmpty()) return -FI_EAGAIN;
  std::lock_guard<std::mutex> lock(readers_.mutex);
  const size_t readable = ring_.Readable();
  if (readable == 0) return -FI_EAGAIN;
  const size_t limit = std::min(count, readable);
  size_t n = 0;
  switch (format_) {
    case FI_CQ_FORMAT_CONTEXT:
      n = CopyOut<fi_cq_entry>(limit, buf, src_addr);
      break;
    case FI_CQ_FORMAT_MSG:
      n = CopyOut<fi_cq_msg_entry>(limit, buf, src_addr);
      break;
    case FI_CQ_FORMAT_DATA:
      n = CopyOut<fi_cq_data_entry>(limit, buf, src_addr);
      break;
    case FI_CQ_FORMAT_TAGGED:
      n = CopyOut<fi_cq_tagged_entry>(limit, buf, src_addr);
      break;
    case FI_CQ_FORMAT_UNSPEC:
      break;  // resolved at open
  }
  if (n == 0) {
    // Nothing copied although something is queued: either count was 0 (a
    // progress call; report what a read would find) or the topmost
    // completion failed.
    if (ring_.ReadSlot(0).wc.status != IBV_WC_SUCCESS) return -FI_EAVAIL;
    return 0;
  }
  ring_.Consume(n);  // the producer may reuse these slots from now on
  return static_cast<ssize_t>(n);
}

ssize_t FabricCq::ReadErr(fi_cq_err_entry* entry, uint64_t flags) {
  DriveProgress();
  if (entry == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  std::lock_guard<std::mutex> lock(readers_.mutex);
  if (!TopmostFailedLocked()) return -FI_EAGAIN;
  const ibv_wc& wc = ring_.ReadSlot(0).wc;

  // err_data (fi_cq(3) COMPLETION FIELDS): the failed ibv_wc itself, which
  // says everything uroce knows (QP, vendor_err, opcode). With err_data_size
  // 0 on input the application gets our buffer, valid until the next
  // fi_cq_readerr ("until a subsequent read call against the CQ"); otherwise
  // we copy as much as fits and say how much. A NULL err_data with a size is
  // treated as no buffer rather than written through.
  void* const user_err_data = entry->err_data;
  const size_t user_err_data_size = entry->err_data_size;
  FillCqErrEntry(wc, entry);
  readers_.err_data = wc;
  if (user_err_data_size == 0 || user_err_data == nullptr) {
    entry->err_data = &readers_.err_data;
    entry->err_data_size = sizeof(readers_.err_data);
  } else {
    const size_t copied = std::min(user_err_data_size, sizeof(wc));
    std::memcpy(user_err_data, &wc, copied);
    entry->err_data = user_err_data;
    entry->err_data_size = copied;
  }
  ring_.Consume(1);  // after the last read of wc
  return 1;  // "the positive value 1 (number of error entries returned)"
}

bool FabricCq::ReadyForWaiter(size_t wanted) {
  const size_t available = Available();
  if (available == 0) return false;
  if (available >= wanted) return true;
  // A failed completion on top ends the wait too: the reader gets -FI_EAVAIL.
  std::lock_guard<std::mutex> lock(readers_.mutex);
  return TopmostFailedLocked();
}

ssize_t FabricCq::SReadFrom(void* buf, size_t count,
                                   fi_addr_t* src_addr, const void* cond,
                                   int timeout_ms) {
  if (wait_ == nullptr) return -FI_ENOSYS;
  if (count > 0 && buf == nullptr) return -FI_EINVAL;
  // FI_CQ_COND_THRESHOLD: "the cond field is interpreted as a size_t
  // threshold value", i.e. the pointer's value, as libfabric's providers read
  // it. No more than count can be returned, and the ring cannot hold more
  // than its capacity, so the threshold is capped at both. The condition is
  // an optimization, which the man page allows a provider to treat loosely;
  // here sread returns once `threshold` entries were read, an error is on
  // top, the time is up or the CQ was signalled.
  size_t threshold = 1;
  if (wait_cond_ == FI_CQ_COND_THRESHOLD) {
    threshold = static_cast<size_t>(reinterpret_cast<uintptr_t>(cond));
    threshold = std::max<size_t>(1, std::min({threshold, count, capacity()}));
  }
  const Deadline deadline = Deadline::AfterMilliseconds(timeout_ms);
  size_t got = 0;
  for (;;) {
    const ssize_t n =
        ReadFrom(static_cast<char*>(buf) + got * entry_size_, count - got,
                 src_addr != nullptr ? src_addr + got : nullptr);
    if (n > 0) {
      got += static_cast<size_t>(n);
      if (got >= threshold) return static_cast<ssize_t>(got);
      continue;
    }
    if (n != -FI_EAGAIN || count == 0) {
      // An error on top: return what came before it first.
      return got > 0 ? static_cast<ssize_t>(got) : n;
    }
    const size_t wanted = threshold - got;
    NoteBlocking();
    const WaitOutcome outcome =
        wait_->Wait([&] { return ReadyForWaiter(wanted); }, deadline);
    if (outcome != WaitOutcome::kReady) {
      // "If the timeout expires or the calling thread is signaled and no
      // data is available ... returns -FI_EAGAIN." One last look first.
      const ssize_t last =
          ReadFrom(static_cast<char*>(buf) + got * entry_size_, count - got,
                   src_addr != nullptr ? src_addr + got : nullptr);
      if (last > 0) got += static_cast<size_t>(last);
      if (got > 0) return static_cast<ssize_t>(got);
      return last == -FI_EAVAIL ? -FI_EAVAIL : -FI_EAGAIN;
    }
  }
}

int FabricCq::Signal() {
  // "only available if the CQ was configured with a wait object".
  if (wait_ == nullptr) return -FI_ENOSYS;
  wait_->Interrupt();
  return 0;
}

const char* FabricCq::StrError(int prov_errno, const void* err_data,
                                      char* buf, size_t len) const {
  // err_data is not read: the application may pass a partial copy, and the
  // status alone names the error.
  const char* text = CompletionStatusText(prov_errno);
  if (buf == nullptr || len == 0) return text;
  std::snprintf(buf, len, "%s", text);
  return buf;
}

int FabricCq::Control(int command, void* arg) { return ControlWait(wait_.get(), command, arg); }

int FabricCq::TryWait() {
  if (wait_ == nullptr) return -FI_EINVAL;
  const int result = wait_->TryWait([&] { return Available() > 0; });
  if (result == FI_SUCCESS) NoteBlocking();  // the caller may sleep on the wait object now
  return result;
}

int FabricCq::CheckClosable() const {
  // fi_cq(3) fi_close: "If resources are still associated with the CQ when
  // attempting to close, the call will return -FI_EBUSY."
  return bindings().count() != 0 ? -FI_EBUSY : 0;
}

}  // namespace uroce::cq
