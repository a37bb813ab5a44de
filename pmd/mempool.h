// Packet-buffer pools (control path). Every mbuf uroce touches comes from one
// of these; tests compare AvailableMbufs() with the pool size at teardown to
// prove that no buffer leaked.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace uroce::pmd {

struct MempoolDeleter {
  void operator()(rte_mempool* pool) const { rte_mempool_free(pool); }
};
using MempoolPtr = std::unique_ptr<rte_mempool, MempoolDeleter>;

struct PktPoolConfig {
  std::string name;                 // unique within the process
  unsigned mbufs = 8191;            // best as 2^n - 1 (ring-based pools)
  unsigned per_core_cache = 256;    // 0 disables the per-lcore cache
  uint16_t data_room = RTE_MBUF_DEFAULT_BUF_SIZE;  // headroom + data bytes
  int socket_id = SOCKET_ID_ANY;
};

StatusOr<MempoolPtr> CreatePktPool(const PktPoolConfig& config);

// Mbufs in the pool now, the per-lcore caches included.
unsigned AvailableMbufs(const rte_mempool* pool);

}  // namespace uroce::pmd
