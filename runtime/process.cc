#include "runtime/process.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "pmd/eal.h"
#include "pmd/log.h"
#include "pmd/port_setup.h"
#include "pmd/threads.h"
#include "runtime/progress_pacer.h"

namespace uroce::runtime {
namespace {

void OnExit() { Process::Get().Shutdown(); }

// Set while this thread is inside Runtime::Progress (an engine's Poll, which
// holds the engine's progress token). A program killed by a signal whose
// handler calls exit() (libfabric's psm provider, loaded by every
// fi_getinfo, installs such handlers for SIGTERM and SIGINT) runs our exit
// handler on top of an interrupted Poll: flushing the QPs there would wait
// for the token this very thread holds, for ever. initial-exec: the library
// is loaded at start (it is libibverbs.so.1), so the access is one load.
thread_local bool t_in_progress __attribute__((tls_model("initial-exec"))) = false;

constexpr int kExitLingerMs = 100;
// How long (in 1 ms tries) the exit handler waits for the process's mutex.
constexpr int kShutdownLockTries = 2000;
// How often the progress thread looks whether the daemon is still there.
constexpr int kDaemonCheckMs = 20;
// How often the progress thread looks at the ports' links (WatchPorts): an
// RDMA NIC's driver raises its port events within about as long.
constexpr int kPortCheckMs = 50;

}  // namespace

Process& Process::Get() {
  // Never destroyed: other libraries' destructors may still call verbs.
  static Process* process = [] {
    auto* p = new Process();
    pthread_atfork(nullptr, nullptr, [] { Get().ForgetParentAfterFork(); });
    return p;
  }();
  return *process;
}

void Process::LoadConfigOnce() {
  if (loaded_) return;
  loaded_ = true;
  // secure_getenv(3): the configuration chooses the ports and EAL's
  // arguments, so a set-user-ID (or otherwise secure-execution) program
  // linked with this library does not take it from its caller's
  // environment, as glibc's loader ignores LD_LIBRARY_PATH there.
  const char* path = secure_getenv("UROCE_CONFIG");
  // UROCE_IMPAIR (`uroce exec --impair SPEC`): the [impair] section's keys,
  // over whatever the configuration says.
  std::vector<runtime::ConfigOverride> impair;
  if (const char* spec = secure_getenv("UROCE_IMPAIR"); spec != nullptr && *spec != '\0') {
    auto parsed = runtime::ParseImpairSpec(spec);
    if (!parsed.ok()) {
      UROCE_LOG(ERR, kRuntime, "UROCE_IMPAIR: %s: no uroce devices\n", parsed.status().ToString().c_str());
      return;
    }
    impair = std::move(*parsed);
  }
  StatusOr<runtime::UroceConfig> config = NotFound("");
  if (path != nullptr && *path != '\0') {
    config = runtime::LoadConfigFile(path, impair);
    if (!config.ok()) {
      UROCE_LOG(ERR, kRuntime, "%s: %s: no uroce devices\n", path, config.status().ToString().c_str());
      return;
    }
  } else {
    // No configuration of our own: the host's devices, from the daemon.
    auto session = host::DaemonSession::Attach(host::DaemonSocketPath());
    if (!session.ok()) {
      // (secure_getenv(3) ignores UROCE_CONFIG in a secure-execution process.)
      UROCE_LOG(ERR, kRuntime, "UROCE_CONFIG is not set, and %s: no uroce devices\n",
                   session.status().message().c_str());
      return;
    }
    const std::string origin = "uroce daemon at " + (*session)->socket_path();
    config = LoadConfigFromDaemon(**session, impair);
    if (!config.ok()) {
      UROCE_LOG(ERR, kRuntime, "%s: %s: no uroce devices\n", origin.c_str(), config.status().ToString().c_str());
      return;
    }
    daemon_ = std::move(*session);
  }
  config_ = std::move(*config);
  config_ok_ = true;
  peers_.Attach(daemon_.get(), &config_);
  // The engine lcores are EAL's threads, which a forked child does not have.
  if (forked_after_eal_) config_.progress = runtime::ProgressMode::kInline;
  inline_ = config_.progress == runtime::ProgressMode::kInline;
  idle_us_ = config_.engine.progress_idle_us;
  config_loads_.fetch_add(1, std::memory_order_acq_rel);
}

const runtime::UroceConfig* Process::LoadConfig() {
  std::lock_guard<std::mutex> lock(mutex_);
  LoadConfigOnce();
  return config();
}

int Process::StartLocked() {
  LoadConfigOnce();
  if (!config_ok_) return ENODEV;
  if (!refused_after_fork_.empty()) {
    UROCE_LOG(ERR, kRuntime, "this process was forked from one that had started uroce (%s): %s\n",
                 config_.origin.c_str(), refused_after_fork_.c_str());
    return ENODEV;
  }
  if (start_failed_) return EIO;
  if (runtime_) return 0;
  const bool eal_started_here = !pmd::EalRunning();
  Status s = eal_started_here ? pmd::StartEalFor(config_.eal) : Status::Ok();
  if (!s.ok()) {
    UROCE_LOG(ERR, kRuntime, "cannot start DPDK: %s\n", s.ToString().c_str());
    start_failed_ = true;
    return EIO;
  }
  eal_started_here_ = eal_started_here;
  if (eal_started_here && daemon_) {
    // A forked child must get a heap of its own (pmd/eal.h). Attached to a
    // daemon there is no vhost-user port that needs the memory shared.
    Status private_memory = pmd::MakeEalMemoryPrivate();
    eal_memory_private_ = private_memory.ok();
    if (!private_memory.ok()) {
      UROCE_LOG(ERR, kRuntime, "DPDK's memory stays shared with forked children, who cannot use uroce: %s\n",
                   private_memory.ToString().c_str());
    }
  }
  auto rt = runtime::Runtime::Start(config_);
  if (!rt.ok()) {
    UROCE_LOG(ERR, kRuntime, "cannot start the runtime (%s): %s\n", config_.origin.c_str(),
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

int Process::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  return StartLocked();
}

void Process::AddProgressClient(ProgressClient* client) {
  std::lock_guard<std::mutex> lock(clients_mutex_);
  const size_t n = client_count_.load(std::memory_order_relaxed);
  if (n == kMaxProgressClients) {
    UROCE_LOG(ERR, kRuntime, "too many progress clients\n");
    std::abort();
  }
  clients_[n] = client;
  client_count_.store(n + 1, std::memory_order_release);
}

bool Process::PortLinkUp(size_t device) {
  return runtime_ && device < runtime_->device_count() && runtime_->LinkUp(runtime_->device(device));
}

bool Process::PortActive(size_t device) {
  if (!runtime_ || device >= runtime_->device_count()) return false;
  return runtime_->device(device).config.PortActiveBeforeLink() || PortLinkUp(device);
}

void Process::WatchPorts() {
  for (size_t i = 0; i < port_active_.size(); ++i) {
    const uint8_t now = PortActive(i) ? 1 : 0;
    if (now == port_active_[i]) continue;
    port_active_[i] = now;
    // ibv_get_async_event(3): port events name the port (element.port_num).
    for (size_t c = 0; c < client_count(); ++c) clients_[c]->OnPortStateChanged(i, now != 0);
  }
}

void Process::ProgressFromPoll(const transport::Engine* engine) {
  if (inline_ && runtime_) {
    // A plain load and store, not a locked increment per poll: the count
    // only says "someone polled since you looked"; an increment lost to a
    // second polling thread says it just as well.
    app_polls_.store(app_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Polling again: it is not blocked (a read, no store, while it polls).
    if (blocking_.load(std::memory_order_relaxed)) blocking_.store(false, std::memory_order_relaxed);
    t_in_progress = true;
    const unsigned moved = runtime_->Progress(engine);
    t_in_progress = false;
    // The frames the application's polls move tell the progress thread
    // whether they keep up (runtime/progress_pacer.h); same plain update.
    if (moved != 0) app_moved_.store(app_moved_.load(std::memory_order_relaxed) + moved, std::memory_order_relaxed);
  }
}

void Process::PollOnce(const transport::Engine* engine) {
  if (inline_ && runtime_) {
    t_in_progress = true;
    runtime_->Progress(engine);
    t_in_progress = false;
  }
}

void EngineProgress::Drive() { process_.ProgressFromPoll(engine_); }

void EngineProgress::NoteBlocking() { process_.NoteBlocking(); }

EngineProgress* Process::ProgressOf(const transport::Engine* engine) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (EngineProgress* p : engine_progress_) {
    if (p->engine() == engine) return p;
  }
  engine_progress_.push_back(new EngineProgress(*this, engine));
  return engine_progress_.back();
}

void Process::NoteArmed() {
  armed_.fetch_add(1, std::memory_order_acq_rel);
  WakeProgress();
}

void Process::NoteBlocking() {
  if (!blocking_.exchange(true, std::memory_order_acq_rel)) WakeProgress();
}

void Process::WakeProgress() {
  // Under the mutex the sleeper checks its condition with: no lost wake-up.
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    wakes_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_one();
}

void Process::SleepUntilWoken(unsigned us, uint64_t seen_wakes) {
  std::unique_lock<std::mutex> lock(wake_mutex_);
  wake_.wait_for(lock, std::chrono::microseconds(us), [this, seen_wakes] {
    return stop_.load(std::memory_order_acquire) || wakes_.load(std::memory_order_acquire) != seen_wakes;
  });
}

void Process::ProgressLoop() {
  pmd::PlaceHelperThread("uroce-progress", config_.engine.helper_cpus);
  // Sleeps of a few microseconds mean what they say (the default timer
  // slack is 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  ProgressPacer pacer(idle_us_);
  const auto start = std::chrono::steady_clock::now();
  auto next_daemon_check = start;
  auto next_port_check = next_daemon_check;
  while (!stop_.load(std::memory_order_acquire)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_port_check) {
      next_port_check = now + std::chrono::milliseconds(kPortCheckMs);
      WatchPorts();
    }
    if (daemon_ && now >= next_daemon_check) {
      next_daemon_check = now + std::chrono::milliseconds(kDaemonCheckMs);
      WatchDaemon();
    }
    const uint64_t seen_wakes = wakes_.load(std::memory_order_acquire);
    const auto now_us =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - start).count());
    // Who drives the engines this round: runtime/progress_pacer.h.
    const bool thread_polls = pacer.StartRound(now_us, app_polls_.load(std::memory_order_relaxed),
                                               app_moved_.load(std::memory_order_relaxed), WaitedOn());
    unsigned moved = 0;
    if (inline_ && thread_polls) moved = runtime_->Progress();
    unsigned other_work = 0;
    for (size_t c = 0; c < client_count(); ++c) other_work += clients_[c]->OnProgress();
    const unsigned sleep_us = pacer.EndRound(moved, other_work);
    if (sleep_us != 0) SleepUntilWoken(sleep_us, seen_wakes);
  }
}

void Process::WatchDaemon() {
  if (daemon_gone_) return;
  if (!daemon_->DaemonGone()) {
    peers_.Check();
    // Straight links to the processes we talk to (host/local_links.h).
    runtime_->ApplyLinkChanges(daemon_.get());
    return;
  }
  daemon_gone_ = true;
  UROCE_LOG(ERR, kRuntime, "the uroce daemon at %s is gone: every QP moves to the error state\n",
               daemon_->socket_path().c_str());
  // The same flush as at exit: the engines stay, the QPs end in ERR with
  // their work completed as flushed (IBV_WC_WR_FLUSH_ERR), CQs stay readable.
  runtime_->FlushQueuePairs();
}

void Process::ForgetParentAfterFork() {
  // Only this thread exists now. A lock another thread of the parent held at
  // the fork would stay held for ever: every lock is made anew. What the
  // parent's objects hold (runtime, session, thread) is let go of, never
  // destroyed: their destructors would join threads that are not here, or
  // tell the daemon the parent detached.
  new (&mutex_) std::mutex();
  new (&wake_mutex_) std::mutex();
  new (&wake_) std::condition_variable();
  new (&clients_mutex_) std::mutex();
  new (&thread_) std::thread();
  peers_.ForgetParentAfterFork();
  for (size_t c = 0; c < client_count(); ++c) clients_[c]->ForgetParentAfterFork();
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
  app_moved_.store(0);
  blocking_.store(false);
  wakes_.store(0);
  port_active_.clear();
  engine_progress_.clear();  // the parent's objects keep theirs
  if (refused_after_fork_.empty()) {
    loaded_ = false;  // the next use attaches to the daemon as this process
    config_ok_ = false;
  }
}

void Process::Shutdown() {
  // Bounded: a signal handler that calls exit() may run this on top of a
  // call that holds mutex_ on this very thread (opening a device, say); then
  // waiting would never end, and the process leaves without the flush.
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  for (int tries = 0; !lock.try_lock(); ++tries) {
    if (tries == kShutdownLockTries) {
      UROCE_LOG(ERR, kRuntime, "exit: the library is busy in this thread or another; leaving without the flush\n");
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
    if (eal_started_here_) pmd::RemoveEalRuntimeDir();
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
      UROCE_LOG(ERR, kRuntime, "%s\n", report.c_str());
    }
  }
  // EAL stays up (see above), but its runtime directory and telemetry
  // socket go: nothing reaches this process through them any more.
  if (eal_started_here_) pmd::RemoveEalRuntimeDir();
}

}  // namespace uroce::runtime
