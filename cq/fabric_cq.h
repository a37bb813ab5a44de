// A libfabric completion queue fed by the engine's struct ibv_wc (fi_cq(3)).
//
// The object is a real struct fid_cq with fi_ops and fi_ops_cq tables, so
// libfabric's inline calls (fi_cq_read, fi_cq_readfrom, fi_cq_readerr,
// fi_cq_sread, fi_cq_sreadfrom, fi_cq_signal, fi_cq_strerror, fi_control,
// fi_close) work on fid() as they are. Operations a CQ does not have (bind,
// ops_open, tostr, ops_set, and control commands other than FI_GETWAIT and
// FI_GETWAITOBJ) return -FI_ENOSYS; so do the blocking calls and fi_cq_signal
// on a CQ without a wait object, which the man page says the application may
// not call ("It is invalid for applications to call these functions if the CQ
// has been configured with a wait object of FI_WAIT_NONE").
//
// Threads. One producer at a time, the engine's poll thread, pushes; it
// allocates nothing, takes no lock and makes no system call unless a reader
// sleeps (wait_object.h has the ordering argument). Any number of application
// threads may read at once (fi_cq_read is thread safe in libfabric): readers
// serialize on a reader-side mutex, which the producer never touches.
//
// The ring. A common/ring.h SpscRing of records (the ibv_wc as pushed, plus
// its source address): the engine is its producer, and the reader holding
// the mutex its one consumer. The producer publishes with a release store,
// or seq_cst when a wait object exists (wait_object.h's step P1), and a
// waiter tests the ring with seq_cst loads (step W2, Available). Readers copy
// records out in place and free them after the copy, so a slot is never
// overwritten while a reader copies it.
//
// Failed completions keep their place. fi_cq(3) RETURN VALUES: fi_cq_read
// returns -FI_EAVAIL "if the topmost completion is for a failed transfer".
// So a read returns the successful completions that precede a failed one and
// stops there; the next read returns -FI_EAVAIL, and fi_cq_readerr takes the
// failed completion off the queue. The error entries are reported out of band
// in that fi_cq_read never returns them; they wait in the ring, in completion
// order, which is what "the topmost completion" asks for and needs no sequence
// numbers between two queues. fi_cq_readerr returns -FI_EAGAIN unless the
// topmost completion failed. (libfabric's utility and verbs CQs order them the
// same way.)
//
// Overrun: back-pressure. A full CQ takes fewer completions than pushed and
// PushCompletions says how many; nothing is ever dropped, so the CQ never
// enters fi_cq(3)'s "overrun state" and fi_cq_read never returns
// FI_EOVERRUN. The engine keeps what the CQ did not take. Size the CQ for the
// completions that can be outstanding (fi_cq_attr.size is a minimum; the ring
// is rounded up to a power of two).
//
// Defaults: size 0 means kDefaultCqSize entries; FI_CQ_FORMAT_UNSPEC means
// FI_CQ_FORMAT_CONTEXT, the smallest entry, because an application that does
// not name a format cannot know a larger entry's size and must not have its
// buffer overrun.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/ring.h"
#include "common/status.h"
#include "cq/completion_sink.h"
#include "cq/wait_object.h"

namespace uroce::cq {

inline constexpr size_t kDefaultCqSize = 1024;
inline constexpr size_t kMaxCqSize = size_t{1} << 20;


class FabricCq final : public CompletionSink {
 public:
  // Checks `attr` against fi_cq(3) and opens the CQ. The caller owns it; to
  // hand it to an application, release it: fi_close on fid() deletes it.
  // `progress` (or null: none) is driven by every read and told before a
  // reader may sleep; it outlives the CQ.
  static StatusOr<std::unique_ptr<FabricCq>> Open(const fi_cq_attr& attr,
                                                  void* context,
                                                  Progress* progress = nullptr);

  // The FabricCq behind a fid, or null if `cq` is not a uroce CQ.
  static FabricCq* FromFid(fid_cq* cq);
  static FabricCq* FromFid(struct fid* fid);

  ~FabricCq() override;

  fid_cq* fid() { return &fid_.cq; }
  size_t capacity() const { return ring_.capacity(); }
  fi_cq_format format() const { return format_; }
  const WaitObject* wait_object() const { return wait_.get(); }

  // Engine thread only. Takes up to `count` completions, in order; returns
  // how many (fewer when the ring is full). Sources are FI_ADDR_NOTAVAIL.
  // A completion whose wr_id is kNoCompletionWrId (wc_mapping.h) is taken
  // and not queued.
  size_t PushCompletions(const ibv_wc* wcs, size_t count) override;
  // The same with each completion's source address for fi_cq_readfrom
  // (`sources` has `count` entries).
  size_t PushCompletionsFrom(const ibv_wc* wcs, const fi_addr_t* sources,
                             size_t count);

  // Completions queued (successful and failed). Any thread.
  size_t Available() const { return ring_.SizeSeqCst(); }

  // The fi_ops_cq operations; any application thread.
  ssize_t ReadFrom(void* buf, size_t count, fi_addr_t* src_addr);
  ssize_t ReadErr(fi_cq_err_entry* entry, uint64_t flags);
  ssize_t SReadFrom(void* buf, size_t count, fi_addr_t* src_addr,
                    const void* cond, int timeout_ms);
  int Signal();
  const char* StrError(int prov_errno, const void* err_data, char* buf,
                       size_t len) const;
  // fi_ops: FI_GETWAIT, FI_GETWAITOBJ.
  int Control(int command, void* arg);
  // fi_trywait for this CQ (fi_poll(3)).
  int TryWait();
  // 0 when fi_close may delete the CQ; -FI_EBUSY while endpoints are bound.
  int CheckClosable() const;

 private:
  struct CompletionRecord {
    ibv_wc wc;
    fi_addr_t source;
  };
  // What the application holds: a struct fid_cq, followed by the way back.
  struct CqFid {
    fid_cq cq;  // first: a fid_cq* is a CqFid*
    FabricCq* owner;
  };

  FabricCq(const fi_cq_attr& attr, fi_cq_format format, size_t capacity,
                  std::unique_ptr<CompletionRecord[]> records,
                  std::unique_ptr<WaitObject> wait, void* context,
                  Progress* progress);

  template <typename Entry>
  size_t CopyOut(size_t limit, void* buf, fi_addr_t* src_addr);
  // Reader lock held. True if the topmost completion failed.
  bool TopmostFailedLocked() const;
  bool ReadyForWaiter(size_t wanted);
  void DriveProgress() {
    if (progress_ != nullptr) progress_->Drive();
  }
  void NoteBlocking() {
    if (progress_ != nullptr) progress_->NoteBlocking();
  }

  CqFid fid_;
  const fi_cq_format format_;
  const size_t entry_size_;
  const fi_cq_wait_cond wait_cond_;
  const std::unique_ptr<WaitObject> wait_;
  Progress* const progress_;
  // The engine produces; a reader consumes only while it holds readers_.mutex.
  SpscRing<CompletionRecord> ring_;

  struct alignas(64) ReaderSide {
    std::mutex mutex;
    // fi_cq_readerr's provider-owned err_data (the failed ibv_wc), valid
    // until the next fi_cq_readerr.
    ibv_wc err_data{};
  } readers_;
};

}  // namespace uroce::cq
