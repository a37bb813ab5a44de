// One side of a `uroce perf` run (like perftest's ib_*_lat / ib_*_bw): the
// client drives the test and measures; the server answers (send_lat,
// write_lat) or stays passive (READ, atomics, the bandwidth tests) and
// checks what landed in its memory. Both are polled state machines (Step),
// so one thread can run both sides in one process (--port ring), or each
// side runs in its own process.
//
// Memory: one registered buffer per side with `out` slots (what this side
// sends, writes, or offers to READs) followed by `in` slots (where SENDs,
// WRITEs, READ results and atomic results land). With --verify every message
// carries its index (first 8 bytes) and a pattern derived from it, so a
// receiver checks each one on its own.
//
// Threads: the application's thread (Step, Prepare, ...); the engine may run
// on its lcore meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/runtime.h"
#include "transport/engine.h"

namespace uroce::tools {

// kIncast: `qps` WRITE flows, each with its own share of the window, into
// the one server, plus a probe QP that READs 64 B back to back: the flows'
// aggregate goodput, their fairness (Jain's index) and the probe's round
// trip through whatever queue the flows build (docs/congestion.md).
enum class PerfTest { kSendLat, kWriteLat, kReadLat, kAtomicLat, kSendBw, kWriteBw, kReadBw, kIncast };

const char* PerfTestName(PerfTest t);
bool ParsePerfTest(const std::string& name, PerfTest* t);
bool IsLatencyTest(PerfTest t);

struct RunSpec {
  PerfTest test = PerfTest::kSendLat;
  uint32_t size = 64;
  uint64_t iters = 1000;
  uint32_t qps = 1;
  bool verify = false;
  uint32_t window = 1;  // messages outstanding (bandwidth tests), over all QPs
  // Connected RC QPs on each side that never carry anything (to measure what
  // idle QPs cost every message); they aim at QPNs nobody has.
  uint32_t idle_qps = 0;

  // What one run may ask for. A RUN line comes from the peer, and the server
  // allocates, registers (with a remote-writable rkey) and loops by what it
  // says, so anything beyond these is refused, not attempted.
  static constexpr uint64_t kMaxSize = uint64_t{1} << 30;  // bytes per message
  static constexpr uint64_t kMaxIters = 100'000'000;       // latency samples: 8 bytes each
  static constexpr uint64_t kMaxQps = 256;
  static constexpr uint64_t kMaxWindow = 4096;
  static constexpr uint64_t kMaxIdleQps = 20000;
  static constexpr uint64_t kMaxBufferBytes = uint64_t{4} << 30;  // one side's registered buffer

  // The window a bandwidth test uses by default: deep enough to stream, at
  // most 16 MiB in flight.
  static uint32_t DefaultWindow(PerfTest t, uint32_t size);
  // The buffer layout Prepare makes: slots this side sends from / receives
  // into, and receives posted per QP (send tests).
  struct Layout {
    uint32_t out_slots = 0, in_slots = 0, rq_per_qp = 0;
    uint64_t buffer_bytes = 0;
  };
  Layout BufferLayout() const;
  // OK when every field is within the limits above; else kInvalidArgument
  // naming the field and its limit.
  Status Validate() const;
  std::string Encode() const;  // "RUN test=... size=..." for the side channel
  // Refuses a malformed line and one Validate refuses.
  static StatusOr<RunSpec> Decode(const std::string& line);
};

// `line` (from the peer) fit for an error message: at most 200 characters,
// control bytes and non-ASCII shown as '?', so a peer cannot write escape
// sequences to this side's terminal.
std::string PrintableLine(const std::string& line);

// What one side tells the other before they connect.
struct SideInfo {
  transport::Gid gid{};
  uint64_t addr = 0;  // the buffer's start (out slots, then in slots)
  uint32_t rkey = 0;
  uint32_t out_slots = 0, in_slots = 0, slot_size = 0;
  uint32_t mtu_bytes = 4096;
  std::vector<std::pair<uint32_t, uint32_t>> qps;  // (qpn, first PSN)

  uint64_t in_addr() const { return addr + uint64_t(out_slots) * slot_size; }
  std::string Encode() const;  // "INFO gid=... qps=17:1234,..."
  static StatusOr<SideInfo> Decode(const std::string& line);
};

struct PerfResult {
  RunSpec spec;
  uint64_t completed = 0;
  double seconds = 0;          // first post to last completion
  std::vector<double> lat_us;  // latency tests: one sample per iteration
  double median_us = 0, p99_us = 0, mean_us = 0;
  double mb_per_s = 0, gbit_per_s = 0, mmsg_per_s = 0;
  // incast: messages each flow completed by the time nine tenths of all
  // were (all flows still running), and Jain's fairness index over them,
  // (sum x)^2 / (n sum x^2): 1 when equal, 1/n when one flow has it all.
  // lat_us holds the probe's round trips.
  std::vector<uint64_t> flow_messages;
  double jain = 0;
};

// Jain's fairness index of `x` (0 when empty or all zero).
double JainIndex(const std::vector<uint64_t>& x);

class PerfSide {
 public:
  PerfSide(runtime::Runtime::Device& endpoint, bool client, const RunSpec& spec);
  ~PerfSide();
  PerfSide(const PerfSide&) = delete;
  PerfSide& operator=(const PerfSide&) = delete;

  // Registers the buffer, makes the QPs and a CQ, fills what READs will read.
  Status Prepare();
  SideInfo Local() const;
  // Moves the QPs to RTR and RTS aimed at `remote` (ARP/ND find its MAC here).
  Status Connect(const SideInfo& remote);
  // Posts the receives this side needs before the peer sends.
  Status Arm();
  // Client: posts the first requests and starts the clock.
  Status Start();
  // One round: completions, memory flags, new posts. An error status ends
  // the run (a failed completion, a verification failure).
  Status Step();
  // Client: all iterations completed.
  bool done() const { return done_; }
  // Server: every message the client's completions vouch for has been seen
  // here too (an ACK can overtake the receiver's own completion polling).
  bool Settled() const;
  uint64_t completed() const { return completed_; }
  // After the run: the checks that need the whole run (server: what landed
  // in its memory; client: nothing more).
  Status Verify();
  PerfResult Result() const;
  // Destroys the QPs, the CQ and the memory registration. When the runtime
  // must flush the QPs instead (shutdown on a signal), call
  // Runtime::FlushQueuePairs first.
  void Teardown();

 private:
  struct Pending {
    uint64_t index = 0;
    uint32_t slot = 0;
    uint32_t qp = 0;
  };

  uint8_t* out_slot(uint32_t i) { return buffer_ + uint64_t(i) * spec_.size; }
  uint8_t* in_slot(uint32_t i) { return buffer_ + uint64_t(out_slots_ + i) * spec_.size; }
  uint64_t addr_of(const uint8_t* p) const { return reinterpret_cast<uint64_t>(p); }
  // An RC QP on `cq`, moved to INIT.
  StatusOr<transport::QueuePair*> CreateRcQp(transport::CompletionQueue* cq, uint32_t send_wr, uint32_t recv_wr);
  Status PostRecv(uint32_t qp, uint32_t slot);
  Status PostSend(uint32_t qp, ibv_wr_opcode op, uint32_t slot, uint64_t remote, uint64_t wr_id, uint64_t add = 0);
  Status PollCompletions(int* got, ibv_wc* wcs, int max);
  Status CheckMessage(const uint8_t* data, uint32_t length, uint64_t index, const char* what) const;
  Status StepClient();
  Status StepServer();
  Status IssueNext();
  Status IssueIncast();
  void Sample(uint64_t start_cycles, bool half);
  void SyncWithEngine();

  runtime::Runtime::Device& ep_;
  transport::Engine& engine_;
  const bool client_;
  RunSpec spec_;
  uint32_t out_slots_ = 0, in_slots_ = 0;
  uint32_t rq_per_qp_ = 0;
  uint8_t* buffer_ = nullptr;
  size_t buffer_bytes_ = 0;
  transport::MrKeys keys_{};
  bool registered_ = false;
  transport::CompletionQueue* cq_ = nullptr;
  std::vector<transport::QueuePair*> qps_;
  transport::CompletionQueue* idle_cq_ = nullptr;  // --idle-qps: theirs, never used
  std::vector<transport::QueuePair*> idle_qps_;
  std::vector<uint32_t> psns_;
  SideInfo remote_;

  // Progress.
  bool done_ = false;
  uint64_t posted_ = 0, completed_ = 0;
  uint64_t start_cycles_ = 0, end_cycles_ = 0, iter_start_ = 0;
  std::vector<uint64_t> samples_;
  std::vector<uint8_t> slot_busy_;
  uint32_t slot_cursor_ = 0;
  uint64_t echo_count_ = 0;   // server, write_lat / send_lat: answers sent
  uint64_t received_ = 0;     // receives checked
  std::vector<uint64_t> per_qp_received_;
  // incast (client): per flow, WRITEs outstanding and completed; the
  // completed counts when nine tenths of all were; the probe's READ.
  std::vector<uint32_t> flow_outstanding_;
  std::vector<uint64_t> flow_completed_, flow_snapshot_;
  bool probe_outstanding_ = false;
  uint64_t probe_start_ = 0;
  uint8_t expect_tag_ = 1;    // write_lat: the next tag to wait for
  bool waiting_reply_ = false;
};

// "12.34" style figures for the table and CSV.
void Summarize(PerfResult* r);

}  // namespace uroce::tools
