#include "api/verbs/registry.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace uroce::verbs {
namespace {

// A GUID from the MAC, EUI-64 style, as rxe makes its node GUID.
uint64_t GuidFromMac(const transport::MacAddress& mac) {
  const uint8_t b[8] = {static_cast<uint8_t>(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  uint64_t guid = 0;
  std::memcpy(&guid, b, 8);  // network order in memory, as ibv_get_device_guid(3) returns it
  return guid;
}

// Connected QPs: a daemon ends them when their peer's process ends. XRC's
// halves are connected as RC is.
bool IsConnected(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

runtime::WatchedQp Watched(Qp* qp) {
  return runtime::WatchedQp{qp->context->engine, qp->engine_qp, qp->context->device->index};
}

// At load, as libibverbs.so.1 is: the progress thread serves the verbs
// objects in every process that could make them, whichever API starts the
// runtime (the engines' async events are drained even where libfabric alone
// runs).
[[maybe_unused]] const bool kRegisteredAtLoad = (Registry::Get(), true);

}  // namespace

Registry& Registry::Get() {
  // Never destroyed, as the process it serves.
  static Registry* registry = [] {
    auto* r = new Registry();
    runtime::Process::Get().AddProgressClient(r);
    return r;
  }();
  return *registry;
}

const std::vector<Device*>& Registry::Devices() {
  std::lock_guard<std::mutex> lock(devices_mutex_);
  runtime::Process& process = runtime::Process::Get();
  const runtime::UroceConfig* config = process.LoadConfig();
  if (config == nullptr || process.config_loads() == devices_loads_) return devices_;
  devices_loads_ = process.config_loads();
  // A forked child loads anew: the parent's ibv_device pointers, which it
  // may still hold, stay valid and name the same devices.
  std::vector<Device*> previous;
  previous.swap(devices_);
  for (size_t i = 0; i < config->endpoints.size(); ++i) {
    auto* d = i < previous.size() ? previous[i] : new Device();
    *d = Device();
    d->index = i;
    d->endpoint_name = config->endpoints[i].name;
    d->device.node_type = IBV_NODE_CA;
    d->device.transport_type = IBV_TRANSPORT_IB;  // RoCE reports the IB transport (rxe does too)
    std::snprintf(d->device.name, sizeof(d->device.name), "uroce%zu", i);
    std::snprintf(d->device.dev_name, sizeof(d->device.dev_name), "uverbs%zu", i);
    // uroce has no kernel driver: these exist only where `uroce exec`
    // presents them (tools/device_files.h); elsewhere ibv_read_sysfs_file(3)
    // on them fails, as for a missing attribute.
    std::snprintf(d->device.dev_path, sizeof(d->device.dev_path), "/sys/class/infiniband_verbs/uverbs%zu", i);
    std::snprintf(d->device.ibdev_path, sizeof(d->device.ibdev_path), "/sys/class/infiniband/uroce%zu", i);
    devices_.push_back(d);
  }
  return devices_;
}

uint64_t DeviceGuid(Device* device) {
  runtime::Process& p = runtime::Process::Get();
  if (p.runtime() != nullptr && device->index < p.runtime()->device_count()) {
    return GuidFromMac(p.runtime()->device(device->index).side.mac);
  }
  const runtime::UroceConfig* c = p.config();
  if (c != nullptr && !c->endpoints[device->index].mac_from_port) return GuidFromMac(c->endpoints[device->index].mac);
  transport::MacAddress mac = {0x02, 0x75, 0x72, 0x00, 0x00, static_cast<uint8_t>(device->index)};
  return GuidFromMac(mac);
}

int Registry::Open(Device* device, Context* context) {
  runtime::Process& process = runtime::Process::Get();
  if (int e = process.Start(); e != 0) return e;
  // Started: the runtime stays as long as the process.
  runtime::Runtime::Device& ep = process.runtime()->device(device->index);
  context->device = device;
  context->engine = ep.side.engine.get();
  context->engine_config = &context->engine->config();
  context->port_mtu = ep.config.mtu;
  context->mac = ep.side.mac;
  return 0;
}

void Registry::Close(Context* context) { UnregisterContext(context); }

void Registry::RegisterCq(Cq* cq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  cqs_.push_back(cq);
}

void Registry::UnregisterCq(Cq* cq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  if (cq->armed.exchange(false)) runtime::Process::Get().NoteDisarmed();
  cqs_.erase(std::remove(cqs_.begin(), cqs_.end(), cq), cqs_.end());
}

void Registry::RegisterContext(Context* context) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  contexts_.push_back(context);
}

void Registry::UnregisterContext(Context* context) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context), contexts_.end());
}

void Registry::RegisterQp(Qp* qp) {
  {
    std::lock_guard<std::mutex> lock(objects_mutex_);
    qps_.push_back(qp);
  }
  const ibv_qp_type type = qp->ibv()->qp_type;
  if (IsConnected(type)) runtime::Process::Get().peers().Watch(Watched(qp));
}
void Registry::UnregisterQp(Qp* qp) {
  ForgetQp(qp);  // done already by ibv_destroy_qp; harmless again
  std::lock_guard<std::mutex> lock(objects_mutex_);
  qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
}

void Registry::NoteQpModified(Qp* qp, const ibv_qp_attr& attr, int mask) {
  if (IsConnected(qp->ibv()->qp_type)) runtime::Process::Get().peers().NoteQpModified(Watched(qp), attr, mask);
}

void Registry::ForgetQp(Qp* qp) { runtime::Process::Get().peers().Unwatch(qp->engine_qp); }

void Registry::RegisterSrq(Srq* srq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  srqs_.push_back(srq);
}
void Registry::UnregisterSrq(Srq* srq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  srqs_.erase(std::remove(srqs_.begin(), srqs_.end(), srq), srqs_.end());
}

// Called with objects_mutex_ held.
ibv_qp* Registry::QpFor(const transport::QueuePair* qp) {
  for (Qp* q : qps_) {
    if (q->engine_qp == qp) return q->ibv();
  }
  return nullptr;
}

ibv_srq* Registry::SrqFor(const transport::SharedReceiveQueue* srq) {
  for (Srq* s : srqs_) {
    if (s->engine_srq == srq) return &s->srq;
  }
  return nullptr;
}

// ibv_req_notify_cq(3): "the next completion" after arming wakes the channel.
// A CQ that holds completions when the progress side looks is signalled, so a
// completion that raced the arming is never lost (the program polls the CQ
// again after the event anyway, as the man page asks). Solicited-only arming
// is treated as arming for every completion (a superset of what it asks).
unsigned Registry::SignalArmedCqs() {
  runtime::Process& process = runtime::Process::Get();
  if (process.armed() == 0) return 0;
  unsigned signalled = 0;
  std::lock_guard<std::mutex> lock(objects_mutex_);
  for (Cq* cq : cqs_) {
    if (!cq->armed.load(std::memory_order_acquire) || cq->engine_cq->ApproxDepth() == 0) continue;
    if (!cq->armed.exchange(false, std::memory_order_acq_rel)) continue;
    process.NoteDisarmed();
    CompChannel* ch = cq->channel;
    if (ch == nullptr) continue;
    {
      std::lock_guard<std::mutex> chl(ch->mutex);
      ch->fired.push_back(cq->ibv());
    }
    const uint64_t one = 1;
    ssize_t w = write(ch->channel.fd, &one, sizeof(one));
    (void)w;
    signalled++;
  }
  return signalled;
}

// Engine events (QP fatal, SRQ limit, CQ overrun) to the owning context's
// queue, and its async_fd made readable (ibv_get_async_event(3)).
unsigned Registry::PumpAsyncEvents() {
  runtime::Runtime* runtime = runtime::Process::Get().runtime();
  if (runtime == nullptr) return 0;
  unsigned moved = 0;
  for (size_t i = 0; i < runtime->device_count(); ++i) {
    transport::Engine* engine = runtime->device(i).side.engine.get();
    if (engine == nullptr) continue;
    transport::AsyncEvent ev;
    while (engine->NextAsyncEvent(&ev)) {
      moved++;
      std::lock_guard<std::mutex> lock(objects_mutex_);
      ibv_async_event out{};
      out.event_type = ev.type;
      Context* ctx = nullptr;
      switch (ev.type) {
        case IBV_EVENT_SRQ_LIMIT_REACHED:
        case IBV_EVENT_SRQ_ERR: {
          out.element.srq = SrqFor(static_cast<const transport::SharedReceiveQueue*>(ev.object));
          if (out.element.srq != nullptr) ctx = Context::From(out.element.srq->context);
          break;
        }
        case IBV_EVENT_CQ_ERR: {
          for (Cq* cq : cqs_) {
            if (cq->engine_cq == ev.object) {
              out.element.cq = cq->ibv();
              ctx = cq->context;
            }
          }
          break;
        }
        default: {
          out.element.qp = QpFor(static_cast<const transport::QueuePair*>(ev.object));
          if (out.element.qp != nullptr) ctx = Context::From(out.element.qp->context);
          break;
        }
      }
      if (ctx == nullptr) continue;  // its object is gone
      PostAsyncEvent(ctx, out);
    }
  }
  return moved;
}

void Registry::PostAsyncEvent(Context* ctx, const ibv_async_event& event) {
  {
    std::lock_guard<std::mutex> al(ctx->async_mutex);
    ctx->async_events.push_back(event);
  }
  const uint64_t one = 1;
  ssize_t w = write(ctx->ibv()->async_fd, &one, sizeof(one));
  (void)w;
}

unsigned Registry::OnProgress() { return SignalArmedCqs() + PumpAsyncEvents(); }

void Registry::OnPortStateChanged(size_t device, bool active) {
  // ibv_get_async_event(3): port events name the port (element.port_num).
  ibv_async_event event{};
  event.event_type = active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  event.element.port_num = 1;
  std::lock_guard<std::mutex> lock(objects_mutex_);
  for (Context* ctx : contexts_) {
    if (ctx->device != nullptr && ctx->device->index == device) PostAsyncEvent(ctx, event);
  }
}

void Registry::ForgetParentAfterFork() {
  // The devices stay listed: a child may still hold the parent's ibv_device
  // pointers, and Devices() refills them from the child's own configuration.
  new (&devices_mutex_) std::mutex();
  new (&objects_mutex_) std::mutex();
  cqs_.clear();
  contexts_.clear();
  qps_.clear();
  srqs_.clear();
}

}  // namespace uroce::verbs
