#include "pmd/mempool.h"

#include <rte_errno.h>

namespace uroce::pmd {

StatusOr<MempoolPtr> CreatePktPool(const PktPoolConfig& config) {
  if (config.name.empty()) return InvalidArgument("packet pool needs a name");
  if (config.mbufs == 0) return InvalidArgument("packet pool '" + config.name + "' needs at least one mbuf");
  rte_mempool* pool = rte_pktmbuf_pool_create(config.name.c_str(), config.mbufs, config.per_core_cache,
                                              /*priv_size=*/0, config.data_room, config.socket_id);
  if (pool == nullptr) {
    return ResourceExhausted("rte_pktmbuf_pool_create('" + config.name + "', " + std::to_string(config.mbufs) +
                             " mbufs) failed: " + rte_strerror(rte_errno));
  }
  return MempoolPtr(pool);
}

unsigned AvailableMbufs(const rte_mempool* pool) { return rte_mempool_avail_count(pool); }

}  // namespace uroce::pmd
