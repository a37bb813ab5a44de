// Two engines joined by a LossyLink in one process, driven on one thread with
// a virtual clock: the harness for the engine's tests and for `uroce soak`.
// Every run replays exactly from its seed.
#pragma once

#include <infiniband/verbs.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "pmd/eth_port_io.h"
#include "pmd/mempool.h"
#include "pmd/ring_pair.h"
#include "testing/lossy_link.h"
#include "transport/engine_side.h"
#include "transport/engine.h"

namespace uroce::transport {

// Ports of the caller's for the two engines, as two processes of one host
// have them (two host::LocalLinks joined by a local link, `uroce soak --port
// link`): both engines then speak as that host (a's MAC and addresses, no
// loopback) and draw QPNs from their leases, as under a daemon.
struct HostPorts {
  PacketIo* a = nullptr;
  PacketIo* b = nullptr;
  // What a may read of b's memory (EngineConfig::peer_memory); for ports of
  // local links, the links themselves (they say which frames came in link
  // form).
  PeerMemory* peer_a = nullptr;
  PeerMemory* peer_b = nullptr;
  uint32_t qpn_base_a = 0, qpn_base_b = 0, qpn_count = 0;
  // Destroyed once the engines are, before the pool is checked.
  std::shared_ptr<void> owner;
};

struct EnginePairOptions {
  // false: the in-memory LossyLink (impairments apply). true: a DPDK net_ring
  // pair, each engine on one port through an ethdev queue (no impairments).
  bool dpdk_ring = false;
  uint64_t seed = 1;
  LinkImpairments impairments;
  uint32_t port_mtu = 1500;
  unsigned pool_mbufs = 16383;
  uint64_t ns_per_poll = 1000;  // virtual time that passes per poll round
  EngineConfig engine_template;  // tunables copied into both engines
  // Selective retransmission offered by a and by b (with the template's
  // setting): one side off makes a mixed pair, which falls back to go-back-N.
  bool selective_a = true, selective_b = true;
  // Set: called once with the pair's pool for the ports (neither the lossy
  // link nor a ring pair is made).
  std::function<StatusOr<HostPorts>(rte_mempool* pool)> host_ports;
};

class EnginePair {
 public:
  static StatusOr<std::unique_ptr<EnginePair>> Create(const EnginePairOptions& options);
  ~EnginePair();

  EngineSide& a() { return a_; }
  EngineSide& b() { return b_; }
  // The in-memory link (not with dpdk_ring).
  LossyLink& link() { return *link_; }
  bool has_link() const { return link_ != nullptr; }
  rte_mempool* pool() { return pool_.get(); }
  uint64_t now_ns() const { return now_ns_; }

  // Creates and connects an RC (or UC) QP on each side.
  StatusOr<std::pair<QueuePair*, QueuePair*>> ConnectQps(const RcConnectOptions& options);
  // A UD QP on `side`, in RTS, with Q_Key `qkey`.
  StatusOr<QueuePair*> CreateUdQp(EngineSide& side, uint32_t qkey);

  // One poll of each engine; virtual time moves on.
  unsigned PollOnce();
  // Polls until `done` or `max_polls`; true if `done` became true.
  bool RunUntil(const std::function<bool()>& done, uint64_t max_polls = 2'000'000);
  // Polls `cq` (driving the engines) until it yields `count` completions.
  std::vector<ibv_wc> WaitCompletions(CompletionQueue* cq, size_t count, uint64_t max_polls = 2'000'000);

  unsigned AvailableMbufs() const { return pmd::AvailableMbufs(pool_.get()); }
  unsigned PoolSize() const { return pool_size_; }
  // Destroys both engines and the link (what they hold goes back to the pool)
  // and returns true when the pool is full again: no buffer leaked.
  bool ShutDownAndCheckMbufs();

 private:
  EnginePair() = default;
  Status SetUpEndpoint(EngineSide& e, PacketIo& io, uint8_t host, const EnginePairOptions& options);

  pmd::MempoolPtr pool_;
  unsigned pool_size_ = 0;
  std::unique_ptr<LossyLink> link_;
  std::unique_ptr<pmd::RingPair> ring_;
  std::unique_ptr<pmd::EthPortIo> ring_io_a_, ring_io_b_;
  HostPorts host_ports_;
  EngineSide a_, b_;
  uint64_t now_ns_ = 1'000'000;
  uint64_t ns_per_poll_ = 1000;
};

}  // namespace uroce::transport
