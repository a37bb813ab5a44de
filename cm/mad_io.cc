// QP1 of the connection manager (cm/connection_manager_impl.h): the GSI QP
// (IBTA 13.4.8), its receive slots, the address handles MADs leave through,
// and the completions that bring MADs in.
#include <cstring>

#include "cm/connection_manager_impl.h"
#include "transport/verbs_wr.h"

namespace uroce::cm {
namespace {

// EUI-64 from the port's MAC (RFC 4291 appendix A), as rxe makes its node GUID.
uint64_t GuidFromMac(const MacAddress& mac) {
  const uint8_t b[8] = {uint8_t(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  uint64_t guid = 0;
  for (uint8_t x : b) guid = (guid << 8) | x;
  return guid;
}

// The GRH the engine places before a UD datagram: an IPv6 header, or 20 zero
// bytes and the IPv4 header (IBTA A17.4.5.2). The IP version decides, and it
// is read first: byte 20 of an IPv6 header is byte 12 of its source address,
// which may well start with 0x4 (fd00::4000:2).
bool SourceFromGrh(const uint8_t* grh, Gid* source) {
  if ((grh[0] >> 4) == 6) {
    std::memcpy(source->data(), grh + 8, 16);
    return true;
  }
  for (size_t i = 0; i < 20; ++i) {
    if (grh[i] != 0) return false;
  }
  if ((grh[20] >> 4) == 4) {
    *source = Ipv4MappedGid(grh + 20 + 12);
    return true;
  }
  return false;
}

}  // namespace

Status ConnectionManager::Impl::Init() {
  const auto& gids = engine->config().gids;
  if (gids.empty()) return InvalidArgument("the engine has no GID");
  if (options.local_gid == Gid{}) options.local_gid = gids[0];
  if (GidIndex(options.local_gid) < 0) return InvalidArgument("local_gid is not in the engine's GID table");
  ca_guid = GuidFromMac(engine->config().mac);
  port_mtu = engine->limits().max_mtu;
  if (options.recv_buffers == 0) return InvalidArgument("recv_buffers must be at least 1");
  if (options.random_seed != 0) {
    random.seed(options.random_seed);
  } else {
    std::random_device device;
    random.seed((uint64_t{device()} << 32) | device());
  }
  tid_high = static_cast<uint32_t>(random());

  auto new_cq = engine->CreateCq(kSendQueueDepth + options.recv_buffers);
  if (!new_cq.ok()) return new_cq.status();
  cq = *new_cq;
  QpInitAttr init;
  init.type = IBV_QPT_UD;
  init.pd = pd;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = kSendQueueDepth;
  init.cap.max_recv_wr = options.recv_buffers;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kMadBytes;  // MADs are copied at post time
  init.sq_sig_all = true;
  init.fixed_qpn = kGsiQpn;
  auto qp = engine->CreateQp(init);
  if (!qp.ok()) return qp.status();
  gsi = *qp;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = kGsiQkey;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY));
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE));
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  UROCE_RETURN_IF_ERROR(engine->ModifyQp(gsi, attr, IBV_QP_STATE | IBV_QP_SQ_PSN));

  recv_memory.assign(size_t{options.recv_buffers} * kRecvSlotBytes, 0);
  auto keys = engine->RegMr(pd, recv_memory.data(), recv_memory.size(),
                            reinterpret_cast<uint64_t>(recv_memory.data()), IBV_ACCESS_LOCAL_WRITE);
  if (!keys.ok()) return keys.status();
  recv_keys = *keys;
  mr_registered = true;
  for (uint64_t slot = 0; slot < options.recv_buffers; ++slot) UROCE_RETURN_IF_ERROR(PostRecvSlot(slot));
  return Status::Ok();
}

void ConnectionManager::Impl::Teardown() {
  if (gsi != nullptr) (void)engine->DestroyQp(gsi);
  gsi = nullptr;
  if (cq != nullptr) (void)engine->DestroyCq(cq);
  cq = nullptr;
  if (mr_registered) (void)engine->DeregMr(recv_keys.lkey);
  mr_registered = false;
  for (const auto& [key, ah] : address_handles) (void)engine->DestroyAh(ah.handle);
  address_handles.clear();
  for (const RetiredAh& ah : retired_ahs) (void)engine->DestroyAh(ah.handle);
  retired_ahs.clear();
}

Status ConnectionManager::Impl::PostRecvSlot(uint64_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(recv_memory.data() + slot * kRecvSlotBytes),
              static_cast<uint32_t>(kRecvSlotBytes), recv_keys.lkey};
  ibv_recv_wr wr = transport::RecvWr(slot, &sge);
  const ibv_recv_wr* bad = nullptr;
  const int error = engine->PostRecv(gsi, &wr, &bad);
  if (error != 0) return Status(StatusCode::kInternal, "posting a MAD receive buffer: errno " + std::to_string(error));
  return Status::Ok();
}

int ConnectionManager::Impl::GidIndex(const Gid& gid) const {
  const auto& gids = engine->config().gids;
  auto at = std::find(gids.begin(), gids.end(), gid);
  return at == gids.end() ? -1 : static_cast<int>(at - gids.begin());
}

bool ConnectionManager::Impl::LocalGidFor(const Gid& peer, Gid* local) const {
  // The configured local GID wins when it is of the peer's IP version.
  if (IsIpv4MappedGid(options.local_gid) == IsIpv4MappedGid(peer)) {
    *local = options.local_gid;
    return true;
  }
  const auto& gids = engine->config().gids;
  const std::optional<size_t> index = transport::SourceGidFor(gids, peer);
  if (!index) return false;
  *local = gids[*index];
  return true;
}

bool ConnectionManager::Impl::AhAttrFor(const Gid& peer, ibv_ah_attr* attr) const {
  // MADs to a peer leave from our address of its IP version (RoCEv2 puts
  // the source GID in the IP header, which must be of the same version).
  Gid local;
  if (!LocalGidFor(peer, &local)) return false;
  *attr = {};
  attr->is_global = 1;
  attr->port_num = 1;
  attr->grh.sgid_index = static_cast<uint8_t>(GidIndex(local));
  attr->grh.hop_limit = 64;
  std::memcpy(attr->grh.dgid.raw, peer.data(), 16);
  return true;
}

StatusOr<uint32_t> ConnectionManager::Impl::AddressHandleFor(const Gid& gid, const MacAddress& mac) {
  const uint64_t now = Now();
  auto it = address_handles.find({gid, mac});
  if (it != address_handles.end()) {
    it->second.last_used_ns = now;
    return it->second.handle;
  }
  ibv_ah_attr attr;
  if (!AhAttrFor(gid, &attr)) return InvalidArgument("no local GID of the peer's IP version");
  // Bounded: a storm of sources must not grow the engine's AH table. The
  // least recently used entry makes room (a peer still talking to us gets
  // a new one at its next MAD).
  if (options.max_address_handles > 0 && address_handles.size() >= options.max_address_handles) {
    auto oldest = address_handles.begin();
    for (auto at = address_handles.begin(); at != address_handles.end(); ++at) {
      if (at->second.last_used_ns < oldest->second.last_used_ns) oldest = at;
    }
    RetireAh(oldest->second.handle);
    address_handles.erase(oldest);
    counters.address_handles_evicted++;
  }
  // Never CreateAh here: that would resolve the neighbour (ARP/ND), waiting
  // with the CM locked on a peer's say-so (docs/architecture.md, "The fast
  // path": nothing on the receive path waits).
  auto handle = engine->CreateAhToMac(pd, attr, mac);
  if (!handle.ok()) return handle.status();
  address_handles[{gid, mac}] = CachedAh{*handle, now};
  return *handle;
}

void ConnectionManager::Impl::RetireAh(uint32_t handle) {
  retired_ahs.push_back(RetiredAh{handle, sends_posted});
  DestroyRetiredAhs();
}

void ConnectionManager::Impl::DestroyRetiredAhs() {
  while (!retired_ahs.empty() && retired_ahs.front().posted_before <= sends_completed) {
    (void)engine->DestroyAh(retired_ahs.front().handle);
    retired_ahs.pop_front();
  }
}

void ConnectionManager::Impl::AgeAddressHandles(uint64_t now) {
  if (now < next_ah_scan_ns) return;
  next_ah_scan_ns = now + options.address_handle_idle_ns / 4 + 1;
  for (auto it = address_handles.begin(); it != address_handles.end();) {
    if (now - it->second.last_used_ns >= options.address_handle_idle_ns) {
      RetireAh(it->second.handle);
      it = address_handles.erase(it);
    } else {
      ++it;
    }
  }
}

bool ConnectionManager::Impl::SendMad(const Gid& to, const MacAddress& mac, const uint8_t* mad) {
  auto handle = AddressHandleFor(to, mac);
  if (!handle.ok()) {
    counters.send_failures++;
    return false;
  }
  ibv_ah ah{};
  ah.handle = *handle;
  ibv_sge sge{reinterpret_cast<uint64_t>(mad), static_cast<uint32_t>(kMadBytes), 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud.ah = &ah;
  wr.wr.ud.remote_qpn = kGsiQpn;
  wr.wr.ud.remote_qkey = kGsiQkey;
  const ibv_send_wr* bad = nullptr;
  if (engine->PostSend(gsi, &wr, &bad) != 0) {
    // A full send queue: the retransmission timer (or the peer's) covers it.
    counters.send_failures++;
    return false;
  }
  sends_posted++;
  counters.mads_sent++;
  return true;
}

void ConnectionManager::Impl::DrainCompletions() {
  ibv_wc wc[16];
  while (true) {
    const int n = cq->Poll(16, wc);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) {
      if (!(wc[i].opcode & IBV_WC_RECV)) {
        // Our own sends (inline copies: nothing to free), in order: address
        // handles retired before them may go now.
        sends_completed++;
        continue;
      }
      const uint64_t slot = wc[i].wr_id;
      if (slot >= options.recv_buffers) continue;
      if (wc[i].status == IBV_WC_SUCCESS) {
        const uint8_t* buffer = recv_memory.data() + slot * kRecvSlotBytes;
        Gid source;
        MacAddress source_mac{};
        // CM MADs come from QP1 only (IBTA 13.5.1), with a GRH and a whole
        // MAD. Answers go to the frame's Ethernet source: without it, none
        // could be sent without resolving, so the MAD is dropped.
        if (wc[i].src_qp != kGsiQpn || !(wc[i].wc_flags & IBV_WC_GRH) || wc[i].byte_len < kRecvSlotBytes ||
            !SourceFromGrh(buffer, &source) || !engine->UdSourceMac(gsi, slot, &source_mac)) {
          counters.mads_dropped++;
        } else {
          counters.mads_received++;
          HandleMad(source, source_mac, buffer + transport::kGrhBytes, wc[i].byte_len - transport::kGrhBytes);
        }
      }
      if (wc[i].status != IBV_WC_WR_FLUSH_ERR) (void)PostRecvSlot(slot);
    }
    DestroyRetiredAhs();
  }
}

}  // namespace uroce::cm
