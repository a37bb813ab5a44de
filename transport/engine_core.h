// What the engine's stages share (requester.h, completer.h, responder.h,
// frame_io.h, completions.h): the configuration and limits, the MR table, the
// counters, the time of the current poll, the engine-thread view of the QPs
// and the ready list, and the asynchronous event ring. Each stage holds a
// reference to the one EngineCore of its Engine; no stage reaches the Engine.
//
// Engine thread (or the control path holding the progress token), except
// where a member says otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "transport/engine_types.h"
#include "transport/memory_region.h"
#include "transport/mpmc_ring.h"
#include "transport/qp_state.h"
#include "transport/queue_pair.h"

namespace uroce::transport {

struct EngineCore {
  explicit EngineCore(const EngineConfig& engine_config);
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // The time of the current poll: the clock is read once per Poll (issue
  // 16: it was read per QP and per timer, through a std::function hook).
  // Only the poll's own path (receive, requester, completer) asks for it.
  uint64_t Now() const { return now_ns; }
  QueuePair* LookupQp(uint32_t qpn) const {
    QueuePair* qp = qp_table[qpn % config.max_qps];
    return (qp != nullptr && qp->qpn == qpn) ? qp : nullptr;
  }
  // `gid` is one of ours and loopback is on.
  bool IsLoopbackGid(const Gid& gid) const;
  // Ready list (busy_qps): engine thread, or the control path holding the
  // progress token.
  void MarkBusy(QueuePair* qp) {
    if (qp->busy) return;
    qp->busy = true;
    busy_qps.push_back(qp);
  }

  EngineConfig config;
  QpLimits limits;
  MemoryRegionTable mrs;
  // Held by Poll, and by a control call between two polls (ProgressToken).
  mutable std::atomic<bool> progress_busy{false};
  uint64_t now_ns = 0;  // Poll sets it (Now)
  EngineCounters counters;

  // Engine-thread view of the QPs (published with release by the control path
  // under the progress token).
  std::vector<QueuePair*> qp_table;  // indexed by qpn % max_qps
  // QPs with work (posted requests, requests in flight, READ responses to
  // send, a flush): the only ones a poll runs, so idle QPs cost nothing.
  std::vector<QueuePair*> busy_qps;
  std::vector<CompletionQueue*> forwarding_cqs;
  // Any thread pops (Engine::NextAsyncEvent); the engine thread pushes.
  MpmcRing<AsyncEvent> async_events{256};
};

// The progress token: whoever holds it may touch engine-thread state. Poll
// takes it with one compare-exchange (never waits); a control call waits for
// it, which is between two polls.
class ProgressToken {
 public:
  // Control path: waits until the token is free.
  explicit ProgressToken(const EngineCore& core);
  ~ProgressToken();
  ProgressToken(const ProgressToken&) = delete;
  ProgressToken& operator=(const ProgressToken&) = delete;

 private:
  const EngineCore& core_;
};

}  // namespace uroce::transport
