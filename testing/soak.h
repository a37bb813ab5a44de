// A mixed, randomized RDMA workload between two engines over the lossy
// in-memory link, checking every byte at the target and every completion at
// both ends. `uroce soak` and the loss tests run it. Everything is decided by
// the seed, so a failure replays.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "testing/engine_pair.h"
#include "testing/lossy_link.h"

namespace uroce::transport {

enum SoakOp : unsigned {
  kSoakSend = 1u << 0,
  kSoakWrite = 1u << 1,
  kSoakRead = 1u << 2,
  kSoakAtomic = 1u << 3,
  kSoakImm = 1u << 4,  // SEND_WITH_IMM and RDMA_WRITE_WITH_IMM
  kSoakAllOps = 0x1F,
};

// Parses "send,write,read,atomic,imm" into SoakOp bits.
StatusOr<unsigned> ParseSoakOps(const std::string& list);

struct SoakOptions {
  bool dpdk_ring = false;  // a DPDK net_ring pair instead of the lossy link
  uint64_t seed = 1;
  LinkImpairments impairments;
  uint64_t messages = 10000;
  uint32_t qps = 4;
  unsigned ops = kSoakAllOps;
  uint32_t max_size = 16384;
  uint32_t outstanding_per_qp = 16;
  uint32_t path_mtu_bytes = 1024;  // 256 .. 4096
  uint64_t max_polls = 500'000'000;  // give up (and fail) after this many poll rounds
  // Selective retransmission offered by side a and side b; one off: a mixed
  // pair, which must fall back to go-back-N.
  bool selective_a = true, selective_b = true;
  // Set: the two engines run over these ports as two processes of one host
  // (EnginePairOptions::host_ports; no impairments then).
  std::function<StatusOr<HostPorts>(rte_mempool* pool)> host_ports;
  uint32_t pull_min_bytes = 16384;  // EngineConfig::pull_min_bytes, with host_ports' peer memory
};

struct SoakProgress {
  uint64_t posted = 0, verified = 0, errors = 0, retransmits = 0;
};

struct SoakResult {
  uint64_t messages = 0, verified = 0, errors = 0, retransmits = 0;
  uint64_t link_dropped = 0, link_duplicated = 0, link_reordered = 0, link_corrupted = 0;
  uint64_t icrc_drops = 0;
  uint64_t pulls = 0;  // messages read from the other engine's memory (host_ports with peer memory)
  uint64_t staged = 0;  // chunks copied through a link's payload area (likewise)
  // ACKs as words in a local link (transport/link_ack.h): stored, and taken.
  uint64_t link_acks_sent = 0, link_acks_received = 0;
  uint64_t link_overflowed = 0, tx_alloc_failures = 0, timeouts = 0;
  uint64_t rto_expiries = 0, tail_probes = 0, held_packets = 0, placed_ahead = 0, selective_resends = 0;
  bool mbufs_all_returned = false;
  std::string first_error;  // empty when nothing went wrong
  bool ok() const { return errors == 0 && verified == messages && mbufs_all_returned; }
};

// Runs the workload; `progress` (may be empty) is called now and then.
StatusOr<SoakResult> RunSoak(const SoakOptions& options, const std::function<void(const SoakProgress&)>& progress);

}  // namespace uroce::transport
