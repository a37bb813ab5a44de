// A libfabric completion counter (fi_cntr(3)) fed by the engine's ibv_wc.
//
// A real struct fid_cntr with fi_ops and fi_ops_cntr tables: fi_cntr_read,
// fi_cntr_readerr, fi_cntr_add, fi_cntr_adderr, fi_cntr_set, fi_cntr_seterr,
// fi_cntr_wait, fi_control (FI_GETOPSFLAG, FI_SETOPSFLAG, FI_GETWAIT,
// FI_GETWAITOBJ) and fi_close work on fid() as they are. Other fi_ops
// operations return -FI_ENOSYS, as does fi_cntr_wait on a counter without a
// wait object ("It is invalid for applications to call this function if the
// counter has been configured with a wait object of FI_WAIT_NONE").
//
// A counter "stores two distinct values": successful completions increment
// the value, failed ones the error value. The engine pushes bursts of ibv_wc
// (one atomic add per value per burst, no lock, no system call unless a
// thread waits); applications add and set from any thread.
//
// fi_cntr_wait returns 0 once the value reaches the threshold, -FI_EAVAIL
// when the error value changed while it waited ("Any change in a counter's
// error value will unblock any thread inside fi_cntr_wait"; libfabric's
// utility counter returns the same), and -FI_ETIMEDOUT when the time is up.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "cq/completion_sink.h"
#include "cq/wait_object.h"

namespace uroce::cq {

class Counter final : public CompletionSink {
 public:
  // Checks `attr` against fi_cntr(3) and opens the counter; fi_close on fid()
  // deletes it once the caller released it.
  // `progress` (or null: none) is driven by every read and told before a
  // waiter may sleep; it outlives the counter.
  static StatusOr<std::unique_ptr<Counter>> Open(const fi_cntr_attr& attr,
                                                 void* context,
                                                 Progress* progress = nullptr);
  static Counter* FromFid(fid_cntr* cntr);
  static Counter* FromFid(struct fid* fid);

  ~Counter() override;

  fid_cntr* fid() { return &fid_.cntr; }

  // Engine thread only. Counts every completion (successes in the value,
  // failures in the error value) and takes them all.
  size_t PushCompletions(const ibv_wc* wcs, size_t count) override;

  // fi_ops_cntr; any thread.
  uint64_t Read();
  uint64_t ReadErr();
  int Add(uint64_t value);
  int AddErr(uint64_t value);
  int Set(uint64_t value);
  int SetErr(uint64_t value);
  int Wait(uint64_t threshold, int timeout_ms);
  int Control(int command, void* arg);
  // fi_trywait: -FI_EAGAIN if either value changed since the application last
  // read it (fi_cntr_read / fi_cntr_readerr), so a change that happened
  // between its read and its fi_trywait is not slept through.
  int TryWait();
  int CheckClosable() const;

 private:
  struct CntrFid {
    fid_cntr cntr;  // first: a fid_cntr* is a CntrFid*
    Counter* owner;
  };

  Counter(std::unique_ptr<WaitObject> wait, void* context, Progress* progress);
  void Changed() {
    if (wait_ != nullptr) wait_->NotifyAfterPublish();
  }
  void DriveProgress() {
    if (progress_ != nullptr) progress_->Drive();
  }
  void NoteBlocking() {
    if (progress_ != nullptr) progress_->NoteBlocking();
  }

  CntrFid fid_;
  const std::unique_ptr<WaitObject> wait_;
  Progress* const progress_;
  // seq_cst updates: step P1 of the protocol in wait_object.h.
  alignas(64) std::atomic<uint64_t> value_{0};
  std::atomic<uint64_t> error_{0};
  // What the application last read, for TryWait.
  alignas(64) std::atomic<uint64_t> value_seen_{0};
  std::atomic<uint64_t> error_seen_{0};
  std::atomic<uint64_t> ops_flags_{0};
};

}  // namespace uroce::cq
