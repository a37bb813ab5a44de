#include "api/verbs/provider.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "pmd/eal.h"
#include "pmd/port_setup.h"
#include "pmd/threads.h"

namespace uroce::verbs {
namespace {

void OnExit() { Provider::Get().Shutdown(); }

// Set while this thread is inside Runtime::Progress (an engine's Poll, which
// holds the engine's progress token). A program killed by a signal whose
// handler calls exit() (libfabric's psm provider, loaded by every
// fi_getinfo, installs such handlers for SIGTERM and SIGINT) runs our exit
// handler on top of an interrupted Poll: flushing the QPs there would wait
// for the token this very thread holds, for ever. initial-exec: the library
// is loaded at start (it is libibverbs.so.1), so the access is one load.
thread_local bool t_in_progress __attribute__((tls_model("initial-exec"))) = false;

constexpr int kExitLingerMs = 100;
// How long (in 1 ms tries) the exit handler waits for the provider's mutex.
constexpr int kShutdownLockTries = 2000;
// How often the progress thread looks whether the daemon is still there.
constexpr int kDaemonCheckMs = 20;
// How often the progress thread looks at the ports' links (WatchPorts): an
// RDMA NIC's driver raises its port events within about as long.
constexpr int kPortCheckMs = 50;
// How long the progress thread stays away while an application thread polls
// (and so drives the engines itself).
constexpr unsigned kApplicationDrivesSleepUs = 2000;

// A GUID from the MAC, EUI-64 style, as rxe makes its node GUID.
uint64_t GuidFromMac(const transport::MacAddress& mac) {
  const uint8_t b[8] = {static_cast<uint8_t>(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  uint64_t guid = 0;
  std::memcpy(&guid, b, 8);  // network order in memory, as ibv_get_device_guid(3) returns it
  return guid;
}

// An attached process's EAL main lcore may run on any CPU this process may
// use (the daemon's configuration pins nothing: its engines are the
// processes' own, driven by their threads).
std::vector<pmd::ConfigOverride> DaemonOverrides() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::string cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    if (!cpus.empty()) cpus += ',';
    cpus += std::to_string(cpu);
  }
  if (cpus.empty()) return {};
  return {pmd::ConfigOverride{"eal", "lcores", "0@(" + cpus + ")"}};
}

// A QP with a peer: RTR and after, until the error state.
bool IsConnectedState(ibv_qp_state state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD || state == IBV_QPS_SQE;
}

}  // namespace

Provider& Provider::Get() {
  // Never destroyed: other libraries' destructors may still call verbs.
  static Provider* provider = [] {
    auto* p = new Provider();
    pthread_atfork(nullptr, nullptr, [] { Get().ForgetParentAfterFork(); });
    return p;
  }();
  return *provider;
}

void Provider::LoadConfigOnce() {
  if (loaded_) return;
  loaded_ = true;
  // secure_getenv(3): the configuration chooses the ports and EAL's
  // arguments, so a set-user-ID (or otherwise secure-execution) program
  // linked with this library does not take it from its caller's
  // environment, as glibc's loader ignores LD_LIBRARY_PATH there.
  const char* path = secure_getenv("UROCE_CONFIG");
  // UROCE_IMPAIR (`uroce exec --impair SPEC`): the [impair] section's keys,
  // over whatever the configuration says.
  std::vector<pmd::ConfigOverride> impair;
  if (const char* spec = secure_getenv("UROCE_IMPAIR"); spec != nullptr && *spec != '\0') {
    auto parsed = pmd::ParseImpairSpec(spec);
    if (!parsed.ok()) {
      std::fprintf(stderr, "uroce: UROCE_IMPAIR: %s: no uroce devices\n", parsed.status().ToString().c_str());
      return;
    }
    impair = std::move(*parsed);
  }
  StatusOr<pmd::UroceConfig> config = NotFound("");
  if (path != nullptr && *path != '\0') {
    config = pmd::LoadConfigFile(path, impair);
    if (!config.ok()) {
      std::fprintf(stderr, "uroce: %s: %s: no uroce devices\n", path, config.status().ToString().c_str());
      return;
    }
  } else {
    // No configuration of our own: the host's devices, from the daemon.
    auto session = host::DaemonSession::Attach(host::DaemonSocketPath());
    if (!session.ok()) {
      // (secure_getenv(3) ignores UROCE_CONFIG in a secure-execution process.)
      std::fprintf(stderr, "uroce: UROCE_CONFIG is not set, and %s: no uroce devices\n",
                   session.status().message().c_str());
      return;
    }
    const std::string origin = "uroce daemon at " + (*session)->socket_path();
    std::vector<pmd::ConfigOverride> overrides = DaemonOverrides();
    overrides.insert(overrides.end(), impair.begin(), impair.end());
    config = (*session)->LoadConfig(overrides);
    if (!config.ok()) {
      std::fprintf(stderr, "uroce: %s: %s: no uroce devices\n", origin.c_str(), config.status().ToString().c_str());
      return;
    }
    daemon_ = std::move(*session);
  }
  config_ = std::move(*config);
  config_ok_ = true;
  // The engine lcores are EAL's threads, which a forked child does not have.
  if (forked_after_eal_) config_.progress = pmd::ProgressMode::kInline;
  inline_ = config_.progress == pmd::ProgressMode::kInline;
  idle_us_ = config_.engine.progress_idle_us;
  // A forked child loads anew: the parent's ibv_device pointers, which it
  // may still hold, stay valid and name the same devices.
  std::vector<Device*> previous;
  previous.swap(devices_);
  for (size_t i = 0; i < config_.endpoints.size(); ++i) {
    auto* d = i < previous.size() ? previous[i] : new Device();
    *d = Device();
    d->index = i;
    d->endpoint_name = config_.endpoints[i].name;
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
}

const std::vector<Device*>& Provider::Devices() {
  std::lock_guard<std::mutex> lock(mutex_);
  LoadConfigOnce();
  return devices_;
}

uint64_t DeviceGuid(Device* device) {
  Provider& p = Provider::Get();
  if (p.runtime() != nullptr && device->index < p.runtime()->device_count()) {
    return GuidFromMac(p.runtime()->device(device->index).endpoint.mac);
  }
  const pmd::UroceConfig* c = p.config();
  if (c != nullptr && !c->endpoints[device->index].mac_from_port) return GuidFromMac(c->endpoints[device->index].mac);
  transport::MacAddress mac = {0x02, 0x75, 0x72, 0x00, 0x00, static_cast<uint8_t>(device->index)};
  return GuidFromMac(mac);
}

int Provider::StartRuntimeLocked() {
  LoadConfigOnce();
  if (!config_ok_) return ENODEV;
  if (!refused_after_fork_.empty()) {
    std::fprintf(stderr, "uroce: this process was forked from one that had started uroce (%s): %s\n",
                 config_.origin.c_str(), refused_after_fork_.c_str());
    return ENODEV;
  }
  if (start_failed_) return EIO;
  if (runtime_) return 0;
  const bool eal_started_here = !pmd::EalRunning();
  Status s = eal_started_here ? pmd::StartEalFor(config_) : Status::Ok();
  if (!s.ok()) {
    std::fprintf(stderr, "uroce: cannot start DPDK: %s\n", s.ToString().c_str());
    start_failed_ = true;
    return EIO;
  }
  if (eal_started_here && daemon_) {
    // A forked child must get a heap of its own (pmd/eal.h). Attached to a
    // daemon there is no vhost-user port that needs the memory shared.
    Status private_memory = pmd::MakeEalMemoryPrivate();
    eal_memory_private_ = private_memory.ok();
    if (!private_memory.ok()) {
      std::fprintf(stderr, "uroce: DPDK's memory stays shared with forked children, who cannot use uroce: %s\n",
                   private_memory.ToString().c_str());
    }
  }
  auto rt = runtime::Runtime::Start(config_);
  if (!rt.ok()) {
    std::fprintf(stderr, "uroce: cannot start the runtime (%s): %s\n", config_.origin.c_str(),
                 rt.status().ToString().c_str());
    start_failed_ = true;
    return EIO;
  }
  runtime_ = std::move(*rt);
  port_active_.assign(runtime_->device_count(), 0);
  for (size_t i = 0; i < port_active_.size(); ++i) port_active_[i] = PortActive(i) ? 1 : 0;
  std::atexit(OnExit);
  thread_ = std::thread([this] { ProgressLoop(); });
  return 0;
}

int Provider::StartRuntime() {
  std::lock_guard<std::mutex> lock(mutex_);
  return StartRuntimeLocked();
}

int Provider::Open(Device* device, Context* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (int e = StartRuntimeLocked(); e != 0) return e;
  runtime::Runtime::Device& ep = runtime_->device(device->index);
  context->device = device;
  context->engine = ep.endpoint.engine.get();
  context->engine_config = &context->engine->config();
  context->port_mtu = ep.config.mtu;
  context->mac = ep.endpoint.mac;
  return 0;
}

void Provider::Close(Context* context) { UnregisterContext(context); }

void Provider::RegisterCq(Cq* cq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  cqs_.push_back(cq);
}

void Provider::UnregisterCq(Cq* cq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  if (cq->armed.exchange(false)) armed_.fetch_sub(1);
  cqs_.erase(std::remove(cqs_.begin(), cqs_.end(), cq), cqs_.end());
}

void Provider::RegisterContext(Context* context) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  contexts_.push_back(context);
}

void Provider::UnregisterContext(Context* context) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context), contexts_.end());
}

namespace {
// Connected QPs: a daemon ends them when their peer's process ends. XRC's
// halves are connected as RC is.
bool IsConnected(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}
}  // namespace

void Provider::RegisterQp(Qp* qp) {
  {
    std::lock_guard<std::mutex> lock(objects_mutex_);
    qps_.push_back(qp);
  }
  const ibv_qp_type type = qp->ibv()->qp_type;
  if (IsConnected(type)) {
    const WatchedQp w = Watched(qp);
    WatchQp(w.engine, w.qp, w.device);
  }
}
void Provider::UnregisterQp(Qp* qp) {
  ForgetQp(qp);  // done already by ibv_destroy_qp; harmless again
  std::lock_guard<std::mutex> lock(objects_mutex_);
  qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
}

Provider::WatchedQp Provider::Watched(Qp* qp) {
  return WatchedQp{qp->context->engine, qp->engine_qp, qp->context->device->index};
}

void Provider::WatchQp(transport::Engine* engine, transport::QueuePair* qp, size_t device) {
  if (!daemon_) return;
  std::lock_guard<std::mutex> lock(peers_mutex_);
  unconnected_.push_back(WatchedQp{engine, qp, device});
}

void Provider::UnwatchQp(transport::QueuePair* qp) {
  if (!daemon_) return;
  std::lock_guard<std::mutex> lock(peers_mutex_);
  ForgetLocked(qp);
}

void Provider::ForgetLocked(const transport::QueuePair* qp) {
  unconnected_.erase(std::remove_if(unconnected_.begin(), unconnected_.end(),
                                    [qp](const WatchedQp& w) { return w.qp == qp; }),
                     unconnected_.end());
  DropPeerLocked(qp);
}

void Provider::NoteConnectedLocked(const WatchedQp& w, const transport::Gid& dest, uint32_t dest_qpn) {
  unconnected_.erase(std::remove_if(unconnected_.begin(), unconnected_.end(),
                                    [&w](const WatchedQp& u) { return u.qp == w.qp; }),
                     unconnected_.end());
  // Only peers on this host: a remote peer's daemon does not know our
  // process (its QP ends by retry exhaustion, as with any NIC).
  const std::vector<transport::Gid>& ours = config_.endpoints[w.device].gids;
  if (std::find(ours.begin(), ours.end(), dest) == ours.end()) {
    DropPeerLocked(w.qp);
    return;
  }
  const uint32_t qpn = w.qp->qpn;
  auto it = peers_.find(qpn);
  if (it != peers_.end() && it->second.watched.qp == w.qp && it->second.dest_qpn == dest_qpn) return;
  peers_[qpn] = PeerOf{w, dest_qpn};
  daemon_->RegisterPeer(host::PeerRecord{qpn, dest, dest_qpn});
}

void Provider::DropPeerLocked(const transport::QueuePair* qp) {
  const uint32_t qpn = qp->qpn;
  auto it = peers_.find(qpn);
  if (it == peers_.end() || it->second.watched.qp != qp) return;
  peers_.erase(it);
  daemon_->UnregisterPeer(qpn);
}

void Provider::NoteQpModified(Qp* qp, const ibv_qp_attr& attr, int mask) {
  const ibv_qp_type type = qp->ibv()->qp_type;
  if (!daemon_ || !(mask & IBV_QP_STATE) || !IsConnected(type)) return;
  const WatchedQp w = Watched(qp);
  std::lock_guard<std::mutex> lock(peers_mutex_);
  switch (attr.qp_state) {
    case IBV_QPS_RESET:
    case IBV_QPS_INIT: {
      // Not connected (again): a later RTR connects it anew.
      DropPeerLocked(w.qp);
      const bool listed = std::any_of(unconnected_.begin(), unconnected_.end(),
                                      [&w](const WatchedQp& u) { return u.qp == w.qp; });
      if (!listed) unconnected_.push_back(w);
      break;
    }
    case IBV_QPS_RTR:
      // INIT -> RTR carries the path and the peer's QPN (the engine took them).
      if ((mask & IBV_QP_AV) && (mask & IBV_QP_DEST_QPN)) {
        transport::Gid dest;
        std::memcpy(dest.data(), attr.ah_attr.grh.dgid.raw, dest.size());
        NoteConnectedLocked(w, dest, attr.dest_qp_num);
      }
      break;
    case IBV_QPS_ERR:
      // Nothing to connect any more; a record stays until reset or destroy.
      unconnected_.erase(std::remove_if(unconnected_.begin(), unconnected_.end(),
                                        [&w](const WatchedQp& u) { return u.qp == w.qp; }),
                         unconnected_.end());
      break;
    default:
      break;
  }
}

void Provider::ForgetQp(Qp* qp) { UnwatchQp(qp->engine_qp); }

void Provider::WatchPeers() {
  std::vector<std::array<uint32_t, 3>> lost;
  WatchPeersLocked(&lost);
  if (lost.empty()) return;
  // Their rdma_cm connections end with DISCONNECTED, as when the kernel's
  // rdma_cm sends DREQ for a process that exits: rping and the like wait for
  // that event, not for flushed completions. After peers_mutex_: the CM's
  // event sinks may take it.
  std::function<void(size_t, uint32_t, uint32_t)> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    hook = peer_gone_hook_;
  }
  if (!hook) return;
  for (const auto& l : lost) hook(l[0], l[1], l[2]);
}

void Provider::WatchPeersLocked(std::vector<std::array<uint32_t, 3>>* lost) {
  std::lock_guard<std::mutex> lock(peers_mutex_);
  // Our QPs whose peer's process ended (PEER_GONE): to the error state, as
  // the engine moves a QP on a fatal error. A notification for a QP that was
  // destroyed, reset or connected elsewhere since is stale: ignored.
  unsigned moved = 0;
  std::string names;
  for (const host::PeerGone& g : daemon_->TakePeersGone()) {
    auto it = peers_.find(g.qpn);
    if (it == peers_.end() || it->second.dest_qpn != g.dest_qpn) continue;
    const WatchedQp w = it->second.watched;
    peers_.erase(it);
    // Not the consumer's doing: with IBV_EVENT_QP_FATAL, as an engine error.
    if (!w.engine->FailQp(w.qp, g.qpn).ok()) continue;
    lost->push_back({static_cast<uint32_t>(w.device), g.qpn, g.dest_qpn});
    if (++moved <= 4) {
      char name[48];
      std::snprintf(name, sizeof(name), "%s0x%06x (peer 0x%06x)", names.empty() ? "" : ", ", g.qpn, g.dest_qpn);
      names += name;
    }
  }
  if (moved != 0) {
    std::fprintf(stderr,
                 "uroce: %u QP(s) lost their peer on this host, whose process ended: they move to the error state "
                 "(QP %s%s)\n",
                 moved, names.c_str(), moved > 4 ? ", ..." : "");
  }
  // QPs the connection manager connected (rdma_cm): it moves them through
  // RTR inside the engine, past ibv_modify_qp.
  for (size_t i = 0; i < unconnected_.size();) {
    const WatchedQp w = unconnected_[i];
    const ibv_qp_state state = w.qp->state.load(std::memory_order_acquire);
    if (!IsConnectedState(state) && state != IBV_QPS_ERR) {
      ++i;
      continue;
    }
    ibv_qp_attr attr{};
    if (IsConnectedState(state) && w.engine->QueryQp(w.qp, &attr, nullptr).ok() && IsConnectedState(attr.qp_state)) {
      transport::Gid dest;
      std::memcpy(dest.data(), attr.ah_attr.grh.dgid.raw, dest.size());
      NoteConnectedLocked(w, dest, attr.dest_qp_num);  // takes it off the list
      continue;
    }
    unconnected_.erase(unconnected_.begin() + static_cast<long>(i));
  }
}
void Provider::RegisterSrq(Srq* srq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  srqs_.push_back(srq);
}
void Provider::UnregisterSrq(Srq* srq) {
  std::lock_guard<std::mutex> lock(objects_mutex_);
  srqs_.erase(std::remove(srqs_.begin(), srqs_.end(), srq), srqs_.end());
}

// Called with objects_mutex_ held.
ibv_qp* Provider::QpFor(const transport::QueuePair* qp) {
  for (Qp* q : qps_) {
    if (q->engine_qp == qp) return q->ibv();
  }
  return nullptr;
}

ibv_srq* Provider::SrqFor(const transport::SharedReceiveQueue* srq) {
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
unsigned Provider::SignalArmedCqs() {
  if (armed_.load(std::memory_order_acquire) == 0) return 0;
  unsigned signalled = 0;
  std::lock_guard<std::mutex> lock(objects_mutex_);
  for (Cq* cq : cqs_) {
    if (!cq->armed.load(std::memory_order_acquire) || cq->engine_cq->ApproxDepth() == 0) continue;
    if (!cq->armed.exchange(false, std::memory_order_acq_rel)) continue;
    armed_.fetch_sub(1, std::memory_order_acq_rel);
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
unsigned Provider::PumpAsyncEvents() {
  if (!runtime_) return 0;
  unsigned moved = 0;
  for (size_t i = 0; i < runtime_->device_count(); ++i) {
    transport::Engine* engine = runtime_->device(i).endpoint.engine.get();
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

void Provider::PostAsyncEvent(Context* ctx, const ibv_async_event& event) {
  {
    std::lock_guard<std::mutex> al(ctx->async_mutex);
    ctx->async_events.push_back(event);
  }
  const uint64_t one = 1;
  ssize_t w = write(ctx->ibv()->async_fd, &one, sizeof(one));
  (void)w;
}

bool Provider::PortLinkUp(size_t device) {
  return runtime_ && device < runtime_->device_count() && runtime_->LinkUp(runtime_->device(device));
}

bool Provider::PortActive(size_t device) {
  if (!runtime_ || device >= runtime_->device_count()) return false;
  return runtime_->device(device).config.PortActiveBeforeLink() || PortLinkUp(device);
}

void Provider::WatchPorts() {
  for (size_t i = 0; i < port_active_.size(); ++i) {
    const uint8_t now = PortActive(i) ? 1 : 0;
    if (now == port_active_[i]) continue;
    port_active_[i] = now;
    // ibv_get_async_event(3): port events name the port (element.port_num).
    ibv_async_event event{};
    event.event_type = now != 0 ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    event.element.port_num = 1;
    std::lock_guard<std::mutex> lock(objects_mutex_);
    for (Context* ctx : contexts_) {
      if (ctx->device != nullptr && ctx->device->index == i) PostAsyncEvent(ctx, event);
    }
  }
}

void Provider::ProgressFromPoll(const transport::Engine* engine) {
  if (inline_ && runtime_) {
    // A plain load and store, not a locked increment per poll: the count
    // only says "someone polled since you looked"; an increment lost to a
    // second polling thread says it just as well.
    app_polls_.store(app_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Polling again: it is not blocked (a read, no store, while it polls).
    if (blocking_.load(std::memory_order_relaxed)) blocking_.store(false, std::memory_order_relaxed);
    t_in_progress = true;
    runtime_->Progress(engine);
    t_in_progress = false;
  }
}

void Provider::PollOnce(const transport::Engine* engine) {
  if (inline_ && runtime_) {
    t_in_progress = true;
    runtime_->Progress(engine);
    t_in_progress = false;
  }
}

void Provider::NoteArmed() {
  armed_.fetch_add(1, std::memory_order_acq_rel);
  WakeProgress();
}

void Provider::NoteBlocking() {
  if (!blocking_.exchange(true, std::memory_order_acq_rel)) WakeProgress();
}

void Provider::WakeProgress() {
  // Under the mutex the sleeper checks its condition with: no lost wake-up.
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    wakes_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_one();
}

void Provider::SleepUntilWoken(unsigned us, uint64_t seen_wakes) {
  std::unique_lock<std::mutex> lock(wake_mutex_);
  wake_.wait_for(lock, std::chrono::microseconds(us), [this, seen_wakes] {
    return stop_.load(std::memory_order_acquire) || wakes_.load(std::memory_order_acquire) != seen_wakes;
  });
}

void Provider::ProgressLoop() {
  pmd::PlaceHelperThread("uroce-progress", config_.engine.helper_cpus);
  // Sleeps of a few microseconds mean what they say (the default timer
  // slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  unsigned backoff_us = 0;
  uint64_t seen_app_polls = 0;
  auto next_daemon_check = std::chrono::steady_clock::now();
  auto next_port_check = next_daemon_check;
  while (!stop_.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= next_port_check) {
      next_port_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPortCheckMs);
      WatchPorts();
    }
    if (daemon_ && std::chrono::steady_clock::now() >= next_daemon_check) {
      next_daemon_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDaemonCheckMs);
      WatchDaemon();
    }
    unsigned work = 0;
    const uint64_t seen_wakes = wakes_.load(std::memory_order_acquire);
    // An application thread that polls drives the engines (inline mode);
    // then this thread only signals CQs and events, and sleeps. Unless a
    // thread waits for a completion (an armed CQ, a blocking fabric wait):
    // then nobody polls, whatever the count says.
    const bool waited_on = WaitedOn();
    const uint64_t app_polls = app_polls_.load(std::memory_order_relaxed);
    const bool application_drives = app_polls != seen_app_polls && !waited_on;
    seen_app_polls = app_polls;
    if (inline_ && !application_drives) work += runtime_->Progress();
    work += SignalArmedCqs();
    work += PumpAsyncEvents();
    if (application_drives) {
      // A wake-up costs a 2-core VM ~50 us of the CPU the
      // application polls on; every 50 us it took more than half of it
      // (ibv_rc_pingpong 22-34 us per iteration against 6.6-7.2). Out of its
      // way for longer: a thread that starts to wait wakes us (NoteArmed,
      // NoteBlocking); one that just stops polling is noticed within this.
      backoff_us = idle_us_;
      SleepUntilWoken(kApplicationDrivesSleepUs, seen_wakes);
      continue;
    }
    if (work != 0) {
      backoff_us = 0;  // busy: at once again
      continue;
    }
    // Nothing moved: sleep 1 us, doubling up to idle_us, also while a
    // thread waits for a completion (it did yield-spin then, and took a CPU
    // from everything else on the machine: a qemu guest beside it stalled);
    // a new wait (NoteArmed, NoteBlocking) wakes it at once.
    backoff_us = backoff_us == 0 ? 1 : std::min(backoff_us * 2, idle_us_);
    SleepUntilWoken(backoff_us, seen_wakes);
  }
}

void Provider::WatchDaemon() {
  if (daemon_gone_) return;
  if (!daemon_->DaemonGone()) {
    WatchPeers();
    // Straight links to the processes we talk to (host/local_links.h).
    runtime_->ApplyLinkChanges(daemon_.get());
    return;
  }
  daemon_gone_ = true;
  std::fprintf(stderr, "uroce: the uroce daemon at %s is gone: every QP moves to the error state\n",
               daemon_->socket_path().c_str());
  // The same flush as at exit: the engines stay, the QPs end in ERR with
  // their work completed as flushed (IBV_WC_WR_FLUSH_ERR), CQs stay readable.
  runtime_->FlushQueuePairs();
}

void Provider::ForgetParentAfterFork() {
  // Only this thread exists now. A lock another thread of the parent held at
  // the fork would stay held for ever: every lock is made anew. What the
  // parent's objects hold (runtime, session, thread) is let go of, never
  // destroyed: their destructors would join threads that are not here, or
  // tell the daemon the parent detached.
  new (&mutex_) std::mutex();
  new (&objects_mutex_) std::mutex();
  new (&wake_mutex_) std::mutex();
  new (&wake_) std::condition_variable();
  new (&peers_mutex_) std::mutex();
  new (&hook_mutex_) std::mutex();
  new (&thread_) std::thread();
  if (!loaded_) return;  // nothing was started: the child starts as any process
  const bool started = runtime_ != nullptr;
  if (daemon_) {
    daemon_->CloseInheritedFilesAfterFork();
    (void)daemon_.release();
    if (pmd::EalRunning() && !eal_memory_private_) {
      // The child's pools would land in its parent's heap (pmd/eal.h).
      refused_after_fork_ = "DPDK's memory is shared with the parent, so the child cannot open a device";
    }
  } else if (started) {
    refused_after_fork_ =
        "its DPDK ports are the parent's, so the child cannot open a device. A child can when both attach to a "
        "uroce daemon (no UROCE_CONFIG)";
  }
  (void)runtime_.release();
  forked_after_eal_ = pmd::EalRunning();
  start_failed_ = false;
  stop_.store(false);
  shut_down_ = false;
  daemon_gone_ = false;
  armed_.store(0);
  app_polls_.store(0);
  blocking_.store(false);
  wakes_.store(0);
  cqs_.clear();
  contexts_.clear();
  qps_.clear();
  srqs_.clear();
  peers_.clear();
  unconnected_.clear();
  port_active_.clear();
  if (refused_after_fork_.empty()) {
    loaded_ = false;  // the next use attaches to the daemon as this process
    config_ok_ = false;
  }
}

void Provider::Shutdown() {
  // Bounded: a signal handler that calls exit() may run this on top of a
  // call that holds mutex_ on this very thread (opening a device, say); then
  // waiting would never end, and the process leaves without the flush.
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  for (int tries = 0; !lock.try_lock(); ++tries) {
    if (tries == kShutdownLockTries) {
      std::fprintf(stderr, "uroce: exit: the library is busy in this thread or another; leaving without the flush\n");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (shut_down_) return;
  shut_down_ = true;
  if (t_in_progress || transport::ThisThreadHoldsAControlToken()) {
    // exit() from a signal handler that interrupted this thread's Poll (see
    // t_in_progress) or a control call holding an engine's progress token:
    // the engines cannot be touched from here. The process
    // ends without the linger and the flush; its peers see it go as they
    // would see a crash (retries, then an error; a daemon tells them at once).
    stop_.store(true, std::memory_order_release);
    WakeProgress();
    if (thread_.joinable()) thread_.join();
    return;
  }
  // Linger before the ports close: frames this process sent last (the ACK
  // of the peer's last message, typically) must reach the peer. On a NIC
  // they are on the wire already; a memif ring is dropped when its peer
  // disconnects, and the peer would retry a message that was delivered
  // until its retry count runs out. The progress thread keeps driving the
  // engines meanwhile (inline mode), so late retransmits are answered too.
  if (runtime_) std::this_thread::sleep_for(std::chrono::milliseconds(kExitLingerMs));
  stop_.store(true, std::memory_order_release);
  WakeProgress();
  if (thread_.joinable()) thread_.join();
  if (runtime_) {
    // At exit only the engine lcores stop and the QPs are flushed. Ports,
    // engines and pools are not torn down: the process is ending and its
    // memory goes with it, and other threads of the program may still call
    // verbs during exit (a full teardown here would pull their engines from
    // under them).
    runtime_->FlushQueuePairs();
    // [impair]: what was injected, for the test log (stderr: the
    // program's stdout stays its own).
    if (const std::string report = runtime_->ImpairmentReport(); !report.empty()) {
      std::fprintf(stderr, "uroce: %s\n", report.c_str());
    }
  }
}

}  // namespace uroce::verbs
