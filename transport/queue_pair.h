// A queue pair: its configuration, the rings application threads post to, and
// the transport state the engine keeps for it (requester, completer,
// responder, after IBTA vol. 1 chapter 9). Everything below "engine thread
// only" is touched by the engine alone; the control path changes attributes
// only through the Engine, at a safe point between bursts.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/ring.h"
#include "congestion/congestion_control.h"
#include "congestion/pacer.h"
#include "transport/completion_queue.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/retransmit_timer.h"
#include "transport/staged_chunks.h"
#include "transport/wire_types.h"
#include "transport/work_request.h"

namespace uroce::transport {

class SharedReceiveQueue;

// Where a QP's packets go (from ibv_ah_attr; MAC from the neighbour table).
struct PathInfo {
  Gid dgid{};
  Gid sgid{};
  MacAddress dmac{};
  bool ipv6 = false;  // false: IPv4 (both GIDs IPv4-mapped)
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint16_t udp_source_port = 0xC000;
  // The destination is one of this engine's own GIDs: its frames are handed
  // to the engine's own receive path, never to the port (an RDMA NIC's
  // loopback; Engine::ResolvePath decides).
  bool loopback = false;
};

struct QpCaps {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

// One send work request as the requester tracks it until it completes. The
// request itself stays in its send queue slot, which is the window's entry
// too (written once, read in place): `wqe` views it there, from
// when the requester takes it until it retires (Completions::RetireOldestSend
// frees the slot).
struct SendSlot {
  SendWqeView wqe;
  Psn first_psn;
  Psn last_psn;
  uint32_t packets = 0;        // packets of the request (READ: of the response)
  uint64_t bytes_done = 0;     // READ: response bytes placed so far
  bool signaled = false;
  bool started = false;        // segmentation began (PSNs assigned)
  bool read_or_atomic = false;
  bool counted_in_flight = false;  // READ/atomic: counted in reads_in_flight
  bool local_error = false;        // an SGE failed the local key check
  // No packet of it has left as data yet: it may still go as a pull
  // descriptor (transport/pull_descriptor.h). A message is never both, so a
  // responder never holds packets of a message it then takes whole.
  bool pull_allowed = false;
};

struct RequesterState {
  // One entry per send queue slot, circular; positions are the send queue's
  // (send_ring.head() == tail): the request at position p is in the send
  // queue's slot p and tracked in window[p & window_mask].
  std::unique_ptr<SendSlot[]> window;
  uint32_t window_mask = 0;
  uint64_t head = 0;        // oldest WQE not yet retired
  uint64_t tail = 0;        // next position to take from the send queue
  uint64_t next_send = 0;   // WQE being segmented
  uint64_t send_offset = 0; // bytes of next_send already sent (in this pass)
  Psn psn;                  // next PSN to send
  Psn unacked;              // oldest PSN not acknowledged
  Psn sent_limit;           // the PSN after the last one assigned to a request
  Psn sent_high;            // the PSN after the highest one sent so far
  uint32_t reads_in_flight = 0;
  uint32_t packets_since_ack_request = 0;
  uint8_t retries_left = 7;
  uint8_t rnr_retries_left = 7;
  // The local ACK timeout, the RTO and the tail-loss probe.
  RetransmitTimer timer;
  uint64_t rnr_resume_ns = 0;      // after an RNR NAK, wait until then
  bool gap_restart_armed = false;  // see Engine::RestartOnce
  Psn gap_restart_psn;
  // Selective retransmission: the responder's last acknowledgement or
  // response said it holds packets after a gap, so a PSN sequence NAK asks
  // for that PSN alone. The resend waits for the requester's next run
  // (nothing on the receive path sends); one NAKed PSN is resent once per
  // round trip however many NAKs name it.
  bool selective = false;
  bool resend_pending = false;
  Psn resend_psn;
  Psn last_resent_psn;
  uint64_t last_resent_ns = 0;
  // Selective READ: response packets of the oldest READ that arrived after a
  // gap, placed already. Bit k is the packet at PSN read_ahead_from + k, and
  // read_ahead_from is that READ's first missing PSN (bit 0 is never set).
  // A retransmission then asks only for the missing run before the first
  // packet held (Requester::EmitRequestPacket).
  // Packets of later READs are placed the same way while the oldest waits.
  static constexpr uint32_t kReadAheadPackets = 256;
  std::bitset<kReadAheadPackets> read_ahead;
  Psn read_ahead_from;
  // The newest PSN the responder said it executed (an ACK, or a response
  // that acknowledges everything before it), possibly past a READ whose
  // response is still missing: what the requests between may retire through
  // once it completes (Completer::ConsumePlacedReads).
  bool executed_known = false;
  Psn executed_through;
  // ACKs as words in a local link (transport/link_ack.h), while the QP has
  // requests in flight over one: the word last taken (or found when the
  // first request of a run left, so that a word left by an earlier QP of
  // the same numbers is never taken), and the one read before this poll's
  // frames.
  bool link_ack_watched = false;
  uint64_t link_ack_seen = 0;
  uint64_t link_ack_snapshot = 0;
  uint64_t link_ack_read_to = 0;  // PeerMemory::ReadLinkAck
  bool link_ack_snapshot_taken = false;
  // Chunks of this QP's messages staged in a link's payload area and not
  // yet acknowledged (transport/pull_descriptor.h).
  StagedChunks staged;
};

// A READ the responder answers, or a duplicate one it answers again.
struct ReadResponseJob {
  Psn next_psn;
  Psn first_psn;
  // The region is named by key and address, never by a pointer: every
  // response packet checks them again (the region may be deregistered while
  // the response streams).
  uint32_t rkey = 0;
  uint64_t virtual_address = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool atomic = false;    // an atomic acknowledgement, not READ data
  uint64_t original = 0;  // atomics: the value before the operation
  bool duplicate = false; // answers a duplicate request
  PdHandle pd = 0;        // the PD its key is checked in (an XRC target's: its SRQ's)
};

// A READ request the responder accepted, remembered so that a duplicate of
// it (the requester's retry, possibly for the rest of it) can be answered
// again: only what matches a remembered READ is replayed (IBTA 9.7.5.1.1,
// as rxe keeps its responder resources).
struct ReadRecord {
  Psn first_psn;
  uint32_t packets = 0;
  uint32_t rkey = 0;
  uint64_t virtual_address = 0;
  uint32_t length = 0;
  bool valid = false;
};

struct AtomicReplay {
  Psn psn;
  // What the request named, so that a duplicate must name the same (and the
  // region must still allow it) to get the result again.
  uint32_t rkey = 0;
  uint64_t virtual_address = 0;
  uint64_t original = 0;
  bool valid = false;
};

class ReorderWindow;

struct ResponderState {
  Psn expected_psn;
  uint32_t msn = 0;  // messages completed; the AETH carries it modulo 2^24
  bool nak_sent = false;  // one PSN-sequence NAK per gap (IBTA 9.7.5.1.2)
  // Selective retransmission: the requester's last request offered it.
  // Packets after a gap are then held in `reorder` (from the engine's
  // ReorderPool, while the QP holds any) and handled once the gap fills.
  bool selective = false;
  ReorderWindow* reorder = nullptr;
  // ACKs as words in a local link (transport/link_ack.h): the next ACK goes
  // as a packet instead, because it answers a duplicate; and whether this
  // QP holds its entry in the link's area.
  bool ack_as_packet = false;
  bool link_ack_owned = false;
  // SEND in progress.
  bool have_recv = false;
  bool recv_offset_valid = false;  // the receive belongs to a SEND in progress
  RecvWqe recv;
  uint64_t recv_offset = 0;
  uint32_t length_overflow = 0;  // bytes that did not fit, for IBV_WC_LOC_LEN_ERR
  // RDMA WRITE in progress (from the RETH of the first packet). Key and next
  // address, not a pointer: every packet is checked again.
  uint32_t write_rkey = 0;
  uint64_t write_va = 0;
  uint64_t write_remaining = 0;
  uint64_t write_length = 0;
  bool write_in_progress = false;
  // The acknowledgement to send when the transmit stage has room (ACK, or a
  // NAK, which takes precedence: it acknowledges everything before its PSN).
  // Nothing on the receive path stages a frame itself, so a flood of
  // requests cannot overrun the stage; a newer NAK replaces an older one, so
  // a QP sends at most one (RNR) NAK per poll.
  bool ack_pending = false;
  Psn ack_psn;
  uint8_t ack_syndrome = 0;
  bool ack_is_nak() const { return ack_pending && AethFields{ack_syndrome, 0}.kind() != AethKind::kAck; }
  // Which pending acknowledgement says more: a fatal NAK (3: the QP stops)
  // over an RNR NAK (2: wait, then resend) over a PSN sequence NAK (1: resend)
  // over an ACK (0).
  static int AcknowledgeRank(uint8_t syndrome) {
    const AethFields aeth{syndrome, 0};
    switch (aeth.kind()) {
      case AethKind::kAck: return 0;
      case AethKind::kRnrNak: return 2;
      case AethKind::kNak: return aeth.value() == uint8_t(NakCode::kPsnSequenceError) ? 1 : 3;
      default: return 0;
    }
  }
  int pending_rank() const { return ack_pending ? AcknowledgeRank(ack_syndrome) : -1; }
  // READ responses being sent (ring of max_dest_rd_atomic + 1).
  std::vector<ReadResponseJob> reads;  // 2 * max_dest_rd_atomic slots, see EnqueueResponse
  uint32_t reads_head = 0, reads_count = 0, duplicate_jobs = 0;
  // Recent atomics, replayed on duplicates (IBTA 9.7.5.1.1 / o9-23).
  std::vector<AtomicReplay> atomics;
  uint32_t atomics_next = 0;
  // Recent READs, replayed on duplicates (sized with `reads`).
  std::vector<ReadRecord> read_history;
  uint32_t read_history_next = 0;
  // READ responses' data staged in a link's payload area
  // (transport/pull_descriptor.h), until the requester takes it.
  StagedChunks read_staged;
  // The PD the request being handled is checked in: the QP's, or for an XRC
  // target the PD of the XRC SRQ its XRCETH names (IBTA annex A14, XRC: an XRC
  // target QP has no PD of its own).
  PdHandle pd = 0;
  // XRC target: the XRC SRQ of the request being handled, and of the message
  // in progress (every packet of a message must name the same one).
  SharedReceiveQueue* xrc_srq = nullptr;
};

struct QpCounters {
  uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  uint64_t retransmits = 0, timeouts = 0, naks_sent = 0, naks_received = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0, out_of_sequence = 0, duplicates = 0;
  // Expiries of the RTO (retransmissions, no retry spent) and tail-loss
  // probes sent (transport/retransmit_timer.h).
  uint64_t rto_expiries = 0, tail_probes = 0;
  // Selective retransmission: request packets held after a gap, of which
  // WRITE packets placed on arrival (responder); single packets resent for
  // a NAK (requester).
  uint64_t held_packets = 0, placed_ahead = 0, selective_resends = 0;
  // Congestion control: CNPs sent to the peer (its packets arrived marked
  // CE) and received from it.
  uint64_t cnps_sent = 0, cnps_received = 0;
};

class QueuePair {
 public:
  // The rings' slots come from `send_storage` / `recv_storage` when given
  // (SendRingBytes / RecvRingBytes of `caps`), else from the heap.
  QueuePair(uint32_t qpn, ibv_qp_type type, PdHandle pd, CompletionQueue* send_cq, CompletionQueue* recv_cq,
            SharedReceiveQueue* srq, bool sq_sig_all, const QpCaps& caps, RingStorage send_storage = {},
            RingStorage recv_storage = {});
  static size_t SendRingBytes(const QpCaps& caps);
  static size_t RecvRingBytes(const QpCaps& caps);

  // Set at creation; any thread.
  const uint32_t qpn;
  const ibv_qp_type type;
  const PdHandle pd;
  CompletionQueue* const send_cq;
  CompletionQueue* const recv_cq;
  SharedReceiveQueue* const srq;
  const bool sq_sig_all;
  const QpCaps caps;
  // XRC target (IBV_QPT_XRC_RECV): its XRC domain; set before the QP is
  // published, never changed after.
  uint32_t xrcd = 0;

  // Published state: written by the engine (and the control path at safe
  // points), read by posting threads.
  std::atomic<ibv_qp_state> state{IBV_QPS_RESET};

  // Application threads -> engine. Credits keep the rings from overflowing:
  // a post takes one, the engine returns it when the request completes.
  // Slots are sized from `caps` (SendWqePayloadBytes,
  // RecvWqePayloadBytes). A send request keeps its slot until it retires:
  // the send queue is the requester's window (RequesterState).
  StridedRing send_ring;
  StridedRing recv_ring;
  std::atomic<uint32_t> send_credits_used{0};
  std::atomic<uint32_t> recv_credits_used{0};

  // Attributes (control path writes them at safe points; engine reads).
  ibv_qp_attr attr{};
  PathInfo path;
  uint32_t mtu_bytes = 1024;

  // Engine thread only.
  RequesterState req;
  ResponderState resp;
  QpCounters counters;
  // The requester's congestion control (congestion/congestion_control.h):
  // null when the algorithm is "none". Made by the control path when the
  // QP is connected (RTR), dropped at RESET; the transmit side obeys its
  // allowance, pacing with `pacer`.
  std::unique_ptr<congestion::CongestionControl> cc;
  congestion::Pacer pacer;
  // The notification point: no CNP to the peer before this time
  // (CongestionConfig::cnp_interval_ns).
  uint64_t next_cnp_ns = 0;
  bool ack_listed = false;  // on the engine's list of QPs with an ACK to send
  // GSI QP only: the source MAC of each datagram received, by receive slot
  // (wr_id % size); written before the completion is pushed, read by the
  // connection manager after it polled the completion (Engine::UdSourceMac).
  struct UdSource {
    uint64_t wr_id = UINT64_MAX;
    MacAddress mac{};
  };
  std::vector<UdSource> ud_sources;
  bool flush_pending = false;
  bool flush_fatal = false;  // with the flush: IBV_EVENT_QP_FATAL (Engine::FailQp)

  // The engine's ready list (Engine::Poll runs only QPs with work):
  // a poster that finds `doorbell` clear sets it and hands the QP to the
  // engine's ring of QPs with new requests; the engine clears it when the QP
  // has nothing left to do. `busy`: on the engine's list (engine thread only).
  std::atomic<bool> doorbell{false};
  bool busy = false;

  // Engine thread (or a control call holding the progress token): moves the
  // oldest request of the send queue into the window. False when none is
  // posted (credits guarantee the window has room for every posted one).
  bool TakePostedSend();
  // (Re)creates an empty window at the send queue's current position (at
  // creation and on the way to RESET, once the queue is drained).
  void ResetWindow();

  // The bytes this QP's work request storage takes: its send and receive
  // queues and its window (sized from the capabilities).
  size_t WorkRequestBytes() const;
};

}  // namespace uroce::transport
