// The uroce engine: the software RDMA NIC. It owns every QP's transport state
// and moves packets between the QPs and one wire (a PacketIo).
//
// Fast path (no allocation, no lock, no system call):
//   PostSend / PostRecv / PollCq  - any application thread; they touch only
//                                   the QP's work rings and the CQ ring.
//   Poll                          - the engine thread (a pinned lcore), or,
//                                   in inline mode, whichever thread polls a
//                                   CQ: one burst of receive, transmit, timers.
// Control path (any thread): PDs, MRs, CQs, QPs, AHs, which Engine forwards to
// Device (device.h). A control call waits for the end of the current Poll
// (the "progress token"), applies its change and returns: it never races the
// data path.
//
// Engine is the façade. Behind it each pipeline stage is a class of its own,
// working on a QueuePair and the shared EngineCore (engine_core.h):
// Transmitter (transmitter.h: frames out, the loopback stage), Requester,
// Completer, Responder, Receiver (receiver.h: frames in, dispatch to the
// responder and the completer), and the completion helpers they share
// (completions.h).
#pragma once

#include <infiniband/verbs.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/completer.h"
#include "transport/completion_queue.h"
#include "transport/completions.h"
#include "transport/device.h"
#include "transport/engine_core.h"
#include "transport/engine_types.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/packet_builder.h"
#include "transport/packet_fields.h"
#include "transport/packet_io.h"
#include "transport/packet_parser.h"
#include "transport/qp_state.h"
#include "transport/queue_pair.h"
#include "transport/receiver.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/shared_receive_queue.h"
#include "transport/transmitter.h"
#include "transport/work_request.h"

namespace uroce::transport {

class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- Control path (any thread): Device (device.h) says what each call does ----
  StatusOr<PdHandle> AllocPd() { return device_.AllocPd(); }
  Status DeallocPd(PdHandle pd) { return device_.DeallocPd(pd); }
  StatusOr<MrKeys> RegMr(PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access) {
    return device_.RegMr(pd, addr, length, iova, access);
  }
  Status DeregMr(uint32_t lkey) { return device_.DeregMr(lkey); }
  Status ReregMr(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access) {
    return device_.ReregMr(lkey, pd, addr, length, iova, access);
  }
  MrCheck CheckLocalMr(uint32_t lkey, PdHandle pd, uint64_t addr, uint64_t length, int access) const {
    return device_.CheckLocalMr(lkey, pd, addr, length, access);
  }
  StatusOr<uint32_t> AllocMw(PdHandle pd, int type) { return device_.AllocMw(pd, type); }
  Status DeallocMw(uint32_t rkey) { return device_.DeallocMw(rkey); }
  StatusOr<CompletionQueue*> CreateCq(uint32_t min_entries, RingAllocator allocator = {}) {
    return device_.CreateCq(min_entries, std::move(allocator));
  }
  Status DestroyCq(CompletionQueue* cq) { return device_.DestroyCq(cq); }
  Status ResizeCq(CompletionQueue* cq, uint32_t min_entries) { return device_.ResizeCq(cq, min_entries); }
  Status AttachCompletionSinks(CompletionQueue* cq, cq::CompletionSink* cq_sink, cq::CompletionSink* counter_sink) {
    return device_.AttachCompletionSinks(cq, cq_sink, counter_sink);
  }
  StatusOr<SharedReceiveQueue*> CreateSrq(PdHandle pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                                          const RingAllocator& allocator = {}) {
    return device_.CreateSrq(pd, max_wr, max_sge, limit, allocator);
  }
  Status DestroySrq(SharedReceiveQueue* srq) { return device_.DestroySrq(srq); }
  Status ResizeSrq(SharedReceiveQueue* srq, uint32_t max_wr) { return device_.ResizeSrq(srq, max_wr); }
  StatusOr<uint32_t> CreateXrcd() { return device_.CreateXrcd(); }
  Status DestroyXrcd(uint32_t xrcd) { return device_.DestroyXrcd(xrcd); }
  StatusOr<SharedReceiveQueue*> CreateXrcSrq(PdHandle pd, uint32_t xrcd, CompletionQueue* cq, uint32_t max_wr,
                                             uint32_t max_sge, uint32_t limit, const RingAllocator& allocator = {}) {
    return device_.CreateXrcSrq(pd, xrcd, cq, max_wr, max_sge, limit, allocator);
  }
  StatusOr<QueuePair*> CreateQp(const QpInitAttr& init) { return device_.CreateQp(init); }
  static constexpr uint32_t kAnyQpn = Device::kAnyQpn;
  Status ModifyQp(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn = kAnyQpn) {
    return device_.ModifyQp(qp, attr, mask, expected_qpn);
  }
  Status FailQp(QueuePair* qp, uint32_t expected_qpn = kAnyQpn) { return device_.FailQp(qp, expected_qpn); }
  Status QueryQp(QueuePair* qp, ibv_qp_attr* attr, ibv_qp_init_attr* init) const {
    return device_.QueryQp(qp, attr, init);
  }
  Status DestroyQp(QueuePair* qp) { return device_.DestroyQp(qp); }
  StatusOr<uint32_t> CreateAh(PdHandle pd, const ibv_ah_attr& attr) { return device_.CreateAh(pd, attr); }
  StatusOr<uint32_t> CreateAhToMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress& dmac) {
    return device_.CreateAhToMac(pd, attr, dmac);
  }
  Status DestroyAh(uint32_t handle) { return device_.DestroyAh(handle); }
  void AddNeighbor(const Gid& ip, const MacAddress& mac) { device_.AddNeighbor(ip, mac); }
  bool LookupNeighbor(const Gid& ip, MacAddress* mac) const { return device_.LookupNeighbor(ip, mac); }
  std::vector<QueuePair*> QueuePairs() const { return device_.QueuePairs(); }
  std::vector<QpStats> QpStatsSnapshot() const { return device_.QpStatsSnapshot(); }
  const EngineConfig& config() const { return core_.config; }
  QpLimits limits() const { return core_.limits; }

  // ---- Any thread ----
  // Queues a finished Ethernet frame (an ARP or ND message) for transmission:
  // Poll stages it after its own frames, so the port's TX queue keeps one
  // owner (the engine thread) and a full queue keeps it for the next poll.
  // True: the engine owns `m` now. False: the queue is full; the caller keeps
  // `m`. No allocation, no lock.
  bool QueueRawFrame(rte_mbuf* m) { return tx_.QueueRawFrame(m); }

  // ---- Fast path, any application thread ----
  // Verbs conventions: 0, or a positive errno with *bad_wr at the first
  // request not posted.
  int PostSend(QueuePair* qp, const ibv_send_wr* wr, const ibv_send_wr** bad_wr);
  // One request already in the engine's form (the libfabric endpoint builds
  // it from its iovecs, with no ibv_send_wr between): the same checks as
  // PostSend, then the same publish. 0 or a positive errno (ENOMEM: the send
  // queue is full).
  int PostSendWqe(QueuePair* qp, SendWqe* wqe);
  int PostRecv(QueuePair* qp, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr);
  int PostSrqRecv(SharedReceiveQueue* srq, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr);

  // ---- Engine thread (or the inline poller) ----
  // One round: receive a burst, run timers, let QPs send, transmit. Returns
  // the packets it moved. If another thread is inside Poll, returns 0.
  unsigned Poll();
  // QPs on the ready list (with work a poll will do). From the polling
  // thread, or when no poll runs; for tests and stats.
  size_t busy_qp_count() const { return core_.busy_qps.size(); }

  // Counters: engine-wide and per QP (a snapshot; exact between polls).
  EngineCounters counters() const;

  // Any thread, after the completion of a UD receive with this `wr_id` was
  // polled from `qp`'s receive CQ and before the request is posted again: the
  // Ethernet source MAC of the datagram it received. False when unknown
  // (only the GSI QP, QP 1, records them).
  bool UdSourceMac(const QueuePair* qp, uint64_t wr_id, MacAddress* mac) const;

  // Any thread: the next asynchronous event, if there is one.
  bool NextAsyncEvent(AsyncEvent* event) { return core_.async_events.TryPop(event); }

 private:
  void RunQp(QueuePair* qp);
  void TakeDoorbells();
  // After RunQp: true if `qp` has nothing left to do and left the list's
  // care (its doorbell cleared; a request posted meanwhile keeps it).
  bool Retire(QueuePair* qp);
  // A poster's side: the engine will run `qp`.
  void RingDoorbell(QueuePair* qp);
  // A built request whose operation the QP takes: its limits, then the send
  // queue and the doorbell (PostSend and PostSendWqe).
  int PublishSendWqe(QueuePair* qp, SendWqe* wqe);

  // What the stages share: config, limits, MRs, counters, the poll's time,
  // the engine-thread QP table and ready list, async events.
  EngineCore core_;

  // Posting threads -> engine: QPs whose doorbell they rang (each at most
  // twice at a time, so 2 max_qps entries always suffice: RingDoorbell).
  MpmcRing<QueuePair*> doorbells_;
  bool last_poll_moved_ = false;  // Poll: the clock is read after a poll that moved frames

  // The stages (engine thread) and the control path, in the order they
  // depend on each other: each works on a QueuePair and the core, and
  // reaches those above it in this list through the references it was built
  // with; rx_ dispatches received packets to responder_ and completer_.
  Completions completions_;
  Transmitter tx_;
  Responder responder_;
  Device device_;  // the control path; its AH table is the requester's
  Requester requester_;
  Completer completer_;
  Receiver rx_;
};

}  // namespace uroce::transport
