// The engine's configuration, counters and the plain types of its interface
// (QP creation attributes, async events, address handles). Split from
// engine.h so that the engine's stages (engine_core.h, requester.h, ...) can
// use them without the Engine class; engine.h includes this header, so its
// users see these names without including it.
#pragma once

#include <infiniband/verbs.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "congestion/congestion_control.h"
#include "transport/completion_queue.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/packet_io.h"
#include "transport/peer_memory.h"
#include "transport/qp_state.h"
#include "transport/queue_pair.h"
#include "transport/shared_receive_queue.h"

namespace uroce::transport {

// Congestion control (congestion/, docs/congestion.md), for the reliable
// QPs' requesters (RC, XRC initiators).
struct CongestionConfig {
  // Every QP's algorithm (congestion/algorithms.h), unless its service level
  // (ibv_ah_attr.sl, IBTA 9.6.1.3) has one of its own, as NICs enable
  // DCQCN per priority. "none": no object, no cost.
  std::string algorithm = "none";
  std::array<std::string, 16> algorithm_by_sl;  // empty: `algorithm`
  // Line rate, floor and target delay; the MTU and window are each QP's.
  congestion::CongestionParams params;
  // The notification point (DCQCN's receiver): a packet that arrives marked
  // CE (RFC 3168) is answered with a CNP to its sender, at most one per QP
  // per interval, as NICs limit them. 0: never send CNPs.
  uint64_t cnp_interval_ns = 50'000;
  // The DSCP CNPs leave with (the traffic class's upper six bits), so that
  // switches give them a high priority as NICs ask (mlx5's default, 48).
  uint8_t cnp_dscp = 48;

  const std::string& AlgorithmFor(uint8_t sl) const {
    const std::string& own = algorithm_by_sl[sl % algorithm_by_sl.size()];
    return own.empty() ? algorithm : own;
  }
};

struct EngineConfig {
  MacAddress mac{};
  // The GID table (ibv_query_gid): RoCEv2 GIDs, IPv4-mapped or IPv6.
  std::vector<Gid> gids;
  uint32_t port_mtu = 1500;      // Ethernet MTU of the port
  rte_mempool* tx_pool = nullptr; // frames the engine builds come from here
  PacketIo* io = nullptr;         // the wire
  // Processes on this host whose memory a large message may be read from
  // (transport/peer_memory.h, transport/pull_descriptor.h): an RC SEND or
  // WRITE of `pull_min_bytes` or more to such a process leaves as one pull
  // descriptor (0: never), and one from such a process is copied with one
  // read. Null: every message goes as packets. A port of local links
  // (host/local_links.h) is always given here too, pull_min_bytes 0 or
  // not: frames from another process come over it in link form
  // (transport/link_frame.h), which only PeerMemory::LinkFrame tells.
  PeerMemory* peer_memory = nullptr;
  uint32_t pull_min_bytes = 16384;
  uint32_t max_qps = 1024;
  // Reliability knobs (defaults follow Linux rxe): an ACK request at least
  // every `ack_request_every` packets, at most `max_unacked_packets` packets
  // outstanding per QP.
  uint32_t ack_request_every = 64;
  uint32_t max_unacked_packets = 128;
  uint16_t rx_burst = 32;
  uint32_t per_qp_packet_budget = 32;  // packets one QP may send per Poll
  uint32_t atomic_replay_entries = 16; // atomics remembered for duplicates
  // Retransmission from the measured round trip (transport/retransmit_timer.h).
  RetransmitTimerConfig retransmit;
  // Selective retransmission with peers that offer it too
  // (kBthSelectiveRetransmission, transport/reorder_window.h): `reorder_windows`
  // QPs at a time may hold packets that arrive after a gap, at most
  // `reorder_max_held` packets in all. Off: go-back-N with every peer.
  bool selective_retransmission = true;
  uint32_t reorder_windows = 64;
  uint32_t reorder_max_held = 1024;
  // Virtual time in nanoseconds, owned by a test, which advances it between
  // polls so that runs replay exactly. The engine only reads it, where it
  // would read the TSC. Null: the TSC. Data, not a callback: the datapath
  // calls no hook for the time.
  const uint64_t* virtual_now_ns = nullptr;
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
  // The RNR storm ([impair] rnr_storm): an RC request that needs a receive
  // finds none with this probability and is answered with an RNR NAK, so
  // that the application's RNR handling runs. Decided by a generator
  // seeded with rnr_storm_seed (transport/impairment.h).
  double rnr_storm = 0;
  uint64_t rnr_storm_seed = 1;
  CongestionConfig congestion;
};

struct EngineCounters {
  uint64_t rx_frames = 0, tx_frames = 0, rx_bytes = 0, tx_bytes = 0;
  uint64_t rx_non_roce = 0, rx_parse_errors = 0, rx_icrc_errors = 0, rx_unknown_qp = 0, rx_dropped = 0;
  uint64_t tx_alloc_failures = 0, tx_build_errors = 0, tx_queue_full_polls = 0;
  uint64_t retransmits = 0, timeouts = 0, naks_sent = 0, naks_received = 0;
  uint64_t rnr_naks_sent = 0, rnr_naks_received = 0, out_of_sequence = 0, duplicates = 0;
  uint64_t rto_expiries = 0, tail_probes = 0;  // as QpCounters
  uint64_t held_packets = 0, placed_ahead = 0, selective_resends = 0;  // as QpCounters
  // Packets after a gap a selective QP could not hold (no free window, or
  // the pool's bound reached): dropped as on go-back-N.
  uint64_t reorder_full = 0;
  uint64_t tx_raw_frames = 0;  // frames from QueueRawFrame (ARP, ND)
  uint64_t tx_stage_full = 0;  // a frame waited: the transmit stage had no room
  // RC/UC frames whose IP addresses are not the QP's path, and frames whose
  // P_Key is not ours: counted and dropped (IBTA 9.6.1.1, 10.9.3).
  uint64_t rx_path_mismatch = 0, rx_bad_pkey = 0;
  // XRC requests whose XRCETH names no XRC SRQ of the target QP's domain
  // (or not the one of the message in progress): counted, then NAKed or
  // dropped (Responder::SelectXrcSrq).
  uint64_t rx_bad_xrc_srq = 0;
  // Frames to our own GIDs, handed from transmit to receive (also counted in
  // tx_frames and, when received, rx_frames; never in the port's counters).
  uint64_t loopback_frames = 0;
  // RNR NAKs of the RNR storm (EngineConfig::rnr_storm), also in rnr_naks_sent.
  uint64_t rnr_storm_naks = 0;
  // Congestion control: CNPs sent (for packets that arrived marked CE) and
  // received (for our QPs), as QpCounters; CNPs for a QP without an
  // algorithm, or from elsewhere than its peer, are counted and ignored;
  // times a requester waited on its pace.
  uint64_t cnps_sent = 0, cnps_received = 0, cnps_ignored = 0, paced_waits = 0;
  // Frames that arrived marked CE.
  uint64_t rx_ce_marked = 0;
  // Pull descriptors (EngineConfig::peer_memory): messages sent as one, and
  // received and copied (with their bytes); received ones refused before
  // any check of the request (not from a process we may read: dropped), and
  // ones whose copy failed (the sender named memory it does not have: the
  // request fails as invalid).
  uint64_t pulls_sent = 0, pulls_received = 0, pull_bytes = 0, pulls_refused = 0, pull_failures = 0;
  // Staged chunks through a link's payload area (transport/pull_descriptor.h):
  // sent (resends too), received and copied, their bytes, refused (not from a
  // link, not a request to an RC QP), failed (the chunk was not what the
  // descriptor said: the QP fails), and waits for a free chunk.
  uint64_t staged_sent = 0, staged_received = 0, staged_bytes = 0, staged_refused = 0, staged_failures = 0;
  uint64_t stage_waits = 0;
  // ACKs as words in a local link (transport/link_ack.h): stored by our
  // responder instead of an ACK packet, and taken by our requester.
  uint64_t link_acks_sent = 0, link_acks_received = 0;
};

// One QP as the counters see it (Engine::QpStatsSnapshot).
struct QpStats {
  uint32_t qpn = 0;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_state state = IBV_QPS_RESET;
  uint32_t dest_qpn = 0;
  QpCounters counters;
  // Reliable QPs: the smoothed RTT, its variance and the RTO now, in
  // nanoseconds (0 before the first sample).
  uint64_t srtt_ns = 0, rttvar_ns = 0, rto_ns = 0;
  // How each half recovers loss with its peer: selective (both sides offer
  // it) or go-back-N.
  bool requester_selective = false, responder_selective = false;
  // Congestion control: the algorithm ("none"), its rate in Mbit/s (0: not
  // paced) and window in packets (0: the QP's own), as they stand.
  std::string congestion = "none";
  uint64_t congestion_rate_mbps = 0;
  uint32_t congestion_window = 0;
};

// The reliable connected services: RC, and XRC's two halves (an XRC
// initiator is an RC requester without a receive side, an XRC target an RC
// responder without a send side; IBTA annex A14, XRC).
inline bool IsReliable(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

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
  // IBV_QPT_XRC_RECV: the XRC domain (Engine::CreateXrcd) whose XRC SRQs it
  // delivers to; it has no PD, CQs or queues of its own.
  uint32_t xrcd = 0;
  // Where the send and receive rings' memory comes from (a verbs parent
  // domain's allocators); the heap when empty.
  RingAllocator allocator;
};

// A QP whose queues share one CQ and have the same depth and SGE count each
// way, the set-up most tests and the harness ask for.
inline QpInitAttr OneCqQpInit(ibv_qp_type type, PdHandle pd, CompletionQueue* cq, uint32_t max_wr, uint32_t max_sge) {
  QpInitAttr init;
  init.type = type;
  init.pd = pd;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = max_wr;
  init.cap.max_recv_wr = max_wr;
  init.cap.max_send_sge = max_sge;
  init.cap.max_recv_sge = max_sge;
  return init;
}

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

}  // namespace uroce::transport
