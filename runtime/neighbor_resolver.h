// ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for one uroce port:
// uroce owns the port, so nobody else answers for its addresses or finds its
// peers' MACs.
//
// Responder (engine thread): plugged in as EngineConfig::non_roce_handler. It
// answers ARP requests and neighbour solicitations for uroce's own addresses
// by turning the received mbuf into the answer and handing it to
// Engine::QueueRawFrame, so the engine stays the one owner of the TX queue.
// What it hears (the sender of a request for us, an answer) goes through a
// lock-free ring to the control path, which decides what is learned: the
// engine thread never takes a lock and never calls the engine's control path
// (which waits for the engine thread).
//
// What is learned (the peer is not trusted; ARP and ND have no
// authentication, so the rule is what keeps a neighbour from redirecting
// another's traffic):
//   - An ARP reply or a neighbour advertisement binds an address only when it
//     answers a request of ours that is still outstanding: we asked for that
//     address, it was received after we asked, and nothing answered it yet.
//     An advertisement must also carry the Solicited flag (RFC 4861 4.4,
//     7.2.4: set only in answers). Unsolicited ones (RFC 826 allows a merge
//     from any packet; RFC 4861 7.2.5/7.2.6 lets an unsolicited advertisement
//     with Override replace a cached address) are not learned: that is the
//     whole of ARP/ND poisoning. The first answer wins; a later, different
//     one is refused (counted in `refused`).
//   - A request aimed at us (ARP request, or a solicitation with a source
//     link-layer option) is answered, and refreshes an entry we already hold
//     for its sender with the same MAC; it never creates an entry and never
//     changes one. RFC 826's "Packet Reception" (merge, then add the sender
//     when we are the target) and RFC 4861 7.2.3 (create or update from a
//     solicitation) both allow more; uroce takes the strict rule, and asks
//     itself (one round trip) when it needs the sender's MAC.
// Static entries (the configuration's `neighbors`) are the engine's own and
// are never changed by what arrives.
//
// Resolver (control path): plugged in as EngineConfig::resolve_neighbor, so
// ibv_modify_qp to RTR and ibv_create_ah find a peer's MAC by themselves. The
// choice: the control call waits, bounded. It sends a request at once and
// again every retry interval (1 s, RFC 1122 2.3.2.1's limit of one ARP
// request per second per destination, RFC 4861's RetransTimer), and gives up
// after the timeout (3 s by default: RFC 4861's MAX_MULTICAST_SOLICIT of 3)
// with an error naming the address. In inline mode it drives the engines
// itself while it waits, since no engine thread would see the answer.
// A failure is remembered for Options::failure_cache_ms: asking again for
// that address within it fails at once without sending (RFC 1122 2.3.2.1:
// no flood of requests for an address nobody answers). The tables behind
// this (outstanding requests, remembered failures) are bounded and aged.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/ring.h"
#include "common/status.h"
#include "transport/engine.h"
#include "transport/headers.h"

namespace uroce::runtime {

struct NeighborCounters {
  uint64_t arp_requests_received = 0, arp_replies_sent = 0, arp_requests_sent = 0, arp_replies_received = 0;
  uint64_t nd_solicitations_received = 0, nd_advertisements_sent = 0, nd_solicitations_sent = 0,
           nd_advertisements_received = 0;
  uint64_t learned = 0, ignored = 0, tx_queue_full = 0, resolve_timeouts = 0;
  // Answers and requests that bound nothing (see the class comment), and
  // resolutions that failed at once from the failure cache.
  uint64_t refused = 0, resolve_cached_failures = 0;
};

class NeighborResolver {
 public:
  struct Options {
    transport::MacAddress mac{};
    std::vector<transport::Gid> addresses;  // ours: the GID table
    rte_mempool* pool = nullptr;            // requests are built in buffers from here
    unsigned timeout_ms = 3000;
    unsigned retry_ms = 1000;
    // An address nobody answered is not asked for again this long; a late
    // answer to it is still taken this long after the resolution gave up.
    unsigned failure_cache_ms = 1000;
  };

  // Bounds of the control path's tables: addresses asked for and not yet
  // answered, and addresses that recently went unanswered. When full, the
  // entry that expires first makes room.
  static constexpr size_t kMaxPending = 32;
  static constexpr size_t kMaxFailures = 64;

  explicit NeighborResolver(const Options& options);
  NeighborResolver(const NeighborResolver&) = delete;
  NeighborResolver& operator=(const NeighborResolver&) = delete;

  // Before the engine first polls: the engine to answer through, and in
  // inline mode what drives the engines while Resolve waits (empty in engine
  // mode, where an engine lcore polls).
  void Attach(transport::Engine* engine, std::function<void()> progress);

  // Engine thread (non_roce_handler): takes ownership of `m`.
  void HandleFrame(rte_mbuf* m);

  // Control path (resolve_neighbor): OK once the engine's neighbour table
  // holds `ip`; kUnavailable after the timeout (`timeout_ms`, or
  // Options::timeout_ms when 0).
  Status Resolve(const transport::Gid& ip, unsigned timeout_ms = 0);

  // Any thread.
  NeighborCounters counters() const;
  // Control path: how full the bounded tables are (for tests).
  size_t pending_entries();
  size_t failure_entries();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Heard : uint8_t { kRequest, kAnswer };
  struct Learned {
    transport::Gid ip;
    transport::MacAddress mac;
    Heard heard;
    int64_t at_ns;  // when the engine thread received it (steady clock)
  };
  struct Pending {
    transport::Gid ip;
    int64_t asked_ns;       // the first request of this resolution
    Clock::time_point expires;
  };
  struct Failure {
    transport::Gid ip;
    Clock::time_point until;
  };

  bool IsOurs(const transport::Gid& ip) const;
  const transport::Gid* SourceFor(const transport::Gid& ip) const;
  // Engine thread: passes what it heard to the control path.
  void PassOn(const transport::Gid& ip, const transport::MacAddress& mac, Heard heard);
  // Control path, resolve_mutex_ held: applies the learning rule.
  void DrainLearned();
  void Prune(Clock::time_point now);
  void PublishPending();
  static uint64_t PendingBit(const transport::Gid& ip);
  bool SendRequest(const transport::Gid& ip, const transport::Gid& source);
  void Answer(rte_mbuf* m);  // engine thread: `m` now holds the answer

  const Options options_;
  transport::Engine* engine_ = nullptr;
  std::function<void()> progress_;
  std::mutex resolve_mutex_;  // control path only: one resolution at a time
  MpmcRing<Learned> learned_{64};
  // Engine thread only: the last few requests passed on, so a chatty peer
  // does not fill the ring with the same refresh.
  Learned recent_[8] = {};
  unsigned recent_next_ = 0;
  // resolve_mutex_: the outstanding requests and the remembered failures.
  std::vector<Pending> pending_;
  std::vector<Failure> failures_;
  // One bit per outstanding address (a hash): the engine thread passes on
  // only answers that may be for one of them, so a flood of unsolicited
  // answers does not crowd the real one out of the ring.
  std::atomic<uint64_t> pending_bits_{0};

  struct AtomicCounters {
    std::atomic<uint64_t> arp_requests_received{0}, arp_replies_sent{0}, arp_requests_sent{0},
        arp_replies_received{0};
    std::atomic<uint64_t> nd_solicitations_received{0}, nd_advertisements_sent{0}, nd_solicitations_sent{0},
        nd_advertisements_received{0};
    std::atomic<uint64_t> learned{0}, ignored{0}, tx_queue_full{0}, resolve_timeouts{0};
    std::atomic<uint64_t> refused{0}, resolve_cached_failures{0};
  } counters_;
};

}  // namespace uroce::runtime
