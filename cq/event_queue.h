// A libfabric event queue (fi_eq(3)) for control events: connection
// management (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN with struct
// fi_eq_cm_entry and its trailing connection data), FI_MR_COMPLETE,
// FI_AV_COMPLETE and other struct fi_eq_entry events, and error events behind
// -FI_EAVAIL.
//
// A real struct fid_eq with fi_ops and fi_ops_eq tables: fi_eq_read,
// fi_eq_readerr, fi_eq_write, fi_eq_sread, fi_eq_strerror, fi_control
// (FI_GETWAIT, FI_GETWAITOBJ) and fi_close work on fid() as they are; other
// fi_ops operations return -FI_ENOSYS, and so do fi_eq_sread without a wait
// object and fi_eq_write on an EQ opened without FI_WRITE, which the man page
// says the application may not call.
//
// Threads. Events come from the provider's control path and from
// fi_eq_write, from any thread, and are read by any thread. This is not the
// data path: one mutex guards the queue, and each event is a copy of its
// bytes.
//
// Order. Error events keep their place among the others: fi_eq_read returns
// -FI_EAVAIL when the next event is an error, and fi_eq_readerr takes it; the
// same reading of "out of band" as the CQ's (fabric_cq.h).
//
// Overrun (fi_eq(3) NOTES). The EQ holds `size` events (0: kDefaultEqSize).
// A write that finds it full puts it in the overrun state: that write and
// every later one fail with -FI_EOVERRUN; reads return the events already
// queued, and once those are gone every read returns -FI_EOVERRUN.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "cq/completion_sink.h"
#include "cq/wait_object.h"

namespace uroce::cq {

inline constexpr size_t kDefaultEqSize = 1024;
inline constexpr size_t kMaxEqSize = size_t{1} << 20;
// The most bytes one event may carry (a fi_eq_cm_entry and its connection
// data, or an application's event).
inline constexpr size_t kMaxEqEventBytes = 64 * 1024;

class EventQueue {
 public:
  static StatusOr<std::unique_ptr<EventQueue>> Open(const fi_eq_attr& attr,
                                                    void* context);
  static EventQueue* FromFid(fid_eq* eq);
  static EventQueue* FromFid(struct fid* fid);

  ~EventQueue();

  fid_eq* fid() { return &fid_.eq; }
  EndpointBindings& bindings() { return bindings_; }
  const EndpointBindings& bindings() const { return bindings_; }
  // The events it holds (fi_eq_attr::size; 0 became kDefaultEqSize).
  size_t capacity() const { return capacity_; }

  // Provider side, any thread: queue an event, or an error event (err_data is
  // copied). Returns the bytes queued or a negative fabric errno.
  ssize_t WriteEvent(uint32_t event, const void* buf, size_t len);
  ssize_t WriteError(const fi_eq_err_entry& error);
  // Removes the queued events (and error events) of `fid`, an endpoint that
  // is being closed: its application object may be freed right after
  // fi_close, so no reader may see it in an event any more (ofi_rxm closes
  // endpoints whose events may still be queued). Returns how many it removed.
  size_t DropEventsFor(const struct fid* fid);
  // The same, and hands each removed event that is not an error event (its
  // type and bytes as written) to `dropped`, after the EQ's lock is released:
  // for the provider to free what such an event owns (an FI_CONNREQ's
  // fi_info and handle, which only a reader would have freed).
  size_t DropEventsFor(const struct fid* fid,
                       const std::function<void(uint32_t event, const std::vector<uint8_t>& bytes)>& dropped);
  // Wakes threads blocked in fi_eq_sread, which return -FI_EAGAIN ("signaled
  // by some external source"). libfabric has no fi_eq_signal; the provider
  // may use this.
  void Signal();

  // fi_ops_eq; any thread.
  ssize_t Read(uint32_t* event, void* buf, size_t len, uint64_t flags);
  ssize_t ReadErr(fi_eq_err_entry* entry, uint64_t flags);
  ssize_t Write(uint32_t event, const void* buf, size_t len, uint64_t flags);
  ssize_t SRead(uint32_t* event, void* buf, size_t len, int timeout_ms,
                uint64_t flags);
  const char* StrError(int prov_errno, const void* err_data, char* buf,
                       size_t len) const;
  int Control(int command, void* arg);
  int TryWait();
  int CheckClosable() const;

 private:
  struct EqFid {
    fid_eq eq;  // first: a fid_eq* is an EqFid*
    EventQueue* owner;
  };
  struct StoredEvent {
    uint32_t event = 0;
    bool is_error = false;
    std::vector<uint8_t> bytes;     // the event as written
    fi_eq_err_entry error{};        // error events: err_data points nowhere
    std::vector<uint8_t> err_data;  // error events: a copy of err_data
  };

  EventQueue(const fi_eq_attr& attr, size_t capacity,
             std::unique_ptr<WaitObject> wait, void* context);
  ssize_t Enqueue(StoredEvent stored, size_t len);
  bool ReadyForWaiter();

  EqFid fid_;
  const uint64_t flags_;
  const size_t capacity_;
  const std::unique_ptr<WaitObject> wait_;
  EndpointBindings bindings_;

  mutable std::mutex mutex_;
  std::deque<StoredEvent> events_;  // guarded by mutex_
  bool overrun_ = false;            // guarded by mutex_
  // fi_eq_readerr's provider-owned err_data, valid until the next readerr.
  std::vector<uint8_t> err_data_;  // guarded by mutex_
};

}  // namespace uroce::cq
