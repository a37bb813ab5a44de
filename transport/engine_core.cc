#include "transport/engine_core.h"

#include <rte_cycles.h>

#include <algorithm>
#include <thread>

namespace uroce::transport {
namespace {

// The largest IB MTU that fits the Ethernet MTU after RoCEv2's headers (IPv6
// 40 + UDP 8 + BTH 12 + up to 28 extension bytes + ICRC 4, rounded to 80 as
// rxe does): 1024 on a 1500-byte port.
ibv_mtu LargestIbMtu(uint32_t port_mtu) {
  ibv_mtu best = IBV_MTU_256;
  for (ibv_mtu m : {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096}) {
    if (MtuBytes(m) + 80 <= port_mtu) best = m;
  }
  return best;
}

}  // namespace

EngineCore::EngineCore(const EngineConfig& engine_config)
    : config(engine_config),
      mrs(1u << 16),
      reorder_pool(engine_config.selective_retransmission ? engine_config.reorder_windows : 0,
                   engine_config.reorder_max_held),
      qp_table(engine_config.max_qps, nullptr),
      xrc_srq_table(engine_config.max_qps, nullptr) {
  limits.max_mtu = LargestIbMtu(config.port_mtu);
  limits.gid_table_size = static_cast<uint8_t>(std::min<size_t>(config.gids.size(), 255));
  busy_qps.reserve(config.max_qps);
}

void EngineCore::WatchLinkAcks(QueuePair* qp) {
  RequesterState& r = qp->req;
  if (r.link_ack_watched || qp->type != IBV_QPT_RC || config.peer_memory == nullptr) return;
  uint64_t word = 0, read_to = 0;
  if (!config.peer_memory->ReadLinkAck(qp->attr.dest_qp_num, qp->path.dgid, qp->qpn, &word, &read_to)) return;
  r.link_ack_watched = true;
  r.link_ack_seen = word;
  r.link_ack_snapshot_taken = false;
}

void EngineCore::ReadClock() {
  if (config.virtual_now_ns != nullptr) {
    now_ns = *config.virtual_now_ns;
  } else {
    static const double ns_per_cycle = 1e9 / double(rte_get_tsc_hz());
    now_ns = static_cast<uint64_t>(double(rte_get_tsc_cycles()) * ns_per_cycle);
  }
  clock_fresh = true;
  polls_since_clock_read = 0;
}

bool EngineCore::IsLoopbackGid(const Gid& gid) const {
  if (!config.loopback) return false;
  for (const Gid& own : config.gids) {
    if (own == gid) return true;
  }
  return false;
}

namespace {
// Control-path tokens this thread holds (ProgressToken), so that an exit
// handler run by a signal on top of a control call knows not to wait for a
// token it holds itself.
thread_local int t_control_tokens_held = 0;
}  // namespace

bool ThisThreadHoldsAControlToken() { return t_control_tokens_held != 0; }

ProgressToken::ProgressToken(const EngineCore& core) : core_(core) {
  UROCE_DCHECK(!core_.TokenHeldByThisThread());  // it would wait for itself
  bool expected = false;
  while (!core_.progress_busy.compare_exchange_weak(expected, true, std::memory_order_acquire)) {
    expected = false;
    std::this_thread::yield();
  }
  core_.RecordTokenOwner();
  ++t_control_tokens_held;
}

ProgressToken::~ProgressToken() {
  --t_control_tokens_held;
  core_.ClearTokenOwner();
  core_.progress_busy.store(false, std::memory_order_release);
}

}  // namespace uroce::transport
