// ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) for one uroce port:
// uroce owns the port, so nobody else answers for its addresses or finds its
// peers' MACs.
//
// Responder (engine thread): plugged in as EngineConfig::non_roce_handler. It
// answers ARP requests and neighbour solicitations for uroce's own addresses
// by turning the received mbuf into the answer and handing it to
// Engine::QueueRawFrame, so the engine stays the one owner of the TX queue.
// What it learns (the sender of a request for us, the answer to our request)
// goes through a lock-free ring to the control path: the engine thread never
// takes a lock and never calls the engine's control path (which waits for
// the engine thread).
//
// Resolver (control path): plugged in as EngineConfig::resolve_neighbor, so
// ibv_modify_qp to RTR and ibv_create_ah find a peer's MAC by themselves. The
// choice: the control call waits, bounded. It sends a request at once and
// again every retry interval (1 s, RFC 1122 2.3.2.1's limit of one ARP
// request per second per destination, RFC 4861's RetransTimer), and gives up
// after the timeout (3 s by default: RFC 4861's MAX_MULTICAST_SOLICIT of 3)
// with an error naming the address. In inline mode it drives the engines
// itself while it waits, since no engine thread would see the answer.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "transport/engine.h"
#include "transport/headers.h"
#include "transport/mpmc_ring.h"

namespace uroce::pmd {

struct NeighborCounters {
  uint64_t arp_requests_received = 0, arp_replies_sent = 0, arp_requests_sent = 0, arp_replies_received = 0;
  uint64_t nd_solicitations_received = 0, nd_advertisements_sent = 0, nd_solicitations_sent = 0,
           nd_advertisements_received = 0;
  uint64_t learned = 0, ignored = 0, tx_queue_full = 0, resolve_timeouts = 0;
};

class NeighborResolver {
 public:
  struct Options {
    transport::MacAddress mac{};
    std::vector<transport::Gid> addresses;  // ours: the GID table
    rte_mempool* pool = nullptr;            // requests are built in buffers from here
    unsigned timeout_ms = 3000;
    unsigned retry_ms = 1000;
  };

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

 private:
  struct Learned {
    transport::Gid ip;
    transport::MacAddress mac;
  };

  bool IsOurs(const transport::Gid& ip) const;
  const transport::Gid* SourceFor(const transport::Gid& ip) const;
  void Learn(const transport::Gid& ip, const transport::MacAddress& mac);  // engine thread
  void DrainLearned();                                                   // control path
  bool SendRequest(const transport::Gid& ip, const transport::Gid& source);
  void Answer(rte_mbuf* m);  // engine thread: `m` now holds the answer

  const Options options_;
  transport::Engine* engine_ = nullptr;
  std::function<void()> progress_;
  std::mutex resolve_mutex_;  // control path only: one resolution at a time
  transport::MpmcRing<Learned> learned_{64};
  // Engine thread only: the last few answers passed on, so a chatty peer does
  // not fill the ring with the same entry.
  Learned recent_[8] = {};
  unsigned recent_next_ = 0;

  struct AtomicCounters {
    std::atomic<uint64_t> arp_requests_received{0}, arp_replies_sent{0}, arp_requests_sent{0},
        arp_replies_received{0};
    std::atomic<uint64_t> nd_solicitations_received{0}, nd_advertisements_sent{0}, nd_solicitations_sent{0},
        nd_advertisements_received{0};
    std::atomic<uint64_t> learned{0}, ignored{0}, tx_queue_full{0}, resolve_timeouts{0};
  } counters_;
};

}  // namespace uroce::pmd
