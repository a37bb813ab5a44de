// Device: the control calls on the engine's objects (AllocPd ... DestroyAh,
// neighbours; ModifyQp and QueryQp are in modify_qp.cc). Control path (any
// thread): calls serialize on control_mutex_, and take the progress token
// (ProgressToken) for whatever the engine thread also reads (the QP table,
// the AH table).
#include "transport/device.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "transport/device.h"

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

// UDP source port: a hash of the QPN in the dynamic range, so that NIC RSS
// keeps a QP on one queue (IBTA A17.2.3 leaves the choice to the sender).
uint16_t UdpSourcePort(uint32_t qpn) {
  uint32_t h = qpn * 0x9E3779B1u;
  return static_cast<uint16_t>(0xC000 | ((h >> 16) & 0x3FFF));
}

// The destination GID of an address vector, if it is one that needs a MAC.
bool AddressVectorGid(const ibv_ah_attr& ah, Gid* gid) {
  if (!ah.is_global) return false;
  std::memcpy(gid->data(), ah.grh.dgid.raw, 16);
  return true;
}

// What a RoCE address vector needs whatever its neighbour: a GRH, a source
// GID in our table, a destination of the same IP version that is an address
// at all (the all-zero GID, IPv6's unspecified address, is none). Checked
// before neighbour resolution: ibv_create_ah with a zero destination GID
// fails at once, not after 3 s of ND with EAGAIN (UCX makes such AHs while
// it probes GIDs).
bool CheckAddressVector(const ibv_ah_attr& ah, const std::vector<Gid>& gids, std::string* why) {
  if (!ah.is_global) {
    *why = "RoCE addresses need a GRH (is_global = 1)";
    return false;
  }
  if (ah.grh.sgid_index >= gids.size()) {
    *why = "sgid_index " + std::to_string(ah.grh.sgid_index) + " is not in the GID table";
    return false;
  }
  Gid dgid;
  std::memcpy(dgid.data(), ah.grh.dgid.raw, 16);
  if (dgid == Gid{}) {
    *why = "the destination GID is all zeros";
    return false;
  }
  if (IsIpv4MappedGid(gids[ah.grh.sgid_index]) != IsIpv4MappedGid(dgid)) {
    *why = "source and destination GIDs are of different IP versions";
    return false;
  }
  return true;
}

}  // namespace

ObjectTables::ObjectTables(uint64_t random_seed) : pd_in_use(1), random(RandomSeed(random_seed)) {}

Device::Device(EngineCore& core, Responder& responder, MpmcRing<QueuePair*>& doorbells)
    : core_(core), responder_(responder), doorbells_(doorbells), tables_(core.config.random_seed) {}

StatusOr<PdHandle> Device::AllocPd() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  // Handles go round a large space rather than reusing the lowest free one,
  // so that a freed handle is not at once another PD's (a stale holder of it
  // must not reach the new PD's memory).
  for (uint32_t tries = 0; tries < ObjectTables::kMaxPds; ++tries) {
    const PdHandle pd = tables_.next_pd;
    tables_.next_pd = tables_.next_pd + 1 >= ObjectTables::kMaxPds ? 1 : tables_.next_pd + 1;
    if (pd >= tables_.pd_in_use.size()) tables_.pd_in_use.resize(pd + 1, false);
    if (!tables_.pd_in_use[pd]) {
      tables_.pd_in_use[pd] = true;
      return pd;
    }
  }
  return ResourceExhausted("no free protection domain");
}

Status Device::DeallocPd(PdHandle pd) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  // ibv_dealloc_pd(3): EBUSY while anything still belongs to the PD.
  for (const auto& qp : tables_.qp_storage) {
    if (qp && qp->pd == pd) return Busy("PD still used by a QP");
  }
  for (const auto& srq : tables_.srqs) {
    if (srq && srq->pd == pd) return Busy("PD still used by an SRQ");
  }
  for (const AddressHandle& ah : tables_.ahs) {
    if (ah.valid && ah.pd == pd) return Busy("PD still used by an AH");
  }
  if (core_.mrs.RegisteredInPd(pd) > 0) return Busy("PD still has memory regions");
  tables_.pd_in_use[pd] = false;
  return Status::Ok();
}

StatusOr<MrKeys> Device::RegMr(PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access) {
  // Held across the registration, so that DeallocPd cannot free the PD in
  // between and leave a region in a dead (later reused) PD.
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  return core_.mrs.Register(pd, addr, length, iova, access);
}

Status Device::DeregMr(uint32_t lkey) {
  // Between polls, so no packet of the current burst still uses the region.
  ProgressToken token(core_);
  return core_.mrs.Deregister(lkey);
}

Status Device::ReregMr(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access) {
  std::lock_guard<std::mutex> lock(control_mutex_);  // the PD stays alive, as in RegMr
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  // Between polls: no packet of the current burst sees half an update.
  ProgressToken token(core_);
  return core_.mrs.Reregister(lkey, pd, addr, length, iova, access);
}

MrCheck Device::CheckLocalMr(uint32_t lkey, PdHandle pd, uint64_t addr, uint64_t length, int access) const {
  uint8_t* host = nullptr;
  return core_.mrs.CheckLocal(lkey, pd, addr, length, access, &host);
}

StatusOr<uint32_t> Device::AllocMw(PdHandle pd, int type) {
  std::lock_guard<std::mutex> lock(control_mutex_);  // the PD stays alive, as in RegMr
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  return core_.mrs.AllocateWindow(pd, type);
}

Status Device::DeallocMw(uint32_t rkey) {
  // Between polls: no packet of the current burst still goes through it.
  ProgressToken token(core_);
  return core_.mrs.DeallocateWindow(rkey);
}

StatusOr<CompletionQueue*> Device::CreateCq(uint32_t min_entries, RingAllocator allocator) {
  if (min_entries == 0 || min_entries > (1u << 22)) return InvalidArgument("CQ size out of range");
  auto cq = std::make_unique<CompletionQueue>(min_entries, std::move(allocator));
  if (!cq->has_ring()) return ResourceExhausted("the CQ's allocator gave no memory");
  std::lock_guard<std::mutex> lock(control_mutex_);
  tables_.cqs.push_back(std::move(cq));
  return tables_.cqs.back().get();
}

Status Device::AttachCompletionSinks(CompletionQueue* cq, cq::CompletionSink* cq_sink,
                                     cq::CompletionSink* counter_sink) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  cq->AttachSinks(cq_sink, counter_sink);
  std::vector<CompletionQueue*>& forwarding = core_.forwarding_cqs;
  forwarding.erase(std::remove(forwarding.begin(), forwarding.end(), cq), forwarding.end());
  if (cq->has_sinks()) core_.forwarding_cqs.push_back(cq);
  return Status::Ok();
}

Status Device::ResizeCq(CompletionQueue* cq, uint32_t min_entries) {
  if (min_entries == 0 || min_entries > (1u << 22)) return InvalidArgument("CQ size out of range");
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto it = std::find_if(tables_.cqs.begin(), tables_.cqs.end(), [cq](const auto& p) { return p.get() == cq; });
  if (it == tables_.cqs.end()) return InvalidArgument("no such CQ");
  // A libfabric CQ's completions live in the cq layer, sized by fi_cq_open.
  if (cq->has_sinks()) return InvalidArgument("CQ forwards to libfabric objects");
  // Between polls: the engine pushes nothing while the ring is replaced.
  ProgressToken token(core_);
  if (!cq->Resize(min_entries)) return InvalidArgument("more completions waiting than the new size holds");
  return Status::Ok();
}

Status Device::DestroyCq(CompletionQueue* cq) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& qp : tables_.qp_storage) {
    if (qp && (qp->send_cq == cq || qp->recv_cq == cq)) {
      return Busy("CQ still used by a QP");
    }
  }
  for (const auto& srq : tables_.srqs) {
    if (srq && srq->cq == cq) return Busy("CQ still used by an XRC SRQ");
  }
  auto it = std::find_if(tables_.cqs.begin(), tables_.cqs.end(), [cq](const auto& p) { return p.get() == cq; });
  if (it == tables_.cqs.end()) return InvalidArgument("no such CQ");
  {
    ProgressToken token(core_);
    std::vector<CompletionQueue*>& forwarding = core_.forwarding_cqs;
    forwarding.erase(std::remove(forwarding.begin(), forwarding.end(), cq), forwarding.end());
  }
  tables_.cqs.erase(it);
  return Status::Ok();
}

StatusOr<SharedReceiveQueue*> Device::CreateSrq(PdHandle pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                                                const RingAllocator& allocator) {
  if (max_wr == 0 || max_wr > 16384) return InvalidArgument("SRQ max_wr out of range");
  if (max_sge == 0 || max_sge > kMaxRecvSge) return InvalidArgument("SRQ max_sge out of range");
  if (limit > max_wr) return InvalidArgument("SRQ limit above max_wr");
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  auto srq = std::make_unique<SharedReceiveQueue>(pd, max_wr, max_sge, limit, allocator);
  if (!srq->has_ring()) return ResourceExhausted("the SRQ's allocator gave no memory");
  tables_.srqs.push_back(std::move(srq));
  return tables_.srqs.back().get();
}

Status Device::ResizeSrq(SharedReceiveQueue* srq, uint32_t max_wr) {
  if (max_wr == 0 || max_wr > 16384) return InvalidArgument("SRQ max_wr out of range");
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto it = std::find_if(tables_.srqs.begin(), tables_.srqs.end(), [srq](const auto& p) { return p.get() == srq; });
  if (it == tables_.srqs.end()) return InvalidArgument("no such SRQ");
  // No poster holds the ring and the engine takes nothing from it while it
  // is replaced; posters wait at the gate meanwhile.
  srq->ClosePostGate();
  Status status = Status::Ok();
  {
    ProgressToken token(core_);
    // IBTA 11.2.3.3 (Modify SRQ): not below the requests posted.
    if (max_wr < srq->ring().ApproxSize()) {
      status = InvalidArgument("more receives posted than the new size holds");
    } else if (!srq->Resize(max_wr)) {
      status = ResourceExhausted("the SRQ's allocator gave no memory");
    }
  }
  srq->OpenPostGate();
  return status;
}

Status Device::DestroySrq(SharedReceiveQueue* srq) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& qp : tables_.qp_storage) {
    if (qp && qp->srq == srq) return Busy("SRQ still used by a QP");
  }
  auto it = std::find_if(tables_.srqs.begin(), tables_.srqs.end(), [srq](const auto& p) { return p.get() == srq; });
  if (it == tables_.srqs.end()) return InvalidArgument("no such SRQ");
  if (srq->srqn != 0) {
    // An XRC SRQ: no XRCETH finds it from now on, and an XRC target QP
    // that was filling one of its receives loses it (the message's next
    // packet is then an invalid request), so no pointer to it stays behind.
    ProgressToken token(core_);
    core_.xrc_srq_table[srq->srqn % core_.config.max_qps] = nullptr;
    for (const auto& qp : tables_.qp_storage) {
      if (qp && qp->resp.xrc_srq == srq) {
        qp->resp.xrc_srq = nullptr;
        qp->resp.have_recv = false;
        qp->resp.recv_offset_valid = false;
      }
    }
  }
  tables_.srqs.erase(it);
  return Status::Ok();
}

StatusOr<uint32_t> Device::CreateXrcd() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (tables_.xrcds.size() >= core_.config.max_qps) return ResourceExhausted("no free XRC domain");
  uint32_t xrcd = tables_.next_xrcd;
  while (xrcd == 0 || std::find(tables_.xrcds.begin(), tables_.xrcds.end(), xrcd) != tables_.xrcds.end()) ++xrcd;
  tables_.next_xrcd = xrcd + 1;
  tables_.xrcds.push_back(xrcd);
  return xrcd;
}

Status Device::DestroyXrcd(uint32_t xrcd) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto it = std::find(tables_.xrcds.begin(), tables_.xrcds.end(), xrcd);
  if (xrcd == 0 || it == tables_.xrcds.end()) return InvalidArgument("no such XRC domain");
  // ibv_close_xrcd(3): EBUSY while XRC SRQs or XRC target QPs are in it.
  for (const auto& srq : tables_.srqs) {
    if (srq && srq->xrcd == xrcd) return Busy("XRC domain still used by an SRQ");
  }
  for (const auto& qp : tables_.qp_storage) {
    if (qp && qp->xrcd == xrcd) return Busy("XRC domain still used by a QP");
  }
  tables_.xrcds.erase(it);
  return Status::Ok();
}

StatusOr<SharedReceiveQueue*> Device::CreateXrcSrq(PdHandle pd, uint32_t xrcd, CompletionQueue* cq, uint32_t max_wr,
                                                   uint32_t max_sge, uint32_t limit, const RingAllocator& allocator) {
  if (max_wr == 0 || max_wr > 16384) return InvalidArgument("SRQ max_wr out of range");
  if (max_sge == 0 || max_sge > kMaxRecvSge) return InvalidArgument("SRQ max_sge out of range");
  if (limit > max_wr) return InvalidArgument("SRQ limit above max_wr");
  if (cq == nullptr) return InvalidArgument("an XRC SRQ needs a CQ");
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  if (xrcd == 0 || std::find(tables_.xrcds.begin(), tables_.xrcds.end(), xrcd) == tables_.xrcds.end()) {
    return InvalidArgument("no such XRC domain");
  }
  if (std::none_of(tables_.cqs.begin(), tables_.cqs.end(), [cq](const auto& p) { return p.get() == cq; })) {
    return InvalidArgument("no such CQ");
  }
  // A random 24-bit number (not 0) with a free table slot, drawn as QPNs
  // are: a peer cannot reach an SRQ by guessing small numbers.
  const uint32_t slots = core_.config.max_qps;
  std::uniform_int_distribution<uint32_t> any(1, 0xFFFFFF);
  uint32_t srqn = 0;
  uint32_t candidate = any(tables_.random);
  for (uint32_t tries = 0; srqn == 0 && tries < 32 + slots; ++tries) {
    candidate = tries < 32 ? any(tables_.random) : (candidate >= 0xFFFFFF ? 1 : candidate + 1);
    if (core_.xrc_srq_table[candidate % slots] == nullptr) srqn = candidate;
  }
  if (srqn == 0) return ResourceExhausted("no free XRC SRQ number");
  auto srq = std::make_unique<SharedReceiveQueue>(pd, max_wr, max_sge, limit, allocator);
  if (!srq->has_ring()) return ResourceExhausted("the SRQ's allocator gave no memory");
  srq->xrcd = xrcd;
  srq->srqn = srqn;
  srq->cq = cq;
  SharedReceiveQueue* raw = srq.get();
  tables_.srqs.push_back(std::move(srq));
  {
    ProgressToken token(core_);
    core_.xrc_srq_table[srqn % slots] = raw;
  }
  return raw;
}

StatusOr<QueuePair*> Device::CreateQp(const QpInitAttr& init) {
  if (init.type != IBV_QPT_RC && init.type != IBV_QPT_UC && init.type != IBV_QPT_UD &&
      init.type != IBV_QPT_XRC_SEND && init.type != IBV_QPT_XRC_RECV) {
    return Status(StatusCode::kNotSupported, "QP type not supported");
  }
  // XRC (IBTA annex A14): an initiator sends only (no receive queue, no
  // SRQ); a target receives only, into the XRC SRQs of its domain, and has
  // neither PD nor CQs.
  const bool xrc_send = init.type == IBV_QPT_XRC_SEND;
  const bool xrc_recv = init.type == IBV_QPT_XRC_RECV;
  if (xrc_recv) {
    if (init.send_cq != nullptr || init.recv_cq != nullptr || init.srq != nullptr || init.pd != 0) {
      return InvalidArgument("an XRC target QP has no PD, CQ or SRQ");
    }
  } else if (init.send_cq == nullptr || init.recv_cq == nullptr) {
    return InvalidArgument("QP needs a send and a recv CQ");
  }
  if (xrc_send && init.srq != nullptr) return InvalidArgument("an XRC initiator QP has no receive side");
  const ibv_qp_cap& c = init.cap;
  if (c.max_send_wr == 0 || c.max_send_wr > 16384) return InvalidArgument("max_send_wr out of range");
  const bool no_recv_queue = init.srq != nullptr || xrc_send || xrc_recv;
  if (no_recv_queue && c.max_recv_wr != 0 && (xrc_send || xrc_recv)) {
    return InvalidArgument("XRC QPs have no receive queue");
  }
  if (!no_recv_queue && (c.max_recv_wr == 0 || c.max_recv_wr > 16384)) {
    return InvalidArgument("max_recv_wr out of range");
  }
  if (c.max_send_sge > kMaxSendSge || c.max_recv_sge > kMaxRecvSge) return InvalidArgument("too many SGEs");
  if (c.max_inline_data > kMaxInlineData) return InvalidArgument("max_inline_data above the device limit");
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (xrc_recv) {
    if (init.xrcd == 0 || std::find(tables_.xrcds.begin(), tables_.xrcds.end(), init.xrcd) == tables_.xrcds.end()) {
      return InvalidArgument("no such XRC domain");
    }
  } else if (!tables_.PdValid(init.pd)) {
    return InvalidArgument("no such PD");
  }

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
  uint32_t candidate = any_qpn(tables_.random);
  const uint32_t walk = std::min<uint32_t>(core_.config.max_qps, highest - lowest + 1);
  for (uint32_t tries = 0; qpn == 0 && tries < 32 + walk; ++tries) {
    if (tries < 32) {
      candidate = any_qpn(tables_.random);
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
  caps.max_recv_wr = no_recv_queue ? 0 : static_cast<uint32_t>(RoundUpPow2(c.max_recv_wr));
  caps.max_send_sge = std::max<uint32_t>(c.max_send_sge, 1);
  caps.max_recv_sge = std::max<uint32_t>(c.max_recv_sge, 1);
  caps.max_inline_data = c.max_inline_data;
  RingStorage send_storage, recv_storage;
  if (init.allocator) {
    send_storage = init.allocator(QueuePair::SendRingBytes(caps), kCacheLine);
    if (send_storage.bytes == nullptr) return ResourceExhausted("the QP's allocator gave no memory");
    recv_storage = init.allocator(QueuePair::RecvRingBytes(caps), kCacheLine);
    if (recv_storage.bytes == nullptr) {
      if (send_storage.release) send_storage.release(send_storage.bytes);
      return ResourceExhausted("the QP's allocator gave no memory");
    }
  }
  auto qp = std::make_unique<QueuePair>(qpn, init.type, init.pd, init.send_cq, init.recv_cq, init.srq,
                                        init.sq_sig_all, caps, std::move(send_storage), std::move(recv_storage));
  qp->path.udp_source_port = UdpSourcePort(qpn);
  qp->mtu_bytes = MtuBytes(core_.limits.max_mtu);
  qp->resp.atomics.resize(core_.config.atomic_replay_entries);
  qp->xrcd = init.xrcd;
  if (qpn == 1) qp->ud_sources.resize(caps.max_recv_wr);
  QueuePair* raw = qp.get();
  {
    ProgressToken token(core_);
    core_.qp_table[qpn % core_.config.max_qps] = raw;
  }
  tables_.qp_storage.push_back(std::move(qp));
  return raw;
}

bool Device::ResolvePath(const ibv_ah_attr& ah, PathInfo* path, std::string* why, const MacAddress* dmac) const {
  if (!CheckAddressVector(ah, core_.config.gids, why)) return false;
  Gid dgid;
  std::memcpy(dgid.data(), ah.grh.dgid.raw, 16);
  path->dgid = dgid;
  path->sgid = core_.config.gids[ah.grh.sgid_index];
  path->ipv6 = !IsIpv4MappedGid(path->sgid);
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
  for (const auto& [ip, mac] : tables_.neighbors) {
    if (ip == dgid) {
      path->dmac = mac;
      return true;
    }
  }
  *why = "no neighbour entry (MAC) for the destination GID";
  return false;
}

bool Device::LookupNeighbor(const Gid& ip, MacAddress* mac) const {
  if (core_.IsLoopbackGid(ip)) {
    if (mac != nullptr) *mac = core_.config.mac;
    return true;
  }
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (const auto& entry : tables_.neighbors) {
    if (entry.first == ip) {
      if (mac != nullptr) *mac = entry.second;
      return true;
    }
  }
  return false;
}

std::vector<QueuePair*> Device::QueuePairs() const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  std::vector<QueuePair*> out;
  for (const auto& qp : tables_.qp_storage) out.push_back(qp.get());
  return out;
}

std::vector<QpStats> Device::QpStatsSnapshot() const {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  std::vector<QpStats> out;
  out.reserve(tables_.qp_storage.size());
  for (const auto& qp : tables_.qp_storage) {
    QpStats s;
    s.qpn = qp->qpn;
    s.type = qp->type;
    s.state = qp->state.load(std::memory_order_acquire);
    s.dest_qpn = qp->attr.dest_qp_num;
    s.counters = qp->counters;
    if (IsReliable(qp->type)) {
      s.srtt_ns = qp->req.timer.srtt_ns();
      s.rttvar_ns = qp->req.timer.rttvar_ns();
      s.rto_ns = qp->req.timer.rto_ns(core_.config.retransmit, LocalAckTimeoutNs(qp->attr.timeout));
      s.requester_selective = qp->req.selective;
      s.responder_selective = qp->resp.selective;
      if (qp->cc != nullptr) {
        s.congestion = qp->cc->name();
        s.congestion_rate_mbps = qp->cc->allowance().rate_mbps;
        s.congestion_window = qp->cc->allowance().window_packets;
      }
    }
    out.push_back(s);
  }
  return out;
}

Status Device::ResolveNeighborIfMissing(const ibv_ah_attr& ah, const char* call) {
  // The arguments first: a path that can never be valid fails at once, not
  // after ARP or ND gives up.
  if (std::string why; !CheckAddressVector(ah, core_.config.gids, &why)) {
    return InvalidArgument(std::string(call) + ": " + why);
  }
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

void Device::AddNeighbor(const Gid& ip, const MacAddress& mac) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (auto& entry : tables_.neighbors) {
    if (entry.first == ip) {
      entry.second = mac;
      return;
    }
  }
  // Bounded: the oldest entry makes room (the table is fed by ARP/ND, which
  // peers influence).
  if (tables_.neighbors.size() >= ObjectTables::kMaxNeighbors) tables_.neighbors.erase(tables_.neighbors.begin());
  tables_.neighbors.emplace_back(ip, mac);
}

bool Device::OwnsQpLocked(const QueuePair* qp) const {
  const auto& storage = tables_.qp_storage;
  return std::any_of(storage.begin(), storage.end(), [qp](const auto& p) { return p.get() == qp; });
}

Status Device::DestroyQp(QueuePair* qp) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto& storage = tables_.qp_storage;
  auto it = std::find_if(storage.begin(), storage.end(), [qp](const auto& p) { return p.get() == qp; });
  if (it == storage.end()) return InvalidArgument("no such QP");
  {
    ProgressToken token(core_);
    core_.qp_table[qp->qpn % core_.config.max_qps] = nullptr;
    // Its doorbell may wait in the ring: taken first, so that no pointer to
    // it stays behind.
    TakeRungDoorbells(doorbells_, core_);
    core_.busy_qps.erase(std::remove(core_.busy_qps.begin(), core_.busy_qps.end(), qp), core_.busy_qps.end());
    responder_.ForgetQp(qp);
    core_.ReleaseHeldPackets(qp);
    qp->req.staged.ReleaseAll(core_.config.peer_memory);
    qp->resp.read_staged.ReleaseAll(core_.config.peer_memory);
    // Its type 2 windows end with it: a later QP with the same QPN must not
    // find them bound to it.
    core_.mrs.InvalidateWindowsOfQp(qp->qpn);
  }
  storage.erase(it);
  return Status::Ok();
}

StatusOr<uint32_t> Device::CreateAh(PdHandle pd, const ibv_ah_attr& attr) {
  UROCE_RETURN_IF_ERROR(ResolveNeighborIfMissing(attr, "ibv_create_ah"));
  return CreateAhWithMac(pd, attr, nullptr);
}

StatusOr<uint32_t> Device::CreateAhToMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress& dmac) {
  return CreateAhWithMac(pd, attr, &dmac);
}

StatusOr<uint32_t> Device::CreateAhWithMac(PdHandle pd, const ibv_ah_attr& attr, const MacAddress* dmac) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!tables_.PdValid(pd)) return InvalidArgument("no such PD");
  AddressHandle ah;
  ah.pd = pd;
  std::string why;
  if (!ResolvePath(attr, &ah.path, &why, dmac)) return InvalidArgument("ibv_create_ah: " + why);
  ah.valid = true;
  ProgressToken token(core_);
  for (uint32_t i = 1; i < tables_.ahs.size(); ++i) {
    if (!tables_.ahs[i].valid) {
      tables_.ahs[i] = ah;
      return i;
    }
  }
  if (tables_.ahs.empty()) tables_.ahs.emplace_back();  // handle 0 is never valid
  if (tables_.ahs.size() == tables_.ahs.capacity()) tables_.ahs.reserve(std::max<size_t>(64, tables_.ahs.size() * 2));
  tables_.ahs.push_back(ah);
  return static_cast<uint32_t>(tables_.ahs.size() - 1);
}

Status Device::DestroyAh(uint32_t handle) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  ProgressToken token(core_);
  if (handle == 0 || handle >= tables_.ahs.size() || !tables_.ahs[handle].valid) return InvalidArgument("no such AH");
  tables_.ahs[handle].valid = false;
  return Status::Ok();
}

}  // namespace uroce::transport
