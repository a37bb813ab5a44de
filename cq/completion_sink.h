// What the transport engine sees of the cq layer: somewhere to push its
// struct ibv_wc completions, and a count of the endpoints bound to it.
//
// How the engine uses it:
//   - The provider binds an endpoint to a CQ or counter (fi_ep_bind) and
//     calls bindings().Add(); FabricCq::FromFid / Counter::FromFid
//     turn the application's fid into the object. While any binding remains,
//     fi_close on the CQ or counter returns -FI_EBUSY (fi_cq(3), fi_cntr(3)
//     "fi_close").
//   - The engine's poll thread calls PushCompletions with a burst of ibv_wc.
//     It returns how many it took, from the front. A CQ that is full takes
//     fewer (back-pressure, see fabric_cq.h); the engine keeps the rest
//     and pushes them again on its next poll, as it does with a full TX queue.
//     A counter always takes all of them.
//   - When the endpoint is closed, and only once the engine will not push to
//     the sink again, the provider calls bindings().Remove().
//
// The ibv_wc fields the cq layer reads are listed in wc_mapping.h. In short:
// wr_id is the operation context; opcode is filled on failed completions too;
// byte_len is the length received; imm_data is big-endian, as in verbs; and
// for IBV_WC_LOC_LEN_ERR, vendor_err is the number of bytes discarded.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace uroce::cq {

// The progress of what a CQ or counter was opened on (the engine of its
// domain), as the layer above provides it: the cq layer knows nothing
// above itself. Given at Open, so it is set before the object is shared.
// Any application thread calls it.
class Progress {
 public:
  virtual ~Progress() = default;
  // At the start of every read (fi_cq(3): "A count value of 0 may be used
  // to drive progress on associated endpoints when manual progress is
  // enabled"). In the provider's inline (manual progress) mode it may push
  // completions from the reader's thread, and must itself make sure that
  // only one thread at a time runs the engine.
  virtual void Drive() = 0;
  // Before an application thread may block in the object's wait (sread,
  // fi_cntr_wait, or a fi_trywait that allows it): whoever drives progress
  // must not wait for that thread to poll again.
  virtual void NoteBlocking() = 0;
};

// The number of endpoints bound to a CQ, counter or EQ. Any thread.
class EndpointBindings {
 public:
  void Add() { count_.fetch_add(1, std::memory_order_acq_rel); }

  // Returns false, and changes nothing, when nothing is bound.
  bool Remove() {
    uint32_t current = count_.load(std::memory_order_acquire);
    while (current != 0) {
      if (count_.compare_exchange_weak(current, current - 1,
                                       std::memory_order_acq_rel)) {
        return true;
      }
    }
    return false;
  }

  uint32_t count() const { return count_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint32_t> count_{0};
};

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;

  // Engine thread only: one producer per sink at any time. Takes completions
  // from the front of `wcs` in order and returns how many. Allocates nothing,
  // takes no lock, and makes no system call unless a reader waits.
  virtual size_t PushCompletions(const ibv_wc* wcs, size_t count) = 0;

  EndpointBindings& bindings() { return bindings_; }
  const EndpointBindings& bindings() const { return bindings_; }

 private:
  EndpointBindings bindings_;
};

}  // namespace uroce::cq
