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
#include "transport/completion_queue.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/packet_builder.h"
#include "transport/packet_fields.h"
#include "transport/packet_io.h"
#include "transport/packet_parser.h"
#include "transport/qp_state.h"
#include "transport/queue_pair.h"
#include "transport/shared_receive_queue.h"

namespace uroce::transport {

struct EngineConfig {
  MacAddress mac{};
  // The GID table (ibv_query_gid): RoCEv2 GIDs, IPv4-mapped or IPv6.
  std::vector<Gid> gids;
  uint32_t port_mtu = 1500;      // Ethernet MTU of the port
  rte_mempool* tx_pool = nullptr; // frames the engine builds come from here
  PacketIo* io = nullptr;         // the wire
  uint32_t max_qps = 1024;
  // Reliability knobs (defaults follow Linux rxe): an ACK request at least
  // every `ack_request_every` packets, at most `max_unacked_packets` packets
  // outstanding per QP.
  uint32_t ack_request_every = 64;
  uint32_t max_unacked_packets = 128;
  uint16_t rx_burst = 32;
  uint32_t per_qp_packet_budget = 32;  // packets one QP may send per Poll
  uint32_t atomic_replay_entries = 16; // atomics remembered for duplicates
  // Clock in nanoseconds. Empty: the TSC. Tests give a virtual clock so that
  // runs replay exactly.
  std::function<uint64_t()> clock_ns;
  // Frames that are not RoCEv2 (ARP, ND, ...) go here; the callee owns the
  // mbuf. Empty: counted and freed. Runs on the engine thread inside Poll, so
  // it must not call the control path; to answer, it hands a frame to
  // QueueRawFrame.
  std::function<void(rte_mbuf*)> non_roce_handler;
  // Control path: called by ModifyQp (with IBV_QP_AV) and CreateAh when the
  // neighbour table has no MAC for the destination GID, before the engine is
  // locked, so that it may wait for an ARP or ND answer (and drive Poll itself
  // in inline mode). Returns OK once AddNeighbor holds the GID; its error
  // fails the call. Empty: a missing entry fails the call at once.
  std::function<Status(const Gid&)> resolve_neighbor;
  // QPNs are drawn at random (a blind peer must not guess a live QP's number,
  // IBTA leaves the choice to the CA); 0: seeded from std::random_device.
  // Tests give a seed so that runs replay.
  uint64_t random_seed = 0;
  // Loopback, as on an RDMA NIC: a destination that is one of `gids` is this
  // engine itself; its frames go from the transmit side straight to the
  // receive side and never reach `io`. Off where something outside the
  // engine must see them (a daemon's switch that owns other processes' QPs
  // behind the same addresses).
  bool loopback = true;
  // QPNs come from [qpn_base, qpn_base + qpn_count) (a range leased from a
  // uroce daemon, which switches frames to processes by destination QPN);
  // qpn_count 0: the whole 24-bit space. QPNs 0 and 1 are never drawn.
  uint32_t qpn_base = 0;
  uint32_t qpn_count = 0;
};

struct EngineCounters {
  uint64_t rx_frames = 0, tx_frames = 0, rx_bytes = 0, tx_bytes = 0;
  uint64_t rx_non_roce = 0, rx_parse_errors = 0, rx_icrc_errors = 0, rx_unknown_qp = 0, rx_dropped = 0;
  uint64_t tx_alloc_failures = 0, tx_build_errors = 0, tx_queue_full_polls = 0;
  uint64_t retransmits = 0, timeouts = 0, naks_sent = 0, naks_received = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0, out_of_sequence = 0, duplicates = 0;
  uint64_t tx_raw_frames = 0;  // frames from QueueRawFrame (ARP, ND)
  uint64_t tx_stage_full = 0;  // a frame waited: the transmit stage had no room
  // RC/UC frames whose IP addresses are not the QP's path, and frames whose
  // P_Key is not ours: counted and dropped (IBTA 9.6.1.1, 10.9.3).
  uint64_t rx_path_mismatch = 0, rx_bad_pkey = 0;
  // Frames to our own GIDs, handed from transmit to receive (also counted in
  // tx_frames and, when received, rx_frames; never in the port's counters).
  uint64_t loopback_frames = 0;
};

// One QP as the counters see it (Engine::QpStatsSnapshot).
struct QpStats {
  uint32_t qpn = 0;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_state state = IBV_QPS_RESET;
  uint32_t dest_qpn = 0;
  QpCounters counters;
};

struct QpInitAttr {
  ibv_qp_type type = IBV_QPT_RC;
  PdHandle pd = 0;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  // 0: the engine picks the QPN. 1: this is the GSI QP (QP1, IBTA 13.5.1), a
  // UD QP for connection management MADs; one per engine. No other value.
  uint32_t fixed_qpn = 0;
};

// Asynchronous events (ibv_get_async_event(3)): QP fatal errors, SRQ limit,
// CQ overrun.
struct AsyncEvent {
  ibv_event_type type = IBV_EVENT_QP_FATAL;
  uint32_t qpn = 0;
  const void* object = nullptr;  // the QueuePair, SharedReceiveQueue or CompletionQueue
};

// An address handle for UD sends.
struct AddressHandle {
  PdHandle pd = 0;
  PathInfo path;
  bool valid = false;
};

// 4.096 us * 2^timeout (IBTA 9.7.6.1.3); 0 for timeout 0 ("infinite").
uint64_t LocalAckTimeoutNs(uint8_t timeout);
// The RNR NAK timer field in nanoseconds (IBTA table 45).
uint64_t RnrTimerNs(uint8_t timer_field);

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
  StatusOr<CompletionQueue*> CreateCq(uint32_t min_entries);
  Status DestroyCq(CompletionQueue* cq);
  // Sends `cq`'s completions on to a libfabric CQ and/or counter (cq layer);
  // either may be null. The sinks must outlive the attachment.
  Status AttachCompletionSinks(CompletionQueue* cq, cq::CompletionSink* cq_sink, cq::CompletionSink* counter_sink);
  StatusOr<SharedReceiveQueue*> CreateSrq(PdHandle pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit);
  Status DestroySrq(SharedReceiveQueue* srq);
  StatusOr<QueuePair*> CreateQp(const QpInitAttr& init);
  // A QP that is not (or no longer) this engine's is refused with
  // kInvalidArgument, never touched. kAnyQpn: any QPN; otherwise the QP must
  // also have that QPN, so that a holder of an old pointer (the connection
  // manager) does not take a new QP made at a destroyed one's address for it.
  static constexpr uint32_t kAnyQpn = UINT32_MAX;
  Status ModifyQp(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn = kAnyQpn);
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
  const EngineConfig& config() const { return config_; }
  QpLimits limits() const { return limits_; }

  // ---- Any thread ----
  // Queues a finished Ethernet frame (an ARP or ND message) for transmission:
  // Poll stages it after its own frames, so the port's TX queue keeps one
  // owner (the engine thread) and a full queue keeps it for the next poll.
  // True: the engine owns `m` now. False: the queue is full; the caller keeps
  // `m`. No allocation, no lock.
  bool QueueRawFrame(rte_mbuf* m) { return raw_tx_.TryPush(m); }

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
  size_t busy_qp_count() const { return busy_qps_.size(); }

  // Counters: engine-wide and per QP (a snapshot; exact between polls).
  EngineCounters counters() const;

  // Any thread, after the completion of a UD receive with this `wr_id` was
  // polled from `qp`'s receive CQ and before the request is posted again: the
  // Ethernet source MAC of the datagram it received. False when unknown
  // (only the GSI QP, QP 1, records them).
  bool UdSourceMac(const QueuePair* qp, uint64_t wr_id, MacAddress* mac) const;

  // Any thread: the next asynchronous event, if there is one.
  bool NextAsyncEvent(AsyncEvent* event) { return async_events_.TryPop(event); }

 private:
  // Held by Poll, and by a control call between two polls.
  class ProgressToken;

  QueuePair* LookupQp(uint32_t qpn) const;
  // control_mutex_ held: `qp` is one of ours (compared, not dereferenced).
  bool OwnsQpLocked(const QueuePair* qp) const;
  // The time of the current poll: the clock is read once per Poll (issue
  // 16: it was read per QP and per timer, through a std::function hook).
  // Only the poll's own path (receive, requester, completer) asks for it.
  uint64_t Now() const { return now_ns_; }
  uint64_t ReadClock() const;
  // `gid` is one of ours and loopback is on.
  bool IsLoopbackGid(const Gid& gid) const;
  // `dmac`: the MAC to use; null: the neighbour table's.
  bool ResolvePath(const ibv_ah_attr& ah, PathInfo* path, std::string* why, const MacAddress* dmac = nullptr) const;
  StatusOr<uint32_t> CreateAhWithMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress* dmac);
  // Control path, no lock held: asks config_.resolve_neighbor for a missing MAC.
  Status ResolveNeighborIfMissing(const ibv_ah_attr& ah, const char* call);

  // Transmit staging: frames built this poll wait here until tx_burst takes
  // them; a full TX queue keeps them for the next poll.
  bool TxRoom(uint32_t frames) const { return tx_count_ + frames <= kTxStage; }
  bool LoopbackRoom() const { return loopback_count_ < kTxStage; }
  void Stage(rte_mbuf* m);
  // Takes the frames that loopback staged last poll into the receive path.
  void ReceiveLoopback();
  void FlushTx();
  void StageRawFrames();

  void ReceiveBurst();
  void RunQp(QueuePair* qp);
  // Ready list (busy_qps_): engine thread, or the control path holding the
  // progress token.
  void MarkBusy(QueuePair* qp) {
    if (qp->busy) return;
    qp->busy = true;
    busy_qps_.push_back(qp);
  }
  void TakeDoorbells();
  // After RunQp: true if `qp` has nothing left to do and left the list's
  // care (its doorbell cleared; a request posted meanwhile keeps it).
  bool Retire(QueuePair* qp);
  // A poster's side: the engine will run `qp`.
  void RingDoorbell(QueuePair* qp);

  // Frame layer (engine_frames.cc).
  // Writes the headers of `fields` (addresses from `path`) into a new mbuf;
  // the caller copies fields.payload_length bytes to *payload, then calls
  // FinishPacket. Null when no buffer is free (the caller retries later).
  rte_mbuf* StartPacket(const PathInfo& path, PacketFields& fields, uint8_t** payload);
  void FinishPacket(rte_mbuf* m);
  // from_loopback: taken from our own loopback stage, not from the port.
  void HandleFrame(rte_mbuf* m, bool from_loopback = false);

  // Requester (requester.cc).
  void RunRequester(QueuePair* qp);
  bool StartSendWqe(QueuePair* qp, SendSlot& slot);
  bool EmitRequestPacket(QueuePair* qp, SendSlot& slot);
  void RestartFrom(QueuePair* qp, Psn psn);
  void RestartOnce(QueuePair* qp, Psn psn);
  // Gathers `length` bytes at `offset` of the request's buffers. Every chunk
  // passes the local key check again (the region may have been deregistered
  // since the request started): false on a failure, nothing copied past it.
  bool CopyFromWqe(const QueuePair* qp, const SendWqe& wqe, uint64_t offset, uint8_t* dest, uint32_t length) const;

  // Completer (completer.cc).
  void HandleAcknowledge(QueuePair* qp, const PacketView& packet);
  void HandleResponse(QueuePair* qp, const PacketView& packet);
  void RunCompleterTimers(QueuePair* qp);
  bool RetireThrough(QueuePair* qp, Psn psn);
  void AcknowledgeThrough(QueuePair* qp, Psn psn);
  bool AckPsnValid(const QueuePair* qp, Psn psn) const;
  void FailOldest(QueuePair* qp, ibv_wc_status status);
  // Scatters READ response or atomic data into the request's buffers, each
  // chunk checked again for local write access; false on a failure.
  bool ScatterToWqe(const QueuePair* qp, const SendWqe& wqe, uint64_t offset, const uint8_t* data,
                    uint32_t length) const;

  // Responder (responder.cc).
  void HandleRequest(QueuePair* qp, const PacketView& packet);
  void HandleDuplicate(QueuePair* qp, const PacketView& packet);
  void HandleUdReceive(QueuePair* qp, const PacketView& packet);
  bool PlaceInRecv(QueuePair* qp, uint64_t offset, const uint8_t* data, uint32_t length, ibv_wc_status* error);
  bool EnqueueResponse(QueuePair* qp, const ReadResponseJob& job);
  void RunReadResponses(QueuePair* qp);
  void HandleDuplicateRead(QueuePair* qp, const PacketView& packet);
  bool RemoteReadAllowed(const QueuePair* qp, const RethFields& reth) const;
  void ListForAck(QueuePair* qp);
  void QueueAck(QueuePair* qp, Psn psn);
  void QueueNak(QueuePair* qp, Psn psn, uint8_t syndrome);
  bool EmitAcknowledge(QueuePair* qp, Psn psn, uint8_t syndrome);
  void SendNak(QueuePair* qp, Psn psn, NakCode code);
  void SendRnrNak(QueuePair* qp, Psn psn);
  void ResponderFatal(QueuePair* qp, Psn psn, NakCode code, ibv_wc_status recv_status);
  void SendPendingAcks();

  // Completions (engine thread).
  void CompleteSend(QueuePair* qp, const SendSlot& slot, ibv_wc_status status);
  // `vendor_err`: for IBV_WC_LOC_LEN_ERR, the bytes that did not fit (the cq
  // layer reports them as olen, fi_cq(3)).
  void CompleteRecv(QueuePair* qp, const RecvWqe& wqe, ibv_wc_status status, uint32_t byte_len,
                    ibv_wc_opcode opcode, unsigned wc_flags, uint32_t imm_or_rkey, uint32_t src_qp,
                    uint32_t vendor_err = 0);
  // Moves the QP to ERR and flushes everything outstanding (IBTA 10.3.1.8).
  void EnterError(QueuePair* qp);
  void FlushQueues(QueuePair* qp);
  void RaiseAsync(ibv_event_type type, uint32_t qpn, const void* object);
  // Takes the next receive request for `qp` (its RQ or its SRQ).
  bool TakeRecv(QueuePair* qp, RecvWqe* out);
  void ReturnSendCredit(QueuePair* qp) { qp->send_credits_used.fetch_sub(1, std::memory_order_release); }

  static constexpr uint32_t kTxStage = 512;
  static constexpr uint32_t kMaxPds = 1u << 20;
  static constexpr size_t kMaxNeighbors = 4096;
  static constexpr int kRxBurstsPerPoll = 4;

  EngineConfig config_;
  QpLimits limits_;
  MemoryRegionTable mrs_;
  std::atomic<bool> progress_busy_{false};
  uint64_t now_ns_ = 0;  // Poll sets it (Now)

  mutable std::mutex control_mutex_;  // control path only
  uint32_t next_pd_ = 1;
  std::vector<bool> pd_in_use_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<SharedReceiveQueue>> srqs_;
  std::vector<std::unique_ptr<QueuePair>> qp_storage_;
  std::vector<AddressHandle> ahs_;
  std::vector<std::pair<Gid, MacAddress>> neighbors_;
  std::mt19937_64 random_;  // control path: QPNs

  // Engine-thread view of the QPs (published with release by the control path
  // under the progress token).
  std::vector<QueuePair*> qp_table_;  // indexed by qpn % max_qps
  // QPs with work (posted requests, requests in flight, READ responses to
  // send, a flush): the only ones a poll runs, so idle QPs cost nothing.
  std::vector<QueuePair*> busy_qps_;
  // Posting threads -> engine: QPs whose doorbell they rang (each at most
  // twice at a time, so 2 max_qps entries always suffice: RingDoorbell).
  MpmcRing<QueuePair*> doorbells_;
  std::vector<QueuePair*> ack_list_;
  std::vector<CompletionQueue*> forwarding_cqs_;

  PendingPacket pending_tx_;  // between StartPacket and FinishPacket
  bool pending_loopback_ = false;
  rte_mbuf* tx_stage_[kTxStage];
  uint32_t tx_count_ = 0;
  // Frames to ourselves (PathInfo::loopback), received at the next poll.
  rte_mbuf* loopback_stage_[kTxStage];
  uint32_t loopback_count_ = 0;
  std::vector<rte_mbuf*> rx_burst_;
  EngineCounters counters_;
  MpmcRing<AsyncEvent> async_events_{256};
  MpmcRing<rte_mbuf*> raw_tx_{256};  // QueueRawFrame -> Poll
};

}  // namespace uroce::transport
