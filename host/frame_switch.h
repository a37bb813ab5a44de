// The data path of `uroce daemon`: a switch between the host's uplink (a DPDK
// port) and the shared-memory ports of the processes attached to the daemon.
//
// Every attached process runs its own engine for its own QPs (its memory
// stays in the process) with QPNs from a leased range: slot S (1..254) owns
// QPNs S<<16 .. (S<<16)+0xFFFF. The switch reads the destination QPN of each
// RoCEv2 frame (BTH, IBTA 9.2) and hands the frame to the process that owns
// it, whether the frame came from the wire or from another process on the
// host (frames between processes never touch the wire). Everything to
// another host goes to the uplink.
//
// Isolation: a process may send only as the host (its Ethernet source is the
// uplink's MAC, its IP source one of the uplink's addresses) and, for UD,
// only from a QPN it leased (DETH source QPN) or from QP 1 with CM messages
// of its own connections (their sender's communication ID); it receives only
// frames for its own QPNs and its own connections' CM messages. Frames from the wire are never trusted: malformed or foreign
// frames are counted and dropped, and so are those that claim to come from
// the host itself (one of its addresses or its MAC) or from an address no
// host sends from.
//
// ARP and IPv6 neighbour discovery on the uplink: the switch answers requests
// for the uplink's addresses (it owns them, as uroce's engines do on their
// ports), asks the wire in its own words what the processes ask (only the
// target is theirs: BuildNeighborQuestion), and copies every answer from
// the wire to every process (each learns only answers to its own requests:
// NeighborResolver's strict learning).
//
// When the uplink shares a kernel interface (Options::kernel_neighbors), the
// kernel owns the host's addresses: the switch answers no ARP/ND from the
// wire, and the processes' requests become questions the daemon answers from
// the kernel's neighbour table (TakeNeighborQuestions, AnswerNeighborQuestion).
//
// Connection management MADs (to QP 1, IBTA 12) are routed as well: a REQ
// to the process that listens on its port (rdma_cm's IP service ID, IBTA
// A11), every other CM message to the process whose communication ID it
// names as the receiver's (attached processes draw their IDs from
// slot << 24). A REQ nobody on the host listens for is rejected by the
// switch itself (REJ "invalid service ID"), as a connection manager would.
//
// Threads: one (the daemon's switch loop); Attach and Detach are called
// between two Polls on that same thread. The fast path (Poll) allocates only
// mbufs, takes no lock and makes no system call.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "host/frame_inspect.h"
#include "host/neighbor_frames.h"
#include "transport/headers.h"
#include "transport/packet_io.h"

namespace uroce::host {

constexpr uint32_t kSwitchQpnShift = 16;
constexpr uint32_t kSwitchFirstSlot = 1;
constexpr uint32_t kSwitchLastSlot = 254;
constexpr uint32_t kSwitchCommIdShift = 24;  // a slot's CM communication IDs

// CM messages by kind, in cm::CmMessage's order: REQ, MRA, REJ, REP, RTU,
// DREQ, DREP (IBTA 12.6).
constexpr size_t kSwitchCmKinds = 7;
// "req", "mra", ...: the name of kind `kind` (< kSwitchCmKinds).
const char* SwitchCmKindName(size_t kind);

struct SwitchPortCounters {
  uint64_t rx_frames = 0, rx_bytes = 0;  // frames the port gave the switch
  uint64_t tx_frames = 0, tx_bytes = 0;  // frames the switch gave the port
  uint64_t rx_dropped = 0;               // its frames the switch refused
  uint64_t tx_full = 0;                  // frames for it dropped: its queue was full
  // A process's CM messages: those it sent that the switch passed (to the
  // host's processes or to the wire), and those the switch routed to it.
  // What a connection's set-up cost shows here: resent REQs, MRAs, REJs.
  std::array<uint64_t, kSwitchCmKinds> cm_sent{};
  std::array<uint64_t, kSwitchCmKinds> cm_received{};
};

struct SwitchCounters {
  uint64_t local_frames = 0;        // process to process, never on the wire
  uint64_t cross_frames = 0;        // of them: handed to another uplink's switch (its address)
  uint64_t unknown_qpn = 0;         // no process owns the destination QPN
  uint64_t not_for_us = 0;          // RoCE to another address, or not RoCE/ARP/ND
  uint64_t malformed = 0;           // too short or inconsistent headers
  uint64_t spoofed = 0;             // a process sent as someone else
  uint64_t cm_routed = 0;           // CM MADs handed to their process
  uint64_t cm_no_listener = 0;      // REQs for a port nobody listens on
  uint64_t cm_rejects = 0;          // REJs the switch sent for them
  uint64_t cm_unrouted = 0;         // other MADs to QP 1 no process owns
  uint64_t cm_bad_qp = 0;           // frames to QP 1 not from QP 1 (or not UD)
  uint64_t neighbor_answers = 0;    // ARP replies / NAs the switch sent
  uint64_t neighbor_copies = 0;     // answers copied to processes
  uint64_t neighbor_questions = 0;  // kernel mode: requests handed to the daemon
  uint64_t neighbor_questions_dropped = 0;  // ... while its queue was full
  // ... beyond kQuestionsPerProcess from one process (a process asking the
  // kernel for every address on the LAN starves nobody else's resolution).
  uint64_t neighbor_over_quota = 0;
  uint64_t alloc_failures = 0;
  // From the wire, to one of our addresses, but claiming a source that is
  // the host's own: an address of this or another uplink (RoCE, or an
  // ARP reply / NA for it) ...
  uint64_t wire_own_source = 0;
  // ... or one no host sends from (UnusableSourceAddress), or a group or our
  // own Ethernet source.
  uint64_t wire_bad_source = 0;
  // Processes' ARP requests / NSs the switch asked the wire in its own
  // words (BuildNeighborQuestion), and those it refused.
  uint64_t neighbor_rebuilt = 0;
  uint64_t neighbor_refused = 0;
};

// A process's ARP request or neighbour solicitation, in kernel mode.
struct NeighborQuestion {
  uint32_t slot = 0;
  bool ipv6 = false;              // a neighbour solicitation (else ARP)
  transport::Gid target{};        // the address asked for
  transport::Gid sender_ip{};     // the asker's (one of the host's)
  transport::MacAddress sender_mac{};
};

class FrameSwitch {
 public:
  struct Options {
    transport::MacAddress mac{};           // the uplink's
    std::vector<transport::Gid> gids;      // the uplink's addresses
    transport::PacketIo* uplink = nullptr;
    rte_mempool* pool = nullptr;           // for answers and copies
    uint16_t burst = 32;
    // The kernel owns the addresses and answers ARP/ND (a kernel uplink).
    bool kernel_neighbors = false;
  };

  explicit FrameSwitch(const Options& options);
  ~FrameSwitch();
  FrameSwitch(const FrameSwitch&) = delete;
  FrameSwitch& operator=(const FrameSwitch&) = delete;

  // Slot `slot` (kSwitchFirstSlot..kSwitchLastSlot) is a process's port now.
  Status Attach(uint32_t slot, transport::PacketIo* io);
  // The slot is free again; frames still staged for it are freed. Its
  // counters are kept until the next Attach.
  void Detach(uint32_t slot);
  bool attached(uint32_t slot) const { return slot < kPorts && ports_[slot].io != nullptr; }
  // CM REQs for `port` go to `slot` (an attached one). kAlreadyExists if
  // another slot listens on it.
  Status Listen(uint16_t port, uint32_t slot);
  void Unlisten(uint16_t port, uint32_t slot);
  // The slot listening on `port`, 0 if none.
  uint32_t listener(uint16_t port) const { return listeners_[port]; }

  // The daemon's other uplinks' switches (polled by the same thread): a
  // process's RoCEv2 frame to one of their addresses is handed to that
  // switch, to the process port of the same slot there, never to the wire
  // (a host's frames to its own addresses stay in the host, as the kernel
  // loops them; IBTA A17 RoCEv2 routes by IP).
  void SetSiblings(std::vector<FrameSwitch*> siblings) { siblings_ = std::move(siblings); }
  bool IsOurs(const transport::Gid& gid) const;
  // One of the host's addresses: this uplink's or a sibling's.
  bool IsHostAddress(const transport::Gid& gid) const;

  // One round: a burst from the uplink and from every process, switched and
  // transmitted. Returns the frames moved.
  unsigned Poll();

  // Kernel mode: the processes' neighbour questions since the last call (at
  // most kQuestions are kept; more are dropped and counted, and the
  // process's resolver asks again).
  static constexpr size_t kQuestions = 64;
  // At most this many of them are one process's: the daemon keeps the same
  // bound on the questions it waits on for each process.
  static constexpr size_t kQuestionsPerProcess = 8;
  size_t TakeNeighborQuestions(NeighborQuestion* out, size_t max);
  bool has_neighbor_questions() const { return questions_ != 0; }
  // Answers `question` for the process that asked (if it is still attached):
  // an ARP reply or neighbour advertisement that says `target` is at `mac`,
  // sent with the next Poll. Between two Polls, on the switch's thread.
  void AnswerNeighborQuestion(const NeighborQuestion& question, const transport::MacAddress& mac);

  // Two processes whose frames to each other went through the switch, both
  // ways: the daemon may link them straight (host/local_links.h). Each pair is asked
  // for once until either detaches; at most kLinkRequests wait (more are
  // asked for again on a later frame).
  struct LinkRequest {
    uint32_t a = 0, b = 0;  // slots, a < b
  };
  static constexpr size_t kLinkRequests = 64;
  size_t TakeLinkRequests(LinkRequest* out, size_t max);
  bool has_link_requests() const { return link_requests_ != 0; }

  const SwitchCounters& counters() const { return counters_; }
  // Slot 0 is the uplink.
  const SwitchPortCounters& port_counters(uint32_t slot) const { return ports_[slot].counters; }

  static uint32_t SlotOfQpn(uint32_t qpn) { return qpn >> kSwitchQpnShift; }

 private:
  static constexpr uint32_t kPorts = kSwitchLastSlot + 1;
  static constexpr uint32_t kUplink = 0;
  static constexpr uint16_t kStage = 256;

  struct Port {
    transport::PacketIo* io = nullptr;
    rte_mbuf* stage[kStage];
    uint16_t staged = 0;
    SwitchPortCounters counters;
  };

  void FromUplink(rte_mbuf* m);
  void FromProcess(uint32_t slot, rte_mbuf* m);
  // `origin`: the switch the frame came in by (another uplink's, for a
  // frame from one of its processes to our address); answers (REJ) go back
  // through it, to the process's port there.
  void ToRoceOwner(uint32_t from, const FrameInfo& info, rte_mbuf* m, FrameSwitch* origin);
  void ToCmOwner(uint32_t from, const FrameInfo& info, rte_mbuf* m, FrameSwitch* origin);
  // `kind`: the message's kind when it does (SwitchCmKindName).
  bool SpeaksForSlot(uint32_t slot, const FrameInfo& info, const rte_mbuf* m, size_t* kind) const;
  void RejectRequest(uint32_t from, const FrameInfo& info, uint64_t transaction_id, uint32_t caller_id,
                     const rte_mbuf* request, FrameSwitch* origin);
  void AnswerNeighbor(rte_mbuf* m);
  void AskTheWire(uint32_t slot, const NeighborMessage& msg, rte_mbuf* m);
  void AskNeighbor(uint32_t slot, const NeighborMessage& msg, rte_mbuf* m);
  void StageNeighborFrame(uint32_t slot, const uint8_t* frame, size_t length);
  void CopyToProcesses(rte_mbuf* m);
  void StageTo(uint32_t slot, rte_mbuf* m);
  void Drop(uint32_t from, rte_mbuf* m, uint64_t* reason);
  void FlushAll();

  Options options_;
  std::array<Port, kPorts> ports_{};
  std::vector<uint32_t> attached_;  // slots in use, for Poll
  std::array<uint8_t, 65536> listeners_{};  // CM port -> slot (0: none)
  // The latest REQs handed to a listener, by their caller's address and
  // communication ID (a ring; one entry per request, however often it is
  // resent). A caller that gives up, or abandons its connect, before any
  // answer came sends REJ naming only its own ID (remote ID 0, IBTA
  // 12.6.7); it goes to the listener its REQ went to, which withdraws the
  // request instead of accepting it later for nobody.
  struct RoutedRequest {
    transport::Gid caller{};
    uint32_t caller_id = 0;
    uint32_t slot = 0;
  };
  static constexpr size_t kRoutedRequests = 256;
  std::array<RoutedRequest, kRoutedRequests> routed_requests_{};
  size_t next_routed_request_ = 0;
  void NoteRoutedRequest(const transport::Gid& caller, uint32_t caller_id, uint32_t slot);
  uint32_t SlotOfRequest(const transport::Gid& caller, uint32_t caller_id) const;
  std::vector<rte_mbuf*> burst_;
  std::vector<FrameSwitch*> siblings_;
  void NoteLocalPair(uint32_t from, uint32_t to);
  std::array<NeighborQuestion, kQuestions> question_queue_{};
  std::array<LinkRequest, kLinkRequests> link_request_queue_{};
  size_t link_requests_ = 0;
  // asked_[a] bit b: the pair (a, b), a < b, was asked for.
  std::array<std::array<uint64_t, (kPorts + 63) / 64>, kPorts> asked_{};
  // sent_[a] bit b: a sent a frame to b (since either attached).
  std::array<std::array<uint64_t, (kPorts + 63) / 64>, kPorts> sent_{};
  size_t questions_ = 0;
  std::array<uint8_t, kPorts> questions_of_{};  // per slot, in question_queue_
  SwitchCounters counters_;
};

}  // namespace uroce::host
