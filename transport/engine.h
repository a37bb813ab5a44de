// The uroce engine: the software RDMA NIC. It owns every QP's transport state
// and moves packets between the QPs and one wire (a PacketIo).
//
// Fast path (no allocation, no lock, no system call):
//   PostSend / PostRecv / PollCq  - any application thread; they touch only
//                                   the QP's work rings and the CQ ring.
//   Poll                          - the engine thread (a pinned lcore), or,
//                                   in inline mode, whichever thread polls a
//                                   CQ: one burst of receive, transmit, timers.
// Control path (any thread): PDs, MRs, CQs, QPs, AHs. A control call waits for
// the end of the current Poll (the "progress token"), applies its change and
// returns: it never races the data path.
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
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/completer.h"
#include "transport/completion_queue.h"
#include "transport/completions.h"
#include "transport/engine_core.h"
#include "transport/engine_types.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/object_tables.h"
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

namespace uroce::transport {

class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- Control path (any thread) ----
  StatusOr<PdHandle> AllocPd();
  Status DeallocPd(PdHandle pd);
  StatusOr<MrKeys> RegMr(PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access);
  Status DeregMr(uint32_t lkey);
  // ibv_rereg_mr(3): new PD, range and access for the region; keys unchanged.
  Status ReregMr(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access);
  // ibv_advise_mr(3): whether [addr, addr+length) is inside the region of
  // `lkey` in `pd` with `access` (the table is read as the engine reads it).
  MrCheck CheckLocalMr(uint32_t lkey, PdHandle pd, uint64_t addr, uint64_t length, int access) const;
  // ibv_alloc_mw(3) / ibv_dealloc_mw(3): a window of `type` in `pd` and its
  // first rkey; binding it is a work request (PostSend, IBV_WR_BIND_MW).
  StatusOr<uint32_t> AllocMw(PdHandle pd, int type);
  Status DeallocMw(uint32_t rkey);
  // `allocator`: where the ring's memory comes from (a verbs parent
  // domain's allocators); the heap when empty. Likewise for SRQs and QPs
  // (QpInitAttr::allocator).
  StatusOr<CompletionQueue*> CreateCq(uint32_t min_entries, RingAllocator allocator = {});
  Status DestroyCq(CompletionQueue* cq);
  // ibv_resize_cq(3): EINVAL-class errors for a size out of range, a CQ with
  // libfabric sinks, or more completions waiting than the new size holds.
  Status ResizeCq(CompletionQueue* cq, uint32_t min_entries);
  // Sends `cq`'s completions on to a libfabric CQ and/or counter (cq layer);
  // either may be null. The sinks must outlive the attachment.
  Status AttachCompletionSinks(CompletionQueue* cq, cq::CompletionSink* cq_sink, cq::CompletionSink* counter_sink);
  StatusOr<SharedReceiveQueue*> CreateSrq(PdHandle pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                                          const RingAllocator& allocator = {});
  Status DestroySrq(SharedReceiveQueue* srq);
  // ibv_modify_srq(3) IBV_SRQ_MAX_WR: room for `max_wr` receives from now on,
  // those posted kept in order (posters wait meanwhile). InvalidArgument
  // above the device's 16384 or below the receives posted; ResourceExhausted
  // when a parent domain's allocator gives no memory. Control path.
  Status ResizeSrq(SharedReceiveQueue* srq, uint32_t max_wr);
  // XRC domains (IBTA annex A14, XRC; ibv_open_xrcd(3)): a number that XRC SRQs
  // and XRC target QPs share. Destroying one that an SRQ or QP still uses is
  // kBusy.
  StatusOr<uint32_t> CreateXrcd();
  Status DestroyXrcd(uint32_t xrcd);
  // An XRC SRQ (IBV_SRQT_XRC): a basic SRQ of `pd` that also belongs to
  // `xrcd`, completes its receives on `cq`, and has a 24-bit number
  // (SharedReceiveQueue::srqn) that XRC initiators put in their XRCETHs.
  StatusOr<SharedReceiveQueue*> CreateXrcSrq(PdHandle pd, uint32_t xrcd, CompletionQueue* cq, uint32_t max_wr,
                                             uint32_t max_sge, uint32_t limit, const RingAllocator& allocator = {});
  StatusOr<QueuePair*> CreateQp(const QpInitAttr& init);
  // A QP that is not (or no longer) this engine's is refused with
  // kInvalidArgument, never touched. kAnyQpn: any QPN; otherwise the QP must
  // also have that QPN, so that a holder of an old pointer (the connection
  // manager) does not take a new QP made at a destroyed one's address for it.
  static constexpr uint32_t kAnyQpn = UINT32_MAX;
  Status ModifyQp(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn = kAnyQpn);
  // To the error state for a reason the consumer did not ask for (the
  // peer's process ended): as ModifyQp to IBV_QPS_ERR, and the flush raises
  // IBV_EVENT_QP_FATAL, as the engine's own fatal errors do. A consumer's
  // ModifyQp to ERR raises no event.
  Status FailQp(QueuePair* qp, uint32_t expected_qpn = kAnyQpn);
  Status QueryQp(QueuePair* qp, ibv_qp_attr* attr, ibv_qp_init_attr* init) const;
  Status DestroyQp(QueuePair* qp);
  StatusOr<uint32_t> CreateAh(PdHandle pd, const ibv_ah_attr& attr);
  // An address handle to a MAC the caller already knows (the source MAC of a
  // frame it answers): no neighbour lookup, no resolution, never waits. For
  // the receive path of the connection manager, which must not resolve
  // (a spoofed MAD would make it wait for ARP).
  StatusOr<uint32_t> CreateAhToMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress& dmac);
  Status DestroyAh(uint32_t handle);
  // Static neighbour entry (the pmd layer's ARP/ND fills these too).
  void AddNeighbor(const Gid& ip, const MacAddress& mac);
  // The MAC of `ip`, if the neighbour table has it; our own GIDs (with
  // loopback) are our own MAC.
  bool LookupNeighbor(const Gid& ip, MacAddress* mac) const;
  // Every QP of this engine (for shutdown: flush, then destroy).
  std::vector<QueuePair*> QueuePairs() const;
  // Per-QP counters, copied between two polls (telemetry).
  std::vector<QpStats> QpStatsSnapshot() const;
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
  // ModifyQp and FailQp: `fatal` says whether a move to ERR raises
  // IBV_EVENT_QP_FATAL when the queues are flushed.
  Status ModifyQpAs(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn, bool fatal);
  // control_mutex_ held: `qp` is one of ours (compared, not dereferenced).
  bool OwnsQpLocked(const QueuePair* qp) const;
  // `dmac`: the MAC to use; null: the neighbour table's.
  bool ResolvePath(const ibv_ah_attr& ah, PathInfo* path, std::string* why, const MacAddress* dmac = nullptr) const;
  StatusOr<uint32_t> CreateAhWithMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress* dmac);
  // Control path, no lock held: asks config_.resolve_neighbor for a missing MAC.
  Status ResolveNeighborIfMissing(const ibv_ah_attr& ah, const char* call);

  void RunQp(QueuePair* qp);
  void TakeDoorbells();
  // After RunQp: true if `qp` has nothing left to do and left the list's
  // care (its doorbell cleared; a request posted meanwhile keeps it).
  bool Retire(QueuePair* qp);
  // A poster's side: the engine will run `qp`.
  void RingDoorbell(QueuePair* qp);

  // What the stages share: config, limits, MRs, counters, the poll's time,
  // the engine-thread QP table and ready list, async events.
  EngineCore core_;

  mutable std::mutex control_mutex_;  // control path only
  // PDs, CQs, SRQs, QPs, AHs, neighbours, QPNs (object_tables.h).
  ObjectTables tables_;

  // Posting threads -> engine: QPs whose doorbell they rang (each at most
  // twice at a time, so 2 max_qps entries always suffice: RingDoorbell).
  MpmcRing<QueuePair*> doorbells_;
  bool last_poll_moved_ = false;  // Poll: the clock is read after a poll that moved frames

  // The stages (engine thread), in the order they depend on each other: each
  // works on a QueuePair and the core, and reaches the stages above it in
  // this list through the references it was built with; rx_ dispatches
  // received packets to responder_ and completer_.
  Completions completions_;
  Transmitter tx_;
  Requester requester_;
  Completer completer_;
  Responder responder_;
  Receiver rx_;
};

}  // namespace uroce::transport
