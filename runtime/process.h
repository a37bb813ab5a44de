// The uroce side of one application process, shared by every API linked
// into uroce's libibverbs.so.1 (verbs, libfabric, rdma_cm): the
// configuration named by UROCE_CONFIG (or the attached daemon's), the DPDK
// runtime (started once per process, as EAL can only start once), the
// progress thread, the daemon watch, fork and exit.
//
// Where the engine runs (configuration [engine] progress, runtime/config.h):
// - progress = engine: every device's engine spins on its own EAL lcore
//   (like a NIC), started with the runtime. The progress thread only serves
//   its clients (completion channels, async events) and the daemon watch.
// - progress = inline (the default): there is no engine thread. Every poll
//   of a CQ (ibv_poll_cq, fi_cq_read) drives one Poll of its engine (a
//   bounded burst, ProgressFromPoll), and the progress thread drives them
//   too, so that a program that does not poll (one blocked in
//   ibv_get_cq_event(3) or in read() on a socket while the peer's RDMA WRITEs
//   land, as ib_write_bw's server does) never hangs. The thread spins while
//   it has work or while someone waits for a completion, and otherwise sleeps
//   with a bounded exponential backoff ([engine] progress_idle_us). While an
//   application thread polls, it sleeps long and looks once after each sleep;
//   frames found waiting make it drive (runtime/progress_pacer.h).
//
// The APIs' own objects stay theirs: an API that needs the progress thread
// (verbs' completion channels and async events) registers a ProgressClient.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cq/completion_sink.h"
#include "host/daemon_client.h"
#include "runtime/config.h"
#include "runtime/peer_watch.h"
#include "runtime/runtime.h"

namespace uroce::runtime {

// A part of the process above the runtime that the progress thread serves.
// Its calls come from the progress thread with no lock of Process held.
class ProgressClient {
 public:
  virtual ~ProgressClient() = default;
  // Every round of the progress thread, after the engines' progress: the
  // work done (0: nothing moved).
  virtual unsigned OnProgress() = 0;
  // Device `device`'s port became active (its link came up) or not.
  virtual void OnPortStateChanged(size_t device, bool active) = 0;
  // pthread_atfork(3)'s child handler, after Process made its own locks
  // anew: only this thread exists; the client's locks must be made anew and
  // its parent's objects forgotten.
  virtual void ForgetParentAfterFork() = 0;
};

class Process;

// The progress of one engine as the cq layer's objects drive it: a fid_cq or
// fid_cntr opened on a domain reads through the one of its domain's engine
// (cq/completion_sink.h).
class EngineProgress final : public cq::Progress {
 public:
  EngineProgress(Process& process, const transport::Engine* engine) : process_(process), engine_(engine) {}
  // Process::ProgressFromPoll of this engine.
  void Drive() override;
  // Process::NoteBlocking.
  void NoteBlocking() override;
  const transport::Engine* engine() const { return engine_; }

 private:
  Process& process_;
  const transport::Engine* const engine_;
};

class Process {
 public:
  // Never destroyed: other libraries' destructors may still call verbs.
  static Process& Get();

  // The configuration: UROCE_CONFIG's, or, without it, that of the uroce
  // daemon this process attaches to (UROCE_DAEMON or /run/uroce/uroce.sock).
  // Loaded once; a bad file or no daemon gives null and one message.
  const runtime::UroceConfig* LoadConfig();
  // How many times a configuration was loaded: a forked child loads anew
  // (ForgetParentAfterFork), and whoever built objects from the last one
  // builds them again.
  uint64_t config_loads() const { return config_loads_.load(std::memory_order_acquire); }
  // The configuration loaded, or null; no load.
  const runtime::UroceConfig* config() const { return config_ok_ ? &config_ : nullptr; }

  // Starts EAL, the runtime and the progress thread (once). 0, or a positive
  // errno after a message on stderr.
  int Start();
  Runtime* runtime() { return runtime_.get(); }
  // The daemon this process is attached to, or null (process-private mode).
  host::DaemonSession* daemon_session() { return daemon_.get(); }
  bool inline_progress() const { return inline_; }

  // Inline mode: one poll of `engine`, the one that owns the CQ polled
  // (ibv_poll_cq, fi_cq_read), and now and then of the others
  // (Runtime::Progress(polled)); null: every engine. Engine mode: nothing.
  void ProgressFromPoll(const transport::Engine* engine);
  // Inline mode: one poll of `engine` for a control call that must see its
  // frames leave now (rdma_reject); unlike ProgressFromPoll it does not tell
  // the progress thread that an application thread polls. Engine mode:
  // nothing (the engine lcore sends them).
  void PollOnce(const transport::Engine* engine);
  // The progress the cq objects opened on `engine`'s domain drive; made on
  // first use, kept for the life of the process. Control path.
  EngineProgress* ProgressOf(const transport::Engine* engine);
  // Someone waits for a completion event (a CQ was armed,
  // ibv_req_notify_cq(3)): the progress thread wakes and keeps looking until
  // as many NoteDisarmed calls followed.
  void NoteArmed();
  void NoteDisarmed() { armed_.fetch_sub(1, std::memory_order_acq_rel); }
  // The armed CQs not signalled yet.
  unsigned armed() const { return armed_.load(std::memory_order_acquire); }
  // An application thread may block now (fi_cq_sread, fi_cntr_wait, a
  // fi_trywait that allowed it): the progress thread drives the engines
  // until that thread polls again, instead of taking it for a poller.
  void NoteBlocking();

  // Registers `client` for the life of the process. Any thread, before or
  // after Start; at most kMaxProgressClients.
  void AddProgressClient(ProgressClient* client);
  static constexpr size_t kMaxProgressClients = 4;

  // Attached to a daemon: our connected QPs' peers on the host.
  PeerWatch& peers() { return peers_; }

  // ibv_query_port(3)'s state of device `device`'s port: ACTIVE once its
  // link is up, or at once where the configuration says so
  // (active_before_link); its link (phys_state) separately. Any thread.
  bool PortActive(size_t device);
  bool PortLinkUp(size_t device);

  // atexit: stop the thread, flush and shut the runtime down.
  void Shutdown();

 private:
  Process() = default;
  void LoadConfigOnce();
  int StartLocked();
  // pthread_atfork(3)'s child handler. ibv_fork_init(3): a child may not use
  // its parent's verbs objects, but may open a device and make its own. So
  // the child lets go of everything its parent started, without touching
  // it: the runtime (its engines, pools and shared memory stay as copied
  // memory nobody uses), the progress thread (which does not exist in the
  // child), the daemon session (its socket and files are closed, so the
  // parent's session ends with the parent). Attached to a daemon, the
  // child's first use of verbs attaches it anew, as a process of its own.
  // A process-private runtime (UROCE_CONFIG) cannot be started again in the
  // child: its DPDK ports are the parent's. The clients forget theirs.
  void ForgetParentAfterFork();
  void ProgressLoop();
  // Sleeps up to `us`, or until WakeProgress ran since `seen_wakes` was read
  // (NoteArmed, NoteBlocking, Shutdown).
  void SleepUntilWoken(unsigned us, uint64_t seen_wakes);
  bool WaitedOn() const {
    return armed_.load(std::memory_order_acquire) != 0 || blocking_.load(std::memory_order_acquire);
  }
  void WakeProgress();
  // Attached to a daemon: once it is gone, every QP goes to the error state
  // (its work completes as flushed), so that nothing waits for ever.
  void WatchDaemon();
  // Progress thread, every kPortCheckMs: a port whose state changed (its
  // link came up or went down) is told to the clients (IBV_EVENT_PORT_ACTIVE
  // or IBV_EVENT_PORT_ERR on every verbs context of its device).
  void WatchPorts();
  // The clients registered so far (acquire: each one is fully registered).
  size_t client_count() const { return client_count_.load(std::memory_order_acquire); }

  std::mutex mutex_;  // control path
  bool loaded_ = false;
  bool config_ok_ = false;
  std::atomic<uint64_t> config_loads_{0};
  runtime::UroceConfig config_;
  std::unique_ptr<Runtime> runtime_;
  bool start_failed_ = false;
  // In a forked child: the parent had started EAL (so the child has EAL's
  // memory but none of its threads: engines are polled inline).
  bool forked_after_eal_ = false;
  // In a forked child that cannot have a runtime of its own (the parent's
  // was process-private, or EAL's memory is shared with it): why. The
  // devices stay listed; opening one fails with ENODEV and this message.
  std::string refused_after_fork_;
  // Attached to a daemon: EAL's memory was made private after EAL started
  // (pmd::MakeEalMemoryPrivate), so that a forked child's is its own.
  bool eal_memory_private_ = false;
  // This process started EAL (not the application before it), so its
  // runtime directory is this process's to remove at exit.
  bool eal_started_here_ = false;
  bool inline_ = true;
  unsigned idle_us_ = 50;
  std::unique_ptr<host::DaemonSession> daemon_;  // attached mode only
  bool daemon_gone_ = false;                     // progress thread only
  PeerWatch peers_;

  // ProgressOf's, never deleted (a cq object may outlive everything else).
  std::vector<EngineProgress*> engine_progress_;  // mutex_

  std::array<ProgressClient*, kMaxProgressClients> clients_{};
  std::atomic<size_t> client_count_{0};
  std::mutex clients_mutex_;  // AddProgressClient

  std::atomic<unsigned> armed_{0};
  // Inline mode: polls by application threads (ProgressFromPoll). While it
  // moves, the application drives the engines itself and the progress thread
  // stays out of its way (on a machine with as many busy threads as cores,
  // a second spinning thread only takes time slices from the one that polls).
  std::atomic<uint64_t> app_polls_{0};
  // Inline mode: the frames those polls moved (runtime/progress_pacer.h).
  std::atomic<uint64_t> app_moved_{0};
  std::atomic<bool> blocking_{false};  // NoteBlocking, until the next poll
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> wakes_{0};  // WakeProgress calls

  // WatchPorts: the state each device's port was last told as (1 active).
  std::vector<uint8_t> port_active_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool shut_down_ = false;
};

}  // namespace uroce::runtime
