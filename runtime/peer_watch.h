// Attached to a uroce daemon (isolation between processes, docs/daemon.md):
// the daemon learns which of this process's RC/UC/XRC QPs are connected to
// QPs on the host (PEER/UNPEER records, control path only). When such a
// peer's process ends, the daemon says so (PEER_GONE) and the progress
// thread moves our QP to the error state: its work completes as flushed and
// an IBV_EVENT_QP_FATAL follows, as when a NIC's QP fails. QPs that the
// connection manager moves (rdma_cm, libfabric's msg endpoints) go through
// RTR inside the engine, past ibv_modify_qp(3); the progress thread finds
// them within kDaemonCheckMs (runtime/process.cc).
//
// A QP listed here (watched or with a record) is not destroyed: its owner
// takes it out first (Unwatch), under this object's lock.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "host/daemon_client.h"
#include "runtime/config.h"
#include "transport/engine.h"

namespace uroce::runtime {

// An RC/UC QP of ours whose peer the daemon may have to know: a verbs QP or
// a libfabric endpoint's, by its engine objects.
struct WatchedQp {
  transport::Engine* engine = nullptr;
  transport::QueuePair* qp = nullptr;
  size_t device = 0;  // the runtime's device index (uroceN)
};

class PeerWatch {
 public:
  // device, our QPN, the lost peer's QPN.
  using PeerGoneHook = std::function<void(size_t device, uint32_t qpn, uint32_t dest_qpn)>;

  // Attached mode starts here (once the configuration came from `daemon`);
  // until then, and in process-private mode, every call below does nothing.
  // `config` gives each device's GIDs (a peer is on this host when its GID is
  // one of ours).
  void Attach(host::DaemonSession* daemon, const runtime::UroceConfig* config) {
    daemon_ = daemon;
    config_ = config;
  }
  // Called for every QP of ours whose peer's process on the host ended
  // (after the QP moved to ERR), from the progress thread, no lock held. Set
  // once, before it is used (the connection managers' rdma_cm DISCONNECTED).
  void SetPeerGoneHook(PeerGoneHook hook) {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    peer_gone_hook_ = std::move(hook);
  }

  // A connected-type QP was made: watched until it is seen connected.
  void Watch(const WatchedQp& w);
  // Before the engine destroys `qp`: its record goes (UNPEER).
  void Unwatch(const transport::QueuePair* qp);
  // After ibv_modify_qp(3) of a connected-type QP succeeded with these
  // attributes (IBV_QP_STATE in `mask`).
  void NoteQpModified(const WatchedQp& w, const ibv_qp_attr& attr, int mask);
  // Progress thread: PEER_GONE notifications to the error state (then the
  // hook), and QPs connected without ibv_modify_qp(3) to PEER records.
  void Check();

  // pthread_atfork(3) child: only this thread exists; the lock is made anew
  // and the parent's records are forgotten (the daemon session is the
  // parent's and is let go of by Process).
  void ForgetParentAfterFork();

 private:
  struct PeerOf {
    WatchedQp watched;
    uint32_t dest_qpn = 0;
  };
  // mutex_ held: the QPs moved to ERR, as {device, qpn, dest_qpn}.
  void CheckLocked(std::vector<std::array<uint32_t, 3>>* lost);
  // mutex_ held: `w` is connected to `dest`:`dest_qpn` (RTR or later).
  void NoteConnectedLocked(const WatchedQp& w, const transport::Gid& dest, uint32_t dest_qpn);
  // mutex_ held: forget the PEER record of `qp`, if it has one (UNPEER).
  void DropPeerLocked(const transport::QueuePair* qp);
  void ForgetLocked(const transport::QueuePair* qp);

  host::DaemonSession* daemon_ = nullptr;  // attached mode only
  const runtime::UroceConfig* config_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<uint32_t, PeerOf> peers_;  // by our QPN
  // RC/UC QPs not seen connected yet: the progress thread looks whether the
  // connection manager moved them (one atomic load each per look).
  std::vector<WatchedQp> unconnected_;
  std::mutex hook_mutex_;
  PeerGoneHook peer_gone_hook_;
};

}  // namespace uroce::runtime
