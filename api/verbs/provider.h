// The process-wide side of uroce's libibverbs.so.1: the configuration named
// by UROCE_CONFIG, the uroce devices it describes, the DPDK runtime (started
// by the first ibv_open_device, once per process, as EAL can only start
// once) and the progress thread.
//
// Where the engine runs (configuration [engine] progress, pmd/config.h):
// - progress = engine: every endpoint's engine spins on its own EAL lcore
//   (like a NIC), started when the first device opens. The progress thread
//   below only turns completions into channel events and async events.
// - progress = inline (the default): there is no engine thread. Every
//   ibv_poll_cq drives one Poll of the engine (a bounded burst), and the
//   progress thread drives it too, so that a program that does not poll
//   (one blocked in ibv_get_cq_event(3) or in read() on a socket while the
//   peer's RDMA WRITEs land, as ib_write_bw's server does) never hangs. The
//   thread spins while it has work or while a CQ is armed, and otherwise
//   sleeps with a bounded exponential backoff ([engine] progress_idle_us).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/verbs/objects.h"
#include "pmd/config.h"
#include "host/daemon_client.h"
#include "runtime/runtime.h"

namespace uroce::verbs {

class Provider {
 public:
  static Provider& Get();
  // Called for every QP of ours whose peer's process on the host ended
  // (after the QP moved to ERR), from the progress thread, no lock held.
  void SetPeerGoneHook(std::function<void(size_t device, uint32_t qpn, uint32_t dest_qpn)> hook) {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    peer_gone_hook_ = std::move(hook);
  }

  // ibv_get_device_list(3): the devices of UROCE_CONFIG, or, without it, of
  // the uroce daemon this process attaches to (UROCE_DAEMON or
  // /run/uroce/uroce.sock). Loaded once; a bad file or no daemon gives no
  // devices and one message.
  const std::vector<Device*>& Devices();

  // Starts EAL and the runtime (once); the engine of `device`'s endpoint.
  // Positive errno on failure (after a message on stderr).
  int Open(Device* device, Context* context);
  // Starts EAL and the runtime (once) without a verbs context: for the
  // libfabric provider (api/fabric). 0 or a positive errno.
  int StartRuntime();
  void Close(Context* context);

  // CQs that may need a completion event (ibv_req_notify_cq(3)).
  void RegisterCq(Cq* cq);
  // A CQ went from disarmed to armed (ReqNotifyCq).
  // Wakes the progress thread: someone waits for a completion event.
  void NoteArmed();
  // An application thread may block now (fi_cq_sread, fi_cntr_wait, a
  // fi_trywait that allowed it): the progress thread drives the engines
  // until that thread polls again, instead of taking it for a poller.
  void NoteBlocking();
  void UnregisterCq(Cq* cq);
  void RegisterContext(Context* context);
  void UnregisterContext(Context* context);

  // Inline mode: one poll of `engine`, the one that owns the CQ polled
  // (ibv_poll_cq, fi_cq_read), and now and then of the others
  // (runtime::Runtime::Progress(polled)); null: every engine. Engine mode:
  // nothing.
  void ProgressFromPoll(const transport::Engine* engine);
  // Inline mode: one poll of `engine` for a control call that must see its
  // frames leave now (rdma_reject); unlike ProgressFromPoll it does not
  // tell the progress thread that an application thread polls. Engine
  // mode: nothing (the engine lcore sends them).
  void PollOnce(const transport::Engine* engine);

  // The application's object for an engine object (async events).
  ibv_qp* QpFor(const transport::QueuePair* qp);
  ibv_srq* SrqFor(const transport::SharedReceiveQueue* srq);
  void RegisterQp(Qp* qp);
  void UnregisterQp(Qp* qp);
  void RegisterSrq(Srq* srq);
  void UnregisterSrq(Srq* srq);

  // Attached to a daemon (isolation between processes): the daemon learns which of
  // our RC/UC QPs are connected to QPs on the host (PEER/UNPEER, control
  // path only), and when such a peer's process ends, the progress thread
  // moves our QP to the error state (its work completes as flushed, an
  // IBV_EVENT_QP_FATAL follows). QPs the connection manager moves (rdma_cm)
  // are found by the progress thread within kDaemonCheckMs.
  // After ibv_modify_qp(3) succeeded with these attributes:
  void NoteQpModified(Qp* qp, const ibv_qp_attr& attr, int mask);
  // Before the engine destroys `qp` (ibv_destroy_qp).
  void ForgetQp(Qp* qp);
  // The same for a QP made past verbs (a libfabric endpoint's, which the
  // connection manager connects): watched from creation (nothing if not
  // attached to a daemon), forgotten before the engine destroys it.
  void WatchQp(transport::Engine* engine, transport::QueuePair* qp, size_t device);
  void UnwatchQp(transport::QueuePair* qp);

  // ibv_query_port(3)'s state of device `device`'s port: ACTIVE once its
  // link is up, or at once where the configuration says so
  // (active_before_link); its link (phys_state) separately. Any thread.
  bool PortActive(size_t device);
  bool PortLinkUp(size_t device);

  bool inline_progress() const { return inline_; }
  runtime::Runtime* runtime() { return runtime_.get(); }
  // The daemon this process is attached to, or null (process-private mode).
  host::DaemonSession* daemon_session() { return daemon_.get(); }
  const pmd::UroceConfig* config() const { return config_ok_ ? &config_ : nullptr; }

  // atexit: stop the thread, flush and shut the runtime down.
  void Shutdown();

 private:
  Provider() = default;
  void LoadConfigOnce();
  int StartRuntimeLocked();
  // pthread_atfork(3)'s child handler. ibv_fork_init(3): a child may not use
  // its parent's verbs objects, but may open a device and make its own. So
  // the child lets go of everything its parent started, without touching
  // it: the runtime (its engines, pools and shared memory stay as copied
  // memory nobody uses), the progress thread (which does not exist in the
  // child), the daemon session (its socket and files are closed, so the
  // parent's session ends with the parent). Attached to a daemon, the
  // child's first use of verbs attaches it anew, as a process of its own.
  // A process-private runtime (UROCE_CONFIG) cannot be started again in the
  // child: its DPDK ports are the parent's.
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
  // Progress thread, daemon attached: PEER_GONE notifications to the error
  // state; QPs connected without ibv_modify_qp (the connection manager's)
  // to PEER records.
  void WatchPeers();
  // peers_mutex_ taken: the QPs moved to ERR, as {device, qpn, dest_qpn}.
  void WatchPeersLocked(std::vector<std::array<uint32_t, 3>>* lost);
  // An RC/UC QP of ours whose peer the daemon may have to know: a verbs QP
  // or a libfabric endpoint's, by its engine objects.
  struct WatchedQp {
    transport::Engine* engine = nullptr;
    transport::QueuePair* qp = nullptr;
    size_t device = 0;  // the runtime endpoint (uroceN)
  };
  static WatchedQp Watched(Qp* qp);
  // peers_mutex_ held: `w` is connected to `dest`:`dest_qpn` (RTR or later).
  void NoteConnectedLocked(const WatchedQp& w, const transport::Gid& dest, uint32_t dest_qpn);
  // peers_mutex_ held: forget the PEER record of `qp`, if it has one (UNPEER).
  void DropPeerLocked(const transport::QueuePair* qp);
  void ForgetLocked(const transport::QueuePair* qp);
  unsigned SignalArmedCqs();
  unsigned PumpAsyncEvents();
  // Progress thread, every kPortCheckMs: a port whose state changed (its
  // link came up or went down) raises IBV_EVENT_PORT_ACTIVE or
  // IBV_EVENT_PORT_ERR on every context of its device.
  void WatchPorts();
  // Queues `event` on `ctx` and counts it on its async_fd.
  static void PostAsyncEvent(Context* ctx, const ibv_async_event& event);

  std::mutex mutex_;  // control path
  bool loaded_ = false;
  bool config_ok_ = false;
  pmd::UroceConfig config_;
  std::vector<Device*> devices_;
  std::unique_ptr<runtime::Runtime> runtime_;
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
  bool inline_ = true;
  unsigned idle_us_ = 50;
  std::unique_ptr<host::DaemonSession> daemon_;  // attached mode only
  bool daemon_gone_ = false;                     // progress thread only

  std::mutex objects_mutex_;  // the lists below
  std::vector<Cq*> cqs_;
  std::vector<Context*> contexts_;
  std::vector<Qp*> qps_;
  std::vector<Srq*> srqs_;
  std::atomic<unsigned> armed_{0};
  // Inline mode: polls by application threads (ProgressFromPoll). While it
  // moves, the application drives the engines itself and the progress thread
  // stays out of its way (on a machine with as many busy threads as cores,
  // a second spinning thread only takes time slices from the one that polls).
  std::atomic<uint64_t> app_polls_{0};
  std::atomic<bool> blocking_{false};  // NoteBlocking, until the next poll
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> wakes_{0};  // WakeProgress calls

  // Attached mode: our QPs' connections to QPs on the host, as the daemon
  // knows them. A QP here (in either) is not destroyed: ibv_destroy_qp and
  // fi_close take it out first (ForgetQp, UnwatchQp), under the same lock.
  struct PeerOf {
    WatchedQp watched;
    uint32_t dest_qpn = 0;
  };
  std::mutex peers_mutex_;
  // The connection managers' (api/verbs/connection_managers): a lost peer's
  // rdma_cm connection ends with DISCONNECTED. Set once, before it is used.
  std::function<void(size_t device, uint32_t qpn, uint32_t dest_qpn)> peer_gone_hook_;
  std::mutex hook_mutex_;
  std::unordered_map<uint32_t, PeerOf> peers_;  // by our QPN
  // RC/UC QPs not seen connected yet: the progress thread looks whether the
  // connection manager moved them (one atomic load each per look).
  std::vector<WatchedQp> unconnected_;

  // WatchPorts: the state each device's contexts were last told (1 active).
  std::vector<uint8_t> port_active_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool shut_down_ = false;
};

// ibv_get_device_guid(3): from the port's MAC (EUI-64, as rxe), network order.
uint64_t DeviceGuid(Device* device);

}  // namespace uroce::verbs
