#include "runtime/connection_managers.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "pmd/log.h"
#include "pmd/threads.h"
#include "runtime/process.h"

namespace uroce::runtime {
namespace {

// While a connection is being made or torn down the CM is polled every
// millisecond (its resend timers are 50 ms). When it is quiet the interval
// doubles up to kQuietPollInterval: the thread shares the application's
// core under `uroce exec` (it inherits the main lcore's affinity), and on a
// 2-core VM each wake costs the polling application tens of microseconds.
// A call that starts something (Connect, Listen, Accept, ...)
// wakes it at once (Options::activity_hook); a MAD from a peer to a quiet
// CM (a new REQ, a DREQ) waits at most kQuietPollInterval.
constexpr auto kPollInterval = std::chrono::milliseconds(1);
constexpr auto kQuietPollInterval = std::chrono::milliseconds(32);

struct PendingEvent {
  size_t device = 0;
  cm::ConnectionManager* cm = nullptr;
  cm::CmEvent event;
};

}  // namespace

ConnectionManagers& ConnectionManagers::Get() {
  // Never destroyed: its thread runs until the process ends, and the
  // connection managers live as long as the runtime (Process::Shutdown).
  static ConnectionManagers* managers = [] {
    auto* m = new ConnectionManagers();
    pthread_atfork(nullptr, nullptr, [] { Get().ForgetParentAfterFork(); });
    return m;
  }();
  return *managers;
}

void ConnectionManagers::ForgetParentAfterFork() {
  new (&mutex_) std::mutex();
  new (&wake_mutex_) std::mutex();
  new (&wake_) std::condition_variable();
  for (auto& cm : cms_) (void)cm.release();
  cms_.clear();
  thread_started_ = false;
  wakes_ = 0;
}

uint16_t ConnectionManagers::AddSink(Sink sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sink_count_ + 1u >= kMaxSinks) {
    UROCE_LOG(ERR, kRuntime, "too many connection-manager consumers\n");
    std::abort();
  }
  ++sink_count_;
  sinks_[sink_count_] = std::move(sink);
  return sink_count_;
}

void ConnectionManagers::PeerGone(size_t index, uint32_t qpn, uint32_t remote_qpn) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index < cms_.size() && cms_[index]) cms_[index]->PeerGone(qpn, remote_qpn);
}

StatusOr<cm::ConnectionManager*> ConnectionManagers::ForDevice(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Runtime* runtime = Process::Get().runtime();
  if (runtime == nullptr || index >= runtime->device_count()) {
    return FailedPrecondition("uroce: the runtime is not running");
  }
  if (cms_.size() < runtime->device_count()) cms_.resize(runtime->device_count());
  if (!cms_[index]) {
    Runtime::Device& ep = runtime->device(index);
    cm::ConnectionManager::Options options;
    options.local_gid = ep.side.gid;
    options.activity_hook = [this] { Wake(); };
    if (host::DaemonSession* daemon = Process::Get().daemon_session(); daemon != nullptr) {
      // Attached to a daemon: it routes CM MADs between the processes on
      // the host by our communication IDs and listened ports.
      options.comm_id_base = daemon->slot() << host::kDaemonCommIdShift;
      options.comm_id_mask = (1u << host::kDaemonCommIdShift) - 1;
      options.listen_hook = [daemon](uint16_t port, bool listen) { return daemon->ClaimPort(port, listen); };
    }
    auto cm = cm::ConnectionManager::Create(ep.side.engine.get(), ep.side.pd, options);
    if (!cm.ok()) return cm.status();
    cms_[index] = std::move(*cm);
  }
  if (!thread_started_) {
    thread_started_ = true;
    Process::Get().peers().SetPeerGoneHook(
        [this](size_t device, uint32_t qpn, uint32_t dest_qpn) { PeerGone(device, qpn, dest_qpn); });
    std::thread([this] { Loop(); }).detach();
  }
  return cms_[index].get();
}

void ConnectionManagers::Wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    ++wakes_;
  }
  wake_.notify_one();
}

void ConnectionManagers::Loop() {
  const runtime::UroceConfig* config = Process::Get().config();
  pmd::PlaceHelperThread("uroce-cm", config != nullptr ? config->engine.helper_cpus : std::vector<unsigned>{});
  std::vector<PendingEvent> pending;
  std::chrono::milliseconds interval = kPollInterval;
  uint64_t seen_wakes = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait_for(lock, interval, [&] { return wakes_ != seen_wakes; });
      if (wakes_ != seen_wakes) interval = kPollInterval;
      seen_wakes = wakes_;
    }
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t device = 0; device < cms_.size(); ++device) {
        cm::ConnectionManager* cm = cms_[device].get();
        if (cm == nullptr) continue;
        busy |= cm->Poll();
        PendingEvent p;
        p.device = device;
        p.cm = cm;
        while (cm->NextEvent(&p.event)) pending.push_back(p);
      }
    }
    // Sinks run without mutex_: they take their own locks, and API calls
    // that hold those locks may need ForDevice.
    for (PendingEvent& p : pending) {
      const uint64_t tag = p.event.type == cm::CmEventType::kConnectRequest ? p.event.listen_tag : p.event.tag;
      const uint64_t sink_number = tag >> kSinkShift;
      const Sink* sink = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (sink_number != 0 && sink_number <= sink_count_) sink = &sinks_[sink_number];
      }
      if (sink != nullptr) {
        (*sink)(p.device, p.cm, p.event);
      } else if (p.event.type == cm::CmEventType::kConnectRequest) {
        (void)p.cm->Reject(p.event.id, nullptr, 0);
        p.cm->Release(p.event.id);
      }
    }
    busy |= !pending.empty();
    pending.clear();
    interval = busy ? kPollInterval : std::min(interval * 2, std::chrono::milliseconds(kQuietPollInterval));
  }
}

}  // namespace uroce::runtime
