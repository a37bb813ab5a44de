#include "testing/engine_pair.h"

#include "pmd/port.h"

#include <atomic>
#include <cstring>

namespace uroce::transport {

StatusOr<std::unique_ptr<EnginePair>> EnginePair::Create(const EnginePairOptions& options) {
  static std::atomic<unsigned> counter{0};
  std::unique_ptr<EnginePair> pair(new EnginePair());
  pair->ns_per_poll_ = options.ns_per_poll;
  // Buffers big enough for a 4096-byte path MTU plus every header.
  auto pool = pmd::CreatePktPool({.name = "ep_pool" + std::to_string(counter++),
                                  .mbufs = options.pool_mbufs,
                                  .per_core_cache = 0,
                                  .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256});
  if (!pool.ok()) return pool.status();
  pair->pool_ = std::move(*pool);
  pair->pool_size_ = options.pool_mbufs;
  PacketIo* io_a = nullptr;
  PacketIo* io_b = nullptr;
  if (options.host_ports) {
    auto ports = options.host_ports(pair->pool_.get());
    if (!ports.ok()) return ports.status();
    pair->host_ports_ = *ports;
    io_a = pair->host_ports_.a;
    io_b = pair->host_ports_.b;
  } else if (options.dpdk_ring) {
    auto ring = pmd::CreateRingPair("ep" + std::to_string(counter++));
    if (!ring.ok()) return ring.status();
    pair->ring_ = std::make_unique<pmd::RingPair>(*ring);
    pmd::PortConfig port;
    port.rx_pool = pair->pool_.get();
    UROCE_RETURN_IF_ERROR(pmd::StartPort(ring->port_a, port));
    UROCE_RETURN_IF_ERROR(pmd::StartPort(ring->port_b, port));
    pair->ring_io_a_ = std::make_unique<pmd::EthPortIo>(ring->port_a, 0);
    pair->ring_io_b_ = std::make_unique<pmd::EthPortIo>(ring->port_b, 0);
    io_a = pair->ring_io_a_.get();
    io_b = pair->ring_io_b_.get();
  } else {
    pair->link_ = std::make_unique<LossyLink>(pair->pool_.get(), options.seed, options.impairments);
    io_a = &pair->link_->a();
    io_b = &pair->link_->b();
  }
  UROCE_RETURN_IF_ERROR(pair->SetUpEndpoint(pair->a_, *io_a, 1, options));
  UROCE_RETURN_IF_ERROR(pair->SetUpEndpoint(pair->b_, *io_b, 2, options));
  if (options.host_ports) {
    // One host: each reaches the other at the host's own addresses.
    for (EngineSide* e : {&pair->a_, &pair->b_}) {
      e->engine->AddNeighbor(e->gid, e->mac);
      e->engine->AddNeighbor(e->gid6, e->mac);
    }
    return pair;
  }
  pair->a_.engine->AddNeighbor(pair->b_.gid, pair->b_.mac);
  pair->b_.engine->AddNeighbor(pair->a_.gid, pair->a_.mac);
  pair->a_.engine->AddNeighbor(pair->b_.gid6, pair->b_.mac);
  pair->b_.engine->AddNeighbor(pair->a_.gid6, pair->a_.mac);
  return pair;
}

Status EnginePair::SetUpEndpoint(EngineSide& e, PacketIo& io, uint8_t host, const EnginePairOptions& options) {
  // Two processes of one host speak as the host (host 1's MAC and addresses).
  const bool one_host = static_cast<bool>(options.host_ports);
  e.mac = {0x02, 0, 0, 0, 0, one_host ? uint8_t{1} : host};
  const uint8_t ip[4] = {10, 0, 0, one_host ? uint8_t{1} : host};
  e.gid = Ipv4MappedGid(ip);
  e.gid6 = Gid{0xfd, 0x00};
  e.gid6[15] = one_host ? uint8_t{1} : host;
  EngineConfig config = options.engine_template;
  config.mac = e.mac;
  config.gids = {e.gid, e.gid6};
  config.port_mtu = options.port_mtu;
  config.tx_pool = pool_.get();
  config.io = &io;
  config.virtual_now_ns = &now_ns_;
  config.selective_retransmission =
      config.selective_retransmission && (host == 1 ? options.selective_a : options.selective_b);
  // QPNs from the pair's seed too, so that a run replays exactly.
  if (config.random_seed == 0) config.random_seed = options.seed * 2 + host;
  if (one_host) {
    config.loopback = false;  // the other engine has the same addresses
    config.qpn_base = host == 1 ? host_ports_.qpn_base_a : host_ports_.qpn_base_b;
    config.qpn_count = host_ports_.qpn_count;
    config.peer_memory = host == 1 ? host_ports_.peer_a : host_ports_.peer_b;
  }
  e.engine = std::make_unique<Engine>(config);
  auto pd = e.engine->AllocPd();
  if (!pd.ok()) return pd.status();
  e.pd = *pd;
  auto cq = e.engine->CreateCq(4096);
  if (!cq.ok()) return cq.status();
  e.cq = *cq;
  return Status::Ok();
}

EnginePair::~EnginePair() { ShutDownAndCheckMbufs(); }

bool EnginePair::ShutDownAndCheckMbufs() {
  // Engines first (they free what they staged), then the wire (what is still
  // on it), then the pool can be checked.
  a_.engine.reset();
  b_.engine.reset();
  link_.reset();
  host_ports_ = {};
  if (ring_) {
    (void)pmd::DestroyRingPair(*ring_);
    ring_.reset();
  }
  return pool_ == nullptr || pmd::AvailableMbufs(pool_.get()) == pool_size_;
}

StatusOr<std::pair<QueuePair*, QueuePair*>> EnginePair::ConnectQps(const RcConnectOptions& o) {
  return ConnectQueuePairs(a_, b_, o);
}

StatusOr<QueuePair*> EnginePair::CreateUdQp(EngineSide& side, uint32_t qkey) {
  QpInitAttr init = OneCqQpInit(IBV_QPT_UD, side.pd, side.cq, 64, 2);
  auto qp = side.engine->CreateQp(init);
  if (!qp.ok()) return qp.status();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = qkey;
  UROCE_RETURN_IF_ERROR(
      side.engine->ModifyQp(*qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  UROCE_RETURN_IF_ERROR(side.engine->ModifyQp(*qp, attr, IBV_QP_STATE));
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  UROCE_RETURN_IF_ERROR(side.engine->ModifyQp(*qp, attr, IBV_QP_STATE | IBV_QP_SQ_PSN));
  return *qp;
}

unsigned EnginePair::PollOnce() {
  now_ns_ += ns_per_poll_;
  return a_.engine->Poll() + b_.engine->Poll();
}

bool EnginePair::RunUntil(const std::function<bool()>& done, uint64_t max_polls) {
  for (uint64_t i = 0; i < max_polls; ++i) {
    if (done()) return true;
    PollOnce();
  }
  return done();
}

std::vector<ibv_wc> EnginePair::WaitCompletions(CompletionQueue* cq, size_t count, uint64_t max_polls) {
  std::vector<ibv_wc> out;
  RunUntil(
      [&] {
        ibv_wc wc[16];
        int n = cq->Poll(16, wc);
        out.insert(out.end(), wc, wc + n);
        return out.size() >= count;
      },
      max_polls);
  return out;
}

}  // namespace uroce::transport
