#include "runtime/peer_watch.h"
#include "pmd/log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace uroce::runtime {
namespace {

// A QP with a peer: RTR and after, until the error state.
bool IsConnectedState(ibv_qp_state state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD || state == IBV_QPS_SQE;
}

}  // namespace

void PeerWatch::Watch(const WatchedQp& w) {
  if (daemon_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  unconnected_.push_back(w);
}

void PeerWatch::Unwatch(const transport::QueuePair* qp) {
  if (daemon_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  ForgetLocked(qp);
}

void PeerWatch::ForgetLocked(const transport::QueuePair* qp) {
  unconnected_.erase(std::remove_if(unconnected_.begin(), unconnected_.end(),
                                    [qp](const WatchedQp& w) { return w.qp == qp; }),
                     unconnected_.end());
  DropPeerLocked(qp);
}

void PeerWatch::NoteConnectedLocked(const WatchedQp& w, const transport::Gid& dest, uint32_t dest_qpn) {
  unconnected_.erase(std::remove_if(unconnected_.begin(), unconnected_.end(),
                                    [&w](const WatchedQp& u) { return u.qp == w.qp; }),
                     unconnected_.end());
  // Only peers on this host: a remote peer's daemon does not know our
  // process (its QP ends by retry exhaustion, as with any NIC).
  const std::vector<transport::Gid>& ours = config_->endpoints[w.device].gids;
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

void PeerWatch::DropPeerLocked(const transport::QueuePair* qp) {
  const uint32_t qpn = qp->qpn;
  auto it = peers_.find(qpn);
  if (it == peers_.end() || it->second.watched.qp != qp) return;
  peers_.erase(it);
  daemon_->UnregisterPeer(qpn);
}

void PeerWatch::NoteQpModified(const WatchedQp& w, const ibv_qp_attr& attr, int mask) {
  if (daemon_ == nullptr || !(mask & IBV_QP_STATE)) return;
  std::lock_guard<std::mutex> lock(mutex_);
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

void PeerWatch::Check() {
  std::vector<std::array<uint32_t, 3>> lost;
  CheckLocked(&lost);
  if (lost.empty()) return;
  // Their rdma_cm connections end with DISCONNECTED, as when the kernel's
  // rdma_cm sends DREQ for a process that exits: rping and the like wait for
  // that event, not for flushed completions. After mutex_: the CM's
  // event sinks may take it.
  std::function<void(size_t, uint32_t, uint32_t)> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    hook = peer_gone_hook_;
  }
  if (!hook) return;
  for (const auto& l : lost) hook(l[0], l[1], l[2]);
}

void PeerWatch::CheckLocked(std::vector<std::array<uint32_t, 3>>* lost) {
  std::lock_guard<std::mutex> lock(mutex_);
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
    UROCE_LOG(ERR, kRuntime,
                 "%u QP(s) lost their peer on this host, whose process ended: they move to the error state "
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

void PeerWatch::ForgetParentAfterFork() {
  new (&mutex_) std::mutex();
  new (&hook_mutex_) std::mutex();
  daemon_ = nullptr;
  config_ = nullptr;
  peers_.clear();
  unconnected_.clear();
}

}  // namespace uroce::runtime
