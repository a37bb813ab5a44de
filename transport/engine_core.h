// What the engine's stages share (transmitter.h, requester.h, completer.h,
// responder.h, receiver.h, completions.h): the configuration and limits, the
// MR table, the counters, the time of the current poll, the engine-thread
// view of the QPs and the ready list, and the asynchronous event ring. Each
// stage holds a reference to the one EngineCore of its Engine; no stage
// reaches the Engine.
//
// Engine thread (or the control path holding the progress token), except
// where a member says otherwise.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/ring.h"
#include "transport/engine_types.h"
#include "transport/memory_region.h"
#include "transport/reorder_window.h"
#include "transport/on_demand_memory.h"
#include "transport/qp_state.h"
#include "transport/queue_pair.h"
#include "transport/shared_receive_queue.h"

namespace uroce::transport {

struct EngineCore {
  explicit EngineCore(const EngineConfig& engine_config);
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // The memory a send request's SGEs name, from byte `offset` of the
  // request on, `length` bytes in all: each piece checked against the MR
  // table with `needed_access` at every use (IBTA 10.6.3.1: ibv_dereg_mr(3)
  // may have ended a region since the request started) and handed to
  // piece(MrCheck how, uint8_t* host, uint32_t bytes), which copies with
  // MrRead/MrWrite(how, ...) and returns false if the copy failed (an
  // implicit on-demand region's page could not be had). False when a check
  // or a piece fails. Empty SGEs name no memory and are skipped; the walk
  // ends with the SGE list.
  // The requester gathers a packet's payload with it, the completer
  // scatters a READ response or an atomic's original value.
  template <typename Piece>
  bool ForEachSgePiece(const QueuePair* qp, const SendWqeView& w, uint64_t offset, uint64_t length,
                       int needed_access, Piece&& piece) const {
    const uint32_t num_sge = w->num_sge;
    if (num_sge == 0) return true;
    uint32_t i = 0;
    Sge sge = w.sge(0);
    while (offset >= sge.length) {
      offset -= sge.length;
      if (++i == num_sge) return true;
      sge = w.sge(i);
    }
    while (length > 0) {
      const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(length, sge.length - offset));
      if (chunk != 0) {
        uint8_t* host = nullptr;
        const MrCheck how = mrs.CheckLocal(sge.lkey, qp->pd, sge.addr + offset, chunk, needed_access, &host);
        if (!MrGranted(how) || !piece(how, host, chunk)) return false;
        length -= chunk;
        offset = 0;
      }
      if (++i == num_sge) break;
      sge = w.sge(i);
    }
    return true;
  }

  // The clock, read at most once per Poll and only when something asks
  // (a TSC read is slow in a VM: one every poll is 13 % of a polling
  // fi_pingpong's CPU, one per QP and per timer far more). Now() is this poll's
  // time, for deadlines being set; TimerNow() may be a few empty polls old
  // (StartPoll), for deadlines being checked: a timer then fires a little
  // late, never early. Only the poll's own path asks.
  uint64_t Now() {
    if (!clock_fresh) ReadClock();
    return now_ns;
  }
  uint64_t TimerNow() const { return now_ns; }
  // Poll, first: TimerNow() stays valid through at most
  // kPollsPerClockRead polls in a row that moved nothing; any poll after
  // one that moved frames reads the clock, as does every poll under a test
  // clock (virtual time: runs replay exactly).
  void StartPoll(bool previous_poll_moved) {
    clock_fresh = false;
    if (previous_poll_moved || config.virtual_now_ns != nullptr || ++polls_since_clock_read >= kPollsPerClockRead) ReadClock();
  }
  QueuePair* LookupQp(uint32_t qpn) const {
    QueuePair* qp = qp_table[qpn % config.max_qps];
    return (qp != nullptr && qp->qpn == qpn) ? qp : nullptr;
  }
  // The XRC SRQ an XRCETH names: null unless `srqn` is an XRC SRQ's number
  // (a peer's number is never trusted further than this lookup).
  SharedReceiveQueue* LookupXrcSrq(uint32_t srqn) const {
    SharedReceiveQueue* srq = xrc_srq_table[srqn % config.max_qps];
    return (srq != nullptr && srq->srqn == srqn) ? srq : nullptr;
  }
  // `qp` leaves the states that take requests, or is destroyed: the request
  // packets it holds after a gap are freed, its window back in the pool.
  void ReleaseHeldPackets(QueuePair* qp) {
    reorder_pool.Give(qp->resp.reorder);
    qp->resp.reorder = nullptr;
  }
  // `gid` is one of ours and loopback is on.
  bool IsLoopbackGid(const Gid& gid) const;
  // Before `qp`'s first request of a run leaves, toward a process over a
  // local link: its ACKs may come as words in the link
  // (transport/link_ack.h), and what the word says now is not one of them
  // (an earlier QP of the same numbers may have left it).
  void WatchLinkAcks(QueuePair* qp);
  // Ready list (busy_qps): engine thread, or the control path holding the
  // progress token.
  void MarkBusy(QueuePair* qp) {
    UROCE_DCHECK(TokenHeldByThisThread());
    if (qp->busy) return;
    qp->busy = true;
    busy_qps.push_back(qp);
  }

  EngineConfig config;
  QpLimits limits;
  MemoryRegionTable mrs;
  // Windows for request packets held after a gap (selective retransmission).
  ReorderPool reorder_pool;
  // Held by Poll, and by a control call between two polls (ProgressToken).
  mutable std::atomic<bool> progress_busy{false};
  // The thread that holds progress_busy, recorded only where UROCE_DCHECKS
  // is on (common/check.h) for UROCE_DCHECK_ENGINE_THREAD; no thread
  // otherwise. Only the holder writes it, and a thread compares it only with
  // itself, so relaxed order suffices.
  mutable std::atomic<std::thread::id> token_owner{};
  void RecordTokenOwner() const {
    if constexpr (kDchecksEnabled) token_owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  void ClearTokenOwner() const {
    if constexpr (kDchecksEnabled) token_owner.store(std::thread::id(), std::memory_order_relaxed);
  }
  bool TokenHeldByThisThread() const {
    return token_owner.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  static constexpr uint32_t kPollsPerClockRead = 32;
  void ReadClock();
  uint64_t now_ns = 0;  // Now, TimerNow
  bool clock_fresh = false;  // now_ns was read in this poll
  uint32_t polls_since_clock_read = 0;
  EngineCounters counters;

  // Engine-thread view of the QPs (published with release by the control path
  // under the progress token).
  std::vector<QueuePair*> qp_table;  // indexed by qpn % max_qps
  // XRC SRQs by number, as qp_table (published under the progress token).
  std::vector<SharedReceiveQueue*> xrc_srq_table;  // indexed by srqn % max_qps
  // QPs with work (posted requests, requests in flight, READ responses to
  // send, a flush): the only ones a poll runs, so idle QPs cost nothing.
  std::vector<QueuePair*> busy_qps;
  std::vector<CompletionQueue*> forwarding_cqs;
  // Any thread pops (Engine::NextAsyncEvent); the engine thread pushes.
  MpmcRing<AsyncEvent> async_events{256};
};

// Puts every QP that posters queued in `doorbells` on `core`'s ready list:
// the poll does so first; destroying a QP does too, so that no pointer to it
// stays in the ring. Engine thread, or the control path holding the token.
inline void TakeRungDoorbells(MpmcRing<QueuePair*>& doorbells, EngineCore& core) {
  QueuePair* qp = nullptr;
  while (doorbells.TryPop(&qp)) core.MarkBusy(qp);
}

// "Engine thread" in the stages' comments means the holder of the progress
// token: Poll, or a control call between two polls. This checks it where
// UROCE_DCHECKS is on.
#define UROCE_DCHECK_ENGINE_THREAD(core) UROCE_DCHECK((core).TokenHeldByThisThread())

// True while this thread holds a ProgressToken (a control call is between
// taking and releasing it). For exit handlers that a signal may run on top
// of such a call: they must not wait for a token (Poll's included, which the
// caller tracks itself).
bool ThisThreadHoldsAControlToken();

// The progress token: whoever holds it may touch engine-thread state. Poll
// takes it with one compare-exchange (never waits); a control call waits for
// it, which is between two polls. Taking it again on the thread that holds
// it would wait for ever; checked builds abort there instead.
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
