// Engine: control path, posting and the poll loop. The pipeline stages are
// classes of their own: FrameIo (frame_io.cc), Requester (requester.cc),
// Completer (completer.cc), Responder (responder.cc), sharing an EngineCore
// (engine_core.h) and Completions (completions.cc).
#include "transport/engine.h"

#include <rte_cycles.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/raw_enum.h"
#include "transport/opcode.h"

namespace uroce::transport {

namespace {

// The QPN generator: seeded with the configured value (tests), or with 256
// bits of the system's entropy, so that a peer who sees a few QPNs cannot
// search the seed space for the rest.
std::mt19937_64 RandomSeed(uint64_t configured) {
  if (configured != 0) return std::mt19937_64(configured);
  std::random_device device;
  std::seed_seq seq{device(), device(), device(), device(), device(), device(), device(), device()};
  return std::mt19937_64(seq);
}

uint64_t TscNanoseconds() {
  static const double ns_per_cycle = 1e9 / double(rte_get_tsc_hz());
  return static_cast<uint64_t>(double(rte_get_tsc_cycles()) * ns_per_cycle);
}

// UDP source port: a hash of the QPN in the dynamic range, so that NIC RSS
// keeps a QP on one queue (IBTA A17.2.3 leaves the choice to the sender).
uint16_t UdpSourcePort(uint32_t qpn) {
  uint32_t h = qpn * 0x9E3779B1u;
  return static_cast<uint16_t>(0xC000 | ((h >> 16) & 0x3FFF));
}

}  // namespace

Engine::Engine(const EngineConfig& config)
    : core_(config),
      pd_in_use_(1),
      random_(RandomSeed(config.random_seed)),
      doorbells_(2 * size_t{config.max_qps}),
      completions_(core_),
      frames_(core_, responder_, completer_),
      requester_(core_, frames_, completions_, ahs_),
      completer_(core_, completions_, requester_),
      responder_(core_, frames_, completions_) {}

Engine::~Engine() {
  ProgressToken token(core_);
  frames_.FreeAll();
}

uint64_t Engine::ReadClock() const { return core_.config.clock_ns ? core_.config.clock_ns() : TscNanoseconds(); }

// ---------------------------------------------------------------- control path

StatusOr<PdHandle> Engine::AllocPd() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  // Handles go round a large space rather than reusing the lowest free one,
  // so that a freed handle is not at once another PD's (a stale holder of it
  // must not reach the new PD's memory).
  for (uint32_t tries = 0; tries < kMaxPds; ++tries) {
    const PdHandle pd = next_pd_;
    next_pd_ = next_pd_ + 1 >= kMaxPds ? 1 : next_pd_ + 1;
    if (pd >= pd_in_use_.size()) pd_in_use_.resize(pd + 1, false);
    if (!pd_in_use_[pd]) {
      pd_in_use_[pd] = true;
      return pd;
    }
  }
  return ResourceExhausted("no free protection domain");
}

Status Engine::DeallocPd(PdHandle pd) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (pd == 0 || pd >= pd_in_use_.size() || !pd_in_use_[pd]) return InvalidArgument("no such PD");
  // ibv_dealloc_pd(3): EBUSY while anything still belongs to the PD.
  for (const auto& qp : qp_storage_) {
    if (qp && qp->pd == pd) return Busy("PD still used by a QP");
  }
  for (const auto& srq : srqs_) {
    if (srq && srq->pd == pd) return Busy("PD still used by an SRQ");
  }
  for (const AddressHandle& ah : ahs_) {
    if (ah.valid && ah.pd == pd) return Busy("PD still used by an AH");
  }
  if (core_.mrs.RegisteredInPd(pd) > 0) return Busy("PD still has memory regions");
  pd_in_use_[pd] = false;
  return Status::Ok();
}

StatusOr<MrKeys> Engine::RegMr(PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access) {
  // Held across the registration, so that DeallocPd cannot free the PD in
  // between and leave a region in a dead (later reused) PD.
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (pd == 0 || pd >= pd_in_use_.size() || !pd_in_use_[pd]) return InvalidArgument("no such PD");
  return core_.mrs.Register(pd, addr, length, iova, access);
}

Status Engine::DeregMr(uint32_t lkey) {
  // Between polls, so no packet of the current burst still uses the region.
  ProgressToken token(core_);
  return core_.mrs.Deregister(lkey);
}

StatusOr<CompletionQueue*> Engine::CreateCq(uint32_t min_entries) {
  if (min_entries == 0 || min_entries > (1u << 22)) return InvalidArgument("CQ size out of range");
  std::lock_guard<std::mutex> lock(control_mutex_);
  cqs_.push_back(std::make_unique<CompletionQueue>(min_entries));
  return cqs_.back().get();
}

Status Engine::AttachCompletionSinks(CompletionQueue* cq, cq::CompletionSink* cq_sink,
                                     cq::CompletionSink* counter_sink) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  cq->AttachSinks(cq_sink, counter_sink);
  std::vector<CompletionQueue*>& forwarding = core_.forwarding_cqs;
  forwarding.erase(std::remove(forwarding.begin(), forwarding.end(), cq), forwarding.end());
  if (cq->has_sinks()) core_.forwarding_cqs.push_back(cq);
  return Status::Ok();
}

Status Engine::DestroyCq(CompletionQueue* cq) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& qp : qp_storage_) {
    if (qp && (qp->send_cq == cq || qp->recv_cq == cq)) {
      return Busy("CQ still used by a QP");
    }
  }
  auto it = std::find_if(cqs_.begin(), cqs_.end(), [cq](const auto& p) { return p.get() == cq; });
  if (it == cqs_.end()) return InvalidArgument("no such CQ");
  {
    ProgressToken token(core_);
    std::vector<CompletionQueue*>& forwarding = core_.forwarding_cqs;
    forwarding.erase(std::remove(forwarding.begin(), forwarding.end(), cq), forwarding.end());
  }
  cqs_.erase(it);
  return Status::Ok();
}

StatusOr<SharedReceiveQueue*> Engine::CreateSrq(PdHandle pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit) {
  if (max_wr == 0 || max_wr > 16384) return InvalidArgument("SRQ max_wr out of range");
  if (max_sge == 0 || max_sge > kMaxRecvSge) return InvalidArgument("SRQ max_sge out of range");
  if (limit > max_wr) return InvalidArgument("SRQ limit above max_wr");
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (pd == 0 || pd >= pd_in_use_.size() || !pd_in_use_[pd]) return InvalidArgument("no such PD");
  srqs_.push_back(std::make_unique<SharedReceiveQueue>(pd, max_wr, max_sge, limit));
  return srqs_.back().get();
}

Status Engine::DestroySrq(SharedReceiveQueue* srq) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& qp : qp_storage_) {
    if (qp && qp->srq == srq) return Busy("SRQ still used by a QP");
  }
  auto it = std::find_if(srqs_.begin(), srqs_.end(), [srq](const auto& p) { return p.get() == srq; });
  if (it == srqs_.end()) return InvalidArgument("no such SRQ");
  srqs_.erase(it);
  return Status::Ok();
}

StatusOr<QueuePair*> Engine::CreateQp(const QpInitAttr& init) {
  if (init.type != IBV_QPT_RC && init.type != IBV_QPT_UC && init.type != IBV_QPT_UD) {
    return Status(StatusCode::kNotSupported, "QP type not supported");
  }
  if (init.send_cq == nullptr || init.recv_cq == nullptr) return InvalidArgument("QP needs a send and a recv CQ");
  const ibv_qp_cap& c = init.cap;
  if (c.max_send_wr == 0 || c.max_send_wr > 16384) return InvalidArgument("max_send_wr out of range");
  if (!init.srq && (c.max_recv_wr == 0 || c.max_recv_wr > 16384)) return InvalidArgument("max_recv_wr out of range");
  if (c.max_send_sge > kMaxSendSge || c.max_recv_sge > kMaxRecvSge) return InvalidArgument("too many SGEs");
  if (c.max_inline_data > kMaxInlineData) return InvalidArgument("max_inline_data above the device limit");
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (init.pd == 0 || init.pd >= pd_in_use_.size() || !pd_in_use_[init.pd]) return InvalidArgument("no such PD");

  // Find a free slot; QPNs grow so that a destroyed QP's number is not reused
  // at once (stale packets then find no QP).
  uint32_t qpn = 0;
  if (init.fixed_qpn != 0) {
    // QP1, the GSI QP (IBTA 13.5.1): reserved, so never handed out below.
    if (init.fixed_qpn != 1 || init.type != IBV_QPT_UD) {
      return InvalidArgument("only QP 1 (UD, the GSI QP) may be asked for by number");
    }
    if (core_.qp_table[1 % core_.config.max_qps] != nullptr) {
      return AlreadyExists(core_.qp_table[1 % core_.config.max_qps]->qpn == 1 ? "QP 1 exists" : "QP 1's slot is taken");
    }
    qpn = 1;
  }
  // A random 24-bit QPN (0x11 and up: 0 and 1 are the special QPs) whose
  // table slot is free: random draws first, then a walk from a random point,
  // so that a nearly full table still finds the last free slot. A QPN that
  // cannot be guessed makes a blind forged packet miss (the address and
  // P_Key checks of HandleFrame are the other half).
  // A leased range (EngineConfig::qpn_base/qpn_count) narrows the draw.
  const EngineConfig& config = core_.config;
  const uint32_t lowest = std::max<uint32_t>(0x11, config.qpn_base);
  const uint32_t highest =
      config.qpn_count == 0 ? 0xFFFFFF : std::min<uint32_t>(0xFFFFFF, config.qpn_base + config.qpn_count - 1);
  if (lowest > highest) return ResourceExhausted("the leased QPN range is empty");
  std::uniform_int_distribution<uint32_t> any_qpn(lowest, highest);
  uint32_t candidate = any_qpn(random_);
  const uint32_t walk = std::min<uint32_t>(core_.config.max_qps, highest - lowest + 1);
  for (uint32_t tries = 0; qpn == 0 && tries < 32 + walk; ++tries) {
    if (tries < 32) {
      candidate = any_qpn(random_);
    } else {
      candidate = candidate + 1 > highest ? lowest : candidate + 1;
    }
    // QP1's slot stays free for the GSI QP.
    if (candidate % core_.config.max_qps == 1 % core_.config.max_qps) continue;
    if (core_.qp_table[candidate % core_.config.max_qps] == nullptr) qpn = candidate;
  }
  if (qpn == 0) return ResourceExhausted("no free QP");

  QpCaps caps;
  caps.max_send_wr = static_cast<uint32_t>(RoundUpPow2(c.max_send_wr));
  caps.max_recv_wr = init.srq ? 0 : static_cast<uint32_t>(RoundUpPow2(c.max_recv_wr));
  caps.max_send_sge = std::max<uint32_t>(c.max_send_sge, 1);
  caps.max_recv_sge = std::max<uint32_t>(c.max_recv_sge, 1);
  caps.max_inline_data = c.max_inline_data;
  auto qp = std::make_unique<QueuePair>(qpn, init.type, init.pd, init.send_cq, init.recv_cq, init.srq,
                                        init.sq_sig_all, caps);
  qp->path.udp_source_port = UdpSourcePort(qpn);
  qp->mtu_bytes = MtuBytes(core_.limits.max_mtu);
  qp->resp.atomics.resize(core_.config.atomic_replay_entries);
  if (qpn == 1) qp->ud_sources.resize(caps.max_recv_wr);
  QueuePair* raw = qp.get();
  {
    ProgressToken token(core_);
    core_.qp_table[qpn % core_.config.max_qps] = raw;
  }
  qp_storage_.push_back(std::move(qp));
  return raw;
}

bool Engine::ResolvePath(const ibv_ah_attr& ah, PathInfo* path, std::string* why, const MacAddress* dmac) const {
  if (!ah.is_global) {
    *why = "RoCE addresses need a GRH (is_global = 1)";
    return false;
  }
  if (ah.grh.sgid_index >= core_.config.gids.size()) {
    *why = "sgid_index " + std::to_string(ah.grh.sgid_index) + " is not in the GID table";
    return false;
  }
  Gid dgid;
  std::memcpy(dgid.data(), ah.grh.dgid.raw, 16);
  path->dgid = dgid;
  path->sgid = core_.config.gids[ah.grh.sgid_index];
  path->ipv6 = !IsIpv4MappedGid(path->sgid);
  if (path->ipv6 == IsIpv4MappedGid(dgid)) {
    *why = "source and destination GIDs are of different IP versions";
    return false;
  }
  path->traffic_class = ah.grh.traffic_class;
  path->hop_limit = ah.grh.hop_limit ? ah.grh.hop_limit : 64;
  path->flow_label = ah.grh.flow_label & 0xFFFFF;
  if (core_.IsLoopbackGid(dgid) && (dmac == nullptr || *dmac == core_.config.mac)) {
    path->dmac = core_.config.mac;
    path->loopback = true;
    return true;
  }
  if (dmac != nullptr) {
    path->dmac = *dmac;
    return true;
  }
  // The neighbour table gives the MAC (static entries, or ARP/ND in pmd/).
  for (const auto& [ip, mac] : neighbors_) {
    if (ip == dgid) {
      path->dmac = mac;
      return true;
    }
  }
  *why = "no neighbour entry (MAC) for the destination GID";
  return false;
}

bool Engine::LookupNeighbor(const Gid& ip, MacAddress* mac) const {
  if (core_.IsLoopbackGid(ip)) {
    if (mac != nullptr) *mac = core_.config.mac;
    return true;
  }
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& entry : neighbors_) {
    if (entry.first == ip) {
      if (mac != nullptr) *mac = entry.second;
      return true;
    }
  }
  return false;
}

std::vector<QueuePair*> Engine::QueuePairs() const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  std::vector<QueuePair*> out;
  for (const auto& qp : qp_storage_) out.push_back(qp.get());
  return out;
}

std::vector<QpStats> Engine::QpStatsSnapshot() const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  std::vector<QpStats> out;
  out.reserve(qp_storage_.size());
  for (const auto& qp : qp_storage_) {
    QpStats s;
    s.qpn = qp->qpn;
    s.type = qp->type;
    s.state = qp->state.load(std::memory_order_acquire);
    s.dest_qpn = qp->attr.dest_qp_num;
    s.counters = qp->counters;
    out.push_back(s);
  }
  return out;
}

namespace {

// The destination GID of an address vector, if it is one that needs a MAC.
bool AddressVectorGid(const ibv_ah_attr& ah, Gid* gid) {
  if (!ah.is_global) return false;
  std::memcpy(gid->data(), ah.grh.dgid.raw, 16);
  return true;
}

}  // namespace

Status Engine::ResolveNeighborIfMissing(const ibv_ah_attr& ah, const char* call) {
  Gid dgid;
  // LookupNeighbor knows our own GIDs: loopback needs no ARP or ND.
  if (!core_.config.resolve_neighbor || !AddressVectorGid(ah, &dgid) || LookupNeighbor(dgid, nullptr)) {
    return Status::Ok();
  }
  // Neither lock is held here: the resolver may wait for an answer, and in
  // inline mode it polls this engine itself.
  Status s = core_.config.resolve_neighbor(dgid);
  if (!s.ok()) return Status(s.code(), std::string(call) + ": " + s.message());
  return Status::Ok();
}

void Engine::AddNeighbor(const Gid& ip, const MacAddress& mac) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (auto& entry : neighbors_) {
    if (entry.first == ip) {
      entry.second = mac;
      return;
    }
  }
  // Bounded: the oldest entry makes room (the table is fed by ARP/ND, which
  // peers influence).
  if (neighbors_.size() >= kMaxNeighbors) neighbors_.erase(neighbors_.begin());
  neighbors_.emplace_back(ip, mac);
}

bool Engine::OwnsQpLocked(const QueuePair* qp) const {
  return std::any_of(qp_storage_.begin(), qp_storage_.end(), [qp](const auto& p) { return p.get() == qp; });
}

Status Engine::ModifyQp(QueuePair* qp, const ibv_qp_attr& attr, int mask, uint32_t expected_qpn) {
  if (mask & IBV_QP_AV) UROCE_RETURN_IF_ERROR(ResolveNeighborIfMissing(attr.ah_attr, "ibv_modify_qp"));
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!OwnsQpLocked(qp) || (expected_qpn != kAnyQpn && qp->qpn != expected_qpn)) return InvalidArgument("no such QP");
  ProgressToken token(core_);
  const ibv_qp_state current = qp->state.load(std::memory_order_relaxed);
  auto next = ValidateQpModify(qp->type, current, attr, mask, core_.limits);
  if (!next.ok()) return next.status();

  PathInfo path = qp->path;
  if (mask & IBV_QP_AV) {
    std::string why;
    if (!ResolvePath(attr.ah_attr, &path, &why)) return InvalidArgument("ibv_modify_qp: " + why);
  }
  // Apply (IBTA 11.2.5.2): copy the given attributes.
  ibv_qp_attr& a = qp->attr;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) a.port_num = attr.port_num;
  if (mask & IBV_QP_QKEY) a.qkey = attr.qkey;
  if (mask & IBV_QP_AV) {
    a.ah_attr = attr.ah_attr;
    path.udp_source_port = qp->path.udp_source_port;
    qp->path = path;
  }
  if (mask & IBV_QP_PATH_MTU) {
    a.path_mtu = attr.path_mtu;
    qp->mtu_bytes = MtuBytes(attr.path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) {
    a.retry_cnt = attr.retry_cnt;
    qp->req.retries_left = attr.retry_cnt;
  }
  if (mask & IBV_QP_RNR_RETRY) {
    a.rnr_retry = attr.rnr_retry;
    qp->req.rnr_retries_left = attr.rnr_retry;
  }
  if (mask & IBV_QP_RQ_PSN) {
    a.rq_psn = attr.rq_psn;
    qp->resp.expected_psn = Psn(attr.rq_psn);
    qp->resp.ack_psn = Psn(attr.rq_psn) - 1;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN) {
    a.sq_psn = attr.sq_psn;
    qp->req.psn = Psn(attr.sq_psn);
    qp->req.unacked = Psn(attr.sq_psn);
    qp->req.sent_limit = Psn(attr.sq_psn);
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  }
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) a.en_sqd_async_notify = attr.en_sqd_async_notify;

  const ibv_qp_state target = *next;
  if (target == IBV_QPS_RTR && current == IBV_QPS_INIT) {
    qp->resp.reads.assign(2 * std::max<uint32_t>(a.max_dest_rd_atomic, 1), ReadResponseJob{});
    qp->resp.read_history.assign(2 * std::max<uint32_t>(a.max_dest_rd_atomic, 1), ReadRecord{});
    qp->resp.read_history_next = 0;
    qp->resp.reads_head = qp->resp.reads_count = qp->resp.duplicate_jobs = 0;
  }
  if (target == IBV_QPS_RESET) {
    // Back to a clean QP (IBTA 10.3.1.1): queues emptied without completions.
    qp->req = RequesterState{};
    qp->req.window.reset(new SendSlot[qp->caps.max_send_wr]);
    qp->req.window_mask = qp->caps.max_send_wr - 1;
    auto atomics = std::move(qp->resp.atomics);
    qp->resp = ResponderState{};
    qp->resp.atomics = std::move(atomics);
    std::fill(qp->resp.atomics.begin(), qp->resp.atomics.end(), AtomicReplay{});
    SendWqe s;
    while (qp->send_ring.TryPop(&s)) {}
    RecvWqe r;
    while (qp->recv_ring.TryPop(&r)) {}
    qp->send_credits_used.store(0, std::memory_order_release);
    qp->recv_credits_used.store(0, std::memory_order_release);
  }
  qp->state.store(target, std::memory_order_release);
  if (target == IBV_QPS_ERR && current != IBV_QPS_ERR) qp->flush_pending = true;
  core_.MarkBusy(qp);  // the next poll looks at it in its new state (we hold the token)
  return Status::Ok();
}

Status Engine::QueryQp(QueuePair* qp, ibv_qp_attr* attr, ibv_qp_init_attr* init) const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!OwnsQpLocked(qp)) return InvalidArgument("no such QP");
  ProgressToken token(core_);
  if (attr) {
    *attr = qp->attr;
    attr->qp_state = qp->state.load(std::memory_order_acquire);
    attr->cur_qp_state = attr->qp_state;
    attr->path_mtu = qp->attr.path_mtu;
    attr->cap.max_send_wr = qp->caps.max_send_wr;
    attr->cap.max_recv_wr = qp->caps.max_recv_wr;
    attr->cap.max_send_sge = qp->caps.max_send_sge;
    attr->cap.max_recv_sge = qp->caps.max_recv_sge;
    attr->cap.max_inline_data = qp->caps.max_inline_data;
    attr->sq_draining = 0;
  }
  if (init) {
    std::memset(init, 0, sizeof(*init));
    init->qp_type = qp->type;
    init->sq_sig_all = qp->sq_sig_all;
    init->cap = attr ? attr->cap : ibv_qp_cap{qp->caps.max_send_wr, qp->caps.max_recv_wr, qp->caps.max_send_sge,
                                              qp->caps.max_recv_sge, qp->caps.max_inline_data};
  }
  return Status::Ok();
}

Status Engine::DestroyQp(QueuePair* qp) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto it = std::find_if(qp_storage_.begin(), qp_storage_.end(), [qp](const auto& p) { return p.get() == qp; });
  if (it == qp_storage_.end()) return InvalidArgument("no such QP");
  {
    ProgressToken token(core_);
    core_.qp_table[qp->qpn % core_.config.max_qps] = nullptr;
    // Its doorbell may wait in the ring: taken first, so that no pointer to
    // it stays behind.
    TakeDoorbells();
    core_.busy_qps.erase(std::remove(core_.busy_qps.begin(), core_.busy_qps.end(), qp), core_.busy_qps.end());
    responder_.ForgetQp(qp);
  }
  qp_storage_.erase(it);
  return Status::Ok();
}

StatusOr<uint32_t> Engine::CreateAh(PdHandle pd, const ibv_ah_attr& attr) {
  UROCE_RETURN_IF_ERROR(ResolveNeighborIfMissing(attr, "ibv_create_ah"));
  return CreateAhWithMac(pd, attr, nullptr);
}

StatusOr<uint32_t> Engine::CreateAhToMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress& dmac) {
  return CreateAhWithMac(pd, attr, &dmac);
}

StatusOr<uint32_t> Engine::CreateAhWithMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress* dmac) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (pd == 0 || pd >= pd_in_use_.size() || !pd_in_use_[pd]) return InvalidArgument("no such PD");
  AddressHandle ah;
  ah.pd = pd;
  std::string why;
  if (!ResolvePath(attr, &ah.path, &why, dmac)) return InvalidArgument("ibv_create_ah: " + why);
  ah.valid = true;
  ProgressToken token(core_);
  for (uint32_t i = 1; i < ahs_.size(); ++i) {
    if (!ahs_[i].valid) {
      ahs_[i] = ah;
      return i;
    }
  }
  if (ahs_.empty()) ahs_.emplace_back();  // handle 0 is never valid
  if (ahs_.size() == ahs_.capacity()) ahs_.reserve(std::max<size_t>(64, ahs_.size() * 2));
  ahs_.push_back(ah);
  return static_cast<uint32_t>(ahs_.size() - 1);
}

Status Engine::DestroyAh(uint32_t handle) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  if (handle == 0 || handle >= ahs_.size() || !ahs_[handle].valid) return InvalidArgument("no such AH");
  ahs_[handle].valid = false;
  return Status::Ok();
}

bool Engine::UdSourceMac(const QueuePair* qp, uint64_t wr_id, MacAddress* mac) const {
  if (qp->ud_sources.empty()) return false;
  const QueuePair::UdSource& source = qp->ud_sources[wr_id % qp->ud_sources.size()];
  if (source.wr_id != wr_id) return false;
  *mac = source.mac;
  return true;
}

EngineCounters Engine::counters() const {
  ProgressToken token(core_);
  return core_.counters;
}

// ---------------------------------------------------------------- posting

int Engine::PostSend(QueuePair* qp, const ibv_send_wr* wr, const ibv_send_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    const ibv_qp_state state = qp->state.load(std::memory_order_acquire);
    // ibv_post_send(3): the QP must be able to send; in ERR the request is
    // accepted and completes with IBV_WC_WR_FLUSH_ERR.
    if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
    const bool rc = qp->type == IBV_QPT_RC;
    switch (RawEnum(wr->opcode)) {  // any value may come from a C caller
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM:
        break;
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (qp->type == IBV_QPT_UD) return EINVAL;
        break;
      case IBV_WR_SEND_WITH_INV:
      case IBV_WR_RDMA_READ:
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        if (!rc) return EINVAL;
        break;
      default:
        return EINVAL;
    }
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->caps.max_send_sge) return EINVAL;
    if (wr->num_sge > 0 && wr->sg_list == nullptr) return EINVAL;
    SendWqe wqe;
    wqe.wr_id = wr->wr_id;
    wqe.opcode = wr->opcode;
    wqe.send_flags = wr->send_flags;
    if (qp->sq_sig_all) wqe.send_flags |= IBV_SEND_SIGNALED;
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
    if (total > (1ull << 31)) return EINVAL;  // max_msg_sz
    wqe.total_length = total;
    const bool is_atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    if (wr->send_flags & IBV_SEND_INLINE) {
      if (is_atomic || wr->opcode == IBV_WR_RDMA_READ) return EINVAL;
      if (total > qp->caps.max_inline_data) return EINVAL;
      uint64_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        std::memcpy(wqe.inline_data + off, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                    wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
      wqe.num_sge = 0;
    } else {
      wqe.num_sge = static_cast<uint32_t>(wr->num_sge);
      for (int i = 0; i < wr->num_sge; ++i) {
        wqe.sge[i] = Sge{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
      }
    }
    if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      wqe.imm_data_be = wr->imm_data;
    }
    if (wr->opcode == IBV_WR_SEND_WITH_INV) wqe.invalidate_rkey = wr->invalidate_rkey;
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
        wr->opcode == IBV_WR_RDMA_READ) {
      wqe.remote_addr = wr->wr.rdma.remote_addr;
      wqe.rkey = wr->wr.rdma.rkey;
    }
    if (is_atomic) {
      // IBTA 9.4.5: an atomic operates on 8 bytes; the local buffer takes the
      // original value.
      if (wr->num_sge != 1 || wr->sg_list[0].length != 8) return EINVAL;
      wqe.remote_addr = wr->wr.atomic.remote_addr;
      wqe.rkey = wr->wr.atomic.rkey;
      wqe.compare_add = wr->wr.atomic.compare_add;
      wqe.swap = wr->wr.atomic.swap;
    }
    if (qp->type == IBV_QPT_UD) {
      if (wr->wr.ud.ah == nullptr) return EINVAL;
      if (total > qp->mtu_bytes) return EINVAL;  // one packet per UD message
      // The AH handle travels in the ibv_ah's handle field (set by the API).
      wqe.ah_handle = wr->wr.ud.ah->handle;
      wqe.remote_qpn = wr->wr.ud.remote_qpn & 0xFFFFFF;
      wqe.remote_qkey = wr->wr.ud.remote_qkey;
    }
    // Take a credit; refuse when the send queue is full.
    uint32_t used = qp->send_credits_used.load(std::memory_order_relaxed);
    do {
      if (used >= qp->caps.max_send_wr) return ENOMEM;
    } while (!qp->send_credits_used.compare_exchange_weak(used, used + 1, std::memory_order_acquire));
    if (!qp->send_ring.TryPush(wqe)) {
      qp->send_credits_used.fetch_sub(1, std::memory_order_release);
      return ENOMEM;
    }
    RingDoorbell(qp);
  }
  *bad_wr = nullptr;
  return 0;
}

void Engine::RingDoorbell(QueuePair* qp) {
  // seq_cst, against Retire's clear-then-look: either the engine sees our
  // request in the ring, or we see its clear and hand the QP over again.
  if (qp->doorbell.exchange(true, std::memory_order_seq_cst)) return;
  // Cannot fail: a QP is queued only when its doorbell goes from clear to
  // set, and it is cleared only by Retire, at most once per poll; every poll
  // first takes what is queued. So a QP has at most two entries (one queued
  // before its Retire in this poll, one after), and the ring holds 2 max_qps.
  (void)doorbells_.TryPush(qp);
}

void Engine::TakeDoorbells() {
  QueuePair* qp = nullptr;
  while (doorbells_.TryPop(&qp)) core_.MarkBusy(qp);
}

bool Engine::Retire(QueuePair* qp) {
  if (qp->flush_pending || qp->resp.reads_count != 0) return false;
  const RequesterState& r = qp->req;
  if (r.head != r.tail || r.rnr_resume_ns != 0) return false;
  const bool error = qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR;
  auto posted = [qp, error] {
    // In the error state new receives complete as flushed too (RunQp).
    return qp->send_ring.ApproxSize() != 0 || (error && qp->recv_ring.ApproxSize() != 0);
  };
  if (posted()) return false;
  // Both sides exchange (seq_cst): if a poster's exchange came first, ours
  // reads it and synchronizes with it, so its request is visible to the
  // look below; if ours came first, the poster reads false and queues it.
  (void)qp->doorbell.exchange(false, std::memory_order_seq_cst);
  if (posted()) {
    // A request came between the look and the clear: it stays, and so does
    // the doorbell (a poster that saw it clear queued the QP too; harmless).
    qp->doorbell.store(true, std::memory_order_relaxed);
    return false;
  }
  qp->busy = false;
  return true;
}

namespace {

bool CopyRecv(const ibv_recv_wr* wr, uint32_t max_sge, RecvWqe* wqe) {
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge) return false;
  if (wr->num_sge > 0 && wr->sg_list == nullptr) return false;
  wqe->wr_id = wr->wr_id;
  wqe->num_sge = static_cast<uint32_t>(wr->num_sge);
  wqe->total_length = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    wqe->sge[i] = Sge{wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    wqe->total_length += wr->sg_list[i].length;
  }
  return true;
}

}  // namespace

int Engine::PostRecv(QueuePair* qp, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (qp->srq != nullptr) return EINVAL;  // post to the SRQ instead
    if (qp->state.load(std::memory_order_acquire) == IBV_QPS_RESET) return EINVAL;
    RecvWqe wqe;
    if (!CopyRecv(wr, qp->caps.max_recv_sge, &wqe)) return EINVAL;
    uint32_t used = qp->recv_credits_used.load(std::memory_order_relaxed);
    do {
      if (used >= qp->caps.max_recv_wr) return ENOMEM;
    } while (!qp->recv_credits_used.compare_exchange_weak(used, used + 1, std::memory_order_acquire));
    if (!qp->recv_ring.TryPush(wqe)) {
      qp->recv_credits_used.fetch_sub(1, std::memory_order_release);
      return ENOMEM;
    }
    // Only in the error state does a poll have to see a receive (to flush
    // it); otherwise the responder takes it when a message comes.
    if (qp->state.load(std::memory_order_acquire) == IBV_QPS_ERR) RingDoorbell(qp);
  }
  *bad_wr = nullptr;
  return 0;
}

int Engine::PostSrqRecv(SharedReceiveQueue* srq, const ibv_recv_wr* wr, const ibv_recv_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    RecvWqe wqe;
    if (!CopyRecv(wr, srq->max_sge, &wqe)) return EINVAL;
    uint32_t posted = srq->posted.load(std::memory_order_relaxed);
    do {
      if (posted >= srq->max_wr) return ENOMEM;
    } while (!srq->posted.compare_exchange_weak(posted, posted + 1, std::memory_order_acquire));
    if (!srq->ring.TryPush(wqe)) {
      srq->posted.fetch_sub(1, std::memory_order_release);
      return ENOMEM;
    }
  }
  *bad_wr = nullptr;
  return 0;
}

// ---------------------------------------------------------------- poll loop




unsigned Engine::Poll() {
  bool expected = false;
  if (!core_.progress_busy.compare_exchange_strong(expected, true, std::memory_order_acquire)) return 0;
  core_.now_ns = ReadClock();
  const uint64_t before = core_.counters.rx_frames + core_.counters.tx_frames;

  frames_.FlushTx();  // what a full queue left last time goes first
  frames_.ReceiveLoopback();
  frames_.ReceiveBurst();
  responder_.SendPendingAcks();
  TakeDoorbells();
  for (size_t i = 0; i < core_.busy_qps.size();) {
    QueuePair* qp = core_.busy_qps[i];
    RunQp(qp);
    if (Retire(qp)) {
      core_.busy_qps[i] = core_.busy_qps.back();
      core_.busy_qps.pop_back();
      continue;
    }
    ++i;
  }
  responder_.SendPendingAcks();
  frames_.StageRawFrames();
  frames_.FlushTx();
  for (CompletionQueue* cq : core_.forwarding_cqs) cq->ForwardToSinks();

  const unsigned moved = static_cast<unsigned>(core_.counters.rx_frames + core_.counters.tx_frames - before);
  core_.progress_busy.store(false, std::memory_order_release);
  return moved;
}



void Engine::RunQp(QueuePair* qp) {
  if (qp->flush_pending) {
    qp->flush_pending = false;
    completions_.RaiseAsync(IBV_EVENT_QP_FATAL, qp->qpn, qp);
    completions_.FlushQueues(qp);
  }
  const ibv_qp_state state = qp->state.load(std::memory_order_relaxed);
  if (state == IBV_QPS_ERR) {
    completions_.FlushQueues(qp);  // requests posted in ERR complete as flushed
    return;
  }
  // The responder works from RTR on (IBTA 10.3.1.2: a QP in RTR processes
  // incoming requests), and READ responses and atomic acknowledgements are
  // its answers: a passive side that never leaves RTR (perftest's
  // ib_read_bw and ib_atomic_bw servers) must still send them. Only the
  // requester and its timers wait for RTS.
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS && state != IBV_QPS_SQD) return;
  if (state != IBV_QPS_RTR) {
    completer_.RunTimers(qp);
    requester_.Run(qp);
  }
  responder_.RunReadResponses(qp);
}

}  // namespace uroce::transport
