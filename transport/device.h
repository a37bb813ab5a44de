// Device: the engine's control path, the verbs objects a NIC's driver
// creates and destroys (PDs, MRs and windows, CQs, SRQs, XRC domains, QPs and
// their state machine, address handles, the neighbour table). Engine is the
// façade that forwards to it (engine.h); the data path never calls it.
//
// Control path (any thread): calls serialize on control_mutex_, and take the
// progress token (ProgressToken) for whatever the engine thread also reads
// (the QP table, the ready list, the AH table, memory regions). device.cc
// holds the object calls, modify_qp.cc the QP state machine's transitions.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/ring.h"
#include "common/status.h"
#include "transport/completion_queue.h"
#include "transport/engine_core.h"
#include "transport/engine_types.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/object_tables.h"
#include "transport/queue_pair.h"
#include "transport/responder.h"
#include "transport/shared_receive_queue.h"

namespace uroce::transport {

class Device {
 public:
  // `responder`: a destroyed QP leaves its ACK list. `doorbells`: the QPs
  // posters queued for the engine, drained before a QP is destroyed.
  Device(EngineCore& core, Responder& responder, MpmcRing<QueuePair*>& doorbells);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

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


  // The AH table, which the requester reads for UD sends (engine thread;
  // changed only under the progress token).
  const std::vector<AddressHandle>& address_handles() const { return tables_.ahs; }

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


  EngineCore& core_;
  Responder& responder_;
  MpmcRing<QueuePair*>& doorbells_;
  mutable std::mutex control_mutex_;
  // PDs, CQs, SRQs, QPs, AHs, neighbours, QPNs (object_tables.h).
  ObjectTables tables_;
};

}  // namespace uroce::transport
