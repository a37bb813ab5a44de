// For the connection manager's tests: CM MADs as any host could put them on
// the wire, from any MAC and IP (the peer is never trusted), queued on an
// engine's port as raw frames so that they reach the engine at the other end
// of an EnginePair exactly as a hostile or spoofing peer would send them.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <cstring>

#include "cm/cm_mad.h"
#include "cm/connection_manager.h"
#include "transport/engine.h"
#include "transport/headers.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"

namespace uroce::cm {

struct MadFrom {
  transport::MacAddress mac{};  // Ethernet source
  transport::Gid gid{};         // IP source (IPv4-mapped or IPv6)
};

// A UD SEND of the MAD `mad` (kMadBytes) from QP 1 of `from` to QP 1 of
// (to_mac, to_gid), with Q_Key 0x80010000 (IBTA 13.5.1) and a valid ICRC.
// Queued on `wire`'s port (Engine::QueueRawFrame); false if the raw queue or
// the pool is full.
inline bool InjectMadBytes(transport::Engine& wire, rte_mempool* pool, const MadFrom& from,
                           const transport::MacAddress& to_mac, const transport::Gid& to_gid, const uint8_t* mad) {
  transport::PacketFields f;
  f.dst_mac = to_mac;
  f.src_mac = from.mac;
  f.ip_version = transport::IsIpv4MappedGid(from.gid) ? transport::IpVersion::kIpv4 : transport::IpVersion::kIpv6;
  f.src_gid = from.gid;
  f.dst_gid = to_gid;
  f.udp_src_port = 0xC001;
  f.bth.opcode = static_cast<uint8_t>(transport::Opcode::kUdSendOnly);
  f.bth.dest_qp = kGsiQpn;
  f.deth.qkey = kGsiQkey;
  f.deth.src_qp = kGsiQpn;
  f.payload_length = kMadBytes;
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return false;
  if (transport::BuildPacket(f, mad, m) != transport::BuildError::kOk || !wire.QueueRawFrame(m)) {
    rte_pktmbuf_free(m);
    return false;
  }
  return true;
}

inline bool InjectMad(transport::Engine& wire, rte_mempool* pool, const MadFrom& from,
                      const transport::MacAddress& to_mac, const transport::Gid& to_gid, const CmMad& mad) {
  uint8_t bytes[kMadBytes];
  EncodeCmMad(mad, bytes);
  return InjectMadBytes(wire, pool, from, to_mac, to_gid, bytes);
}

// A REQ as rdma_cm makes it (RC, IP CM header) for `port` of `to_gid`, with
// communication ID `comm_id`.
inline CmMad ForgedReq(uint32_t comm_id, const transport::Gid& from_gid, const transport::Gid& to_gid, uint16_t port,
                       uint8_t response_timeout = 8, uint8_t max_retries = 15) {
  CmMad mad;
  mad.header.transaction_id = 0x1234'0000'0000ull | comm_id;
  CmReq req;
  req.local_comm_id = comm_id;
  req.service_id = IpServiceId(port);
  req.local_qpn = 0x100 + (comm_id & 0xFFFF);
  req.responder_resources = 1;
  req.initiator_depth = 1;
  req.remote_cm_response_timeout = response_timeout;
  req.local_cm_response_timeout = response_timeout;
  req.starting_psn = comm_id & 0xFFFFFF;
  req.retry_count = 7;
  req.path_mtu = IBV_MTU_1024;
  req.rnr_retry_count = 7;
  req.max_cm_retries = max_retries;
  req.primary.local_lid = 0xFFFF;
  req.primary.remote_lid = 0xFFFF;
  req.primary.local_gid = from_gid;
  req.primary.remote_gid = to_gid;
  req.primary.hop_limit = 64;
  IpCmHeader ip;
  ip.ip_version = transport::IsIpv4MappedGid(from_gid) ? 4 : 6;
  ip.source_port = 40000;
  ip.source_ip = from_gid;
  ip.destination_ip = to_gid;
  (void)EncodeIpCmHeader(ip, req.private_data.data());
  mad.message = req;
  return mad;
}

}  // namespace uroce::cm
