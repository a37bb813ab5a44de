// The C interface of api/uroce_cq.h: argument checks and Status -> fabric
// errno; the objects themselves live in //cq.
#include "api/uroce_cq.h"

#include <infiniband/verbs.h>

#include "common/status.h"
#include "cq/fabric_cq.h"
#include "cq/counter.h"
#include "cq/event_queue.h"

namespace {

using uroce::cq::FabricCq;
using uroce::cq::Counter;
using uroce::cq::EndpointBindings;
using uroce::cq::EventQueue;

// Status codes become the negative fabric errno of the same meaning
// (FI_EINVAL, FI_ENOMEM, FI_EOPNOTSUPP, ...: FI_E* equal the system values).
int FabricError(const uroce::Status& status) { return -status.ToErrno(); }

EndpointBindings* BindingsOf(struct fid* fid) {
  if (FabricCq* cq = FabricCq::FromFid(fid)) {
    return &cq->bindings();
  }
  if (Counter* cntr = Counter::FromFid(fid)) return &cntr->bindings();
  if (EventQueue* eq = EventQueue::FromFid(fid)) return &eq->bindings();
  return nullptr;
}

}  // namespace

extern "C" {

int uroce_cq_open(const struct fi_cq_attr* attr, struct fid_cq** cq,
                  void* context) {
  if (attr == nullptr || cq == nullptr) return -FI_EINVAL;
  auto opened = FabricCq::Open(*attr, context);
  if (!opened.ok()) return FabricError(opened.status());
  *cq = (*opened).release()->fid();
  return 0;
}

int uroce_cntr_open(const struct fi_cntr_attr* attr, struct fid_cntr** cntr,
                    void* context) {
  if (attr == nullptr || cntr == nullptr) return -FI_EINVAL;
  auto opened = Counter::Open(*attr, context);
  if (!opened.ok()) return FabricError(opened.status());
  *cntr = (*opened).release()->fid();
  return 0;
}

int uroce_eq_open(const struct fi_eq_attr* attr, struct fid_eq** eq,
                  void* context) {
  if (attr == nullptr || eq == nullptr) return -FI_EINVAL;
  auto opened = EventQueue::Open(*attr, context);
  if (!opened.ok()) return FabricError(opened.status());
  *eq = (*opened).release()->fid();
  return 0;
}

ssize_t uroce_cq_push_wc(struct fid_cq* cq, const struct ibv_wc* wc,
                         size_t count) {
  FabricCq* queue = FabricCq::FromFid(cq);
  if (queue == nullptr || (wc == nullptr && count > 0)) return -FI_EINVAL;
  return static_cast<ssize_t>(queue->PushCompletions(wc, count));
}

ssize_t uroce_cntr_push_wc(struct fid_cntr* cntr, const struct ibv_wc* wc,
                           size_t count) {
  Counter* counter = Counter::FromFid(cntr);
  if (counter == nullptr || (wc == nullptr && count > 0)) return -FI_EINVAL;
  return static_cast<ssize_t>(counter->PushCompletions(wc, count));
}

ssize_t uroce_eq_write_event(struct fid_eq* eq, uint32_t event,
                             const void* buf, size_t len) {
  EventQueue* queue = EventQueue::FromFid(eq);
  if (queue == nullptr) return -FI_EINVAL;
  return queue->WriteEvent(event, buf, len);
}

ssize_t uroce_eq_write_error(struct fid_eq* eq,
                             const struct fi_eq_err_entry* error) {
  EventQueue* queue = EventQueue::FromFid(eq);
  if (queue == nullptr || error == nullptr) return -FI_EINVAL;
  return queue->WriteError(*error);
}

int uroce_fid_bind_ep(struct fid* fid) {
  EndpointBindings* bindings = BindingsOf(fid);
  if (bindings == nullptr) return -FI_EINVAL;
  bindings->Add();
  return 0;
}

int uroce_fid_unbind_ep(struct fid* fid) {
  EndpointBindings* bindings = BindingsOf(fid);
  if (bindings == nullptr || !bindings->Remove()) return -FI_EINVAL;
  return 0;
}

int uroce_trywait(struct fid* fid) {
  if (FabricCq* cq = FabricCq::FromFid(fid)) return cq->TryWait();
  if (Counter* cntr = Counter::FromFid(fid)) return cntr->TryWait();
  if (EventQueue* eq = EventQueue::FromFid(fid)) return eq->TryWait();
  return -FI_EINVAL;
}

}  // extern "C"
