// The verbs side of uroce's libibverbs.so.1 at process level: the
// ibv_device list, the live verbs objects (contexts, CQs, QPs, SRQs), and
// what the progress thread does for them as a runtime::ProgressClient:
// completion channels of armed CQs (ibv_req_notify_cq(3)), engine async
// events and port events to ibv_get_async_event(3). The configuration, the
// runtime and the progress thread are the process's (runtime/process.h),
// shared with the libfabric provider and librdmacm.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "api/verbs/objects.h"
#include "runtime/process.h"

namespace uroce::verbs {

class Registry final : public runtime::ProgressClient {
 public:
  // Registers itself with the process's progress thread at first use.
  static Registry& Get();

  // ibv_get_device_list(3): the devices of the process's configuration
  // (runtime::Process::LoadConfig); none after one message if it has none.
  const std::vector<Device*>& Devices();

  // Starts the process's runtime (once) and fills `context` from `device`'s
  // runtime device. Positive errno on failure (after a message on stderr).
  int Open(Device* device, Context* context);
  void Close(Context* context);

  // CQs that may need a completion event (ibv_req_notify_cq(3)).
  void RegisterCq(Cq* cq);
  void UnregisterCq(Cq* cq);
  void RegisterContext(Context* context);
  void UnregisterContext(Context* context);
  void RegisterQp(Qp* qp);
  void UnregisterQp(Qp* qp);
  void RegisterSrq(Srq* srq);
  void UnregisterSrq(Srq* srq);

  // Attached to a daemon (runtime/peer_watch.h): after ibv_modify_qp(3)
  // succeeded with these attributes, and before the engine destroys `qp`
  // (ibv_destroy_qp).
  void NoteQpModified(Qp* qp, const ibv_qp_attr& attr, int mask);
  void ForgetQp(Qp* qp);

  // runtime::ProgressClient: armed CQs signalled, then engine events moved.
  unsigned OnProgress() override;
  // IBV_EVENT_PORT_ACTIVE or IBV_EVENT_PORT_ERR on every context of `device`.
  void OnPortStateChanged(size_t device, bool active) override;
  // A child lets go of its parent's objects (Process::ForgetParentAfterFork).
  void ForgetParentAfterFork() override;

 private:
  Registry() = default;
  // The application's object for an engine object (async events); called
  // with objects_mutex_ held.
  ibv_qp* QpFor(const transport::QueuePair* qp);
  ibv_srq* SrqFor(const transport::SharedReceiveQueue* srq);
  unsigned SignalArmedCqs();
  unsigned PumpAsyncEvents();
  // Queues `event` on `ctx` and counts it on its async_fd.
  static void PostAsyncEvent(Context* ctx, const ibv_async_event& event);

  std::mutex devices_mutex_;  // devices_, devices_loads_
  std::vector<Device*> devices_;
  // The Process::config_loads() the list was built from.
  uint64_t devices_loads_ = 0;

  std::mutex objects_mutex_;  // the lists below
  std::vector<Cq*> cqs_;
  std::vector<Context*> contexts_;
  std::vector<Qp*> qps_;
  std::vector<Srq*> srqs_;
};

// ibv_get_device_guid(3): from the port's MAC (EUI-64, as rxe), network order.
uint64_t DeviceGuid(Device* device);

}  // namespace uroce::verbs
