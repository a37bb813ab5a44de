// Test helpers for the daemon's switch and a process's local links: a port
// that is a queue each way, and RoCEv2 frames built as an engine builds them.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "transport/headers.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_io.h"

namespace uroce::pmd::testing {

// Frames queued for it to receive (in), frames it was given (out), and a
// transmit queue that may be made to refuse (tx_room).
class QueuePort : public transport::PacketIo {
 public:
  ~QueuePort() override { Clear(); }
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && !in.empty()) {
      pkts[k++] = in.front();
      in.pop_front();
    }
    return k;
  }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    const uint16_t take = std::min<uint16_t>(n, tx_room);
    for (uint16_t i = 0; i < take; ++i) out.push_back(pkts[i]);
    return take;
  }
  void Clear() {
    for (rte_mbuf* m : in) rte_pktmbuf_free(m);
    for (rte_mbuf* m : out) rte_pktmbuf_free(m);
    in.clear();
    out.clear();
  }
  std::deque<rte_mbuf*> in;
  std::vector<rte_mbuf*> out;
  uint16_t tx_room = UINT16_MAX;
};

// A 64-byte frame of zeros numbered `id` (at byte 20, past the Ethernet
// header), for tests that follow frames across a wire; null if the pool is
// empty.
inline rte_mbuf* NumberedFrame(rte_mempool* pool, uint32_t id) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 64));
  std::memset(data, 0, 64);
  std::memcpy(data + 20, &id, sizeof(id));
  return m;
}
inline uint32_t FrameNumber(const rte_mbuf* m) {
  uint32_t id;
  std::memcpy(&id, rte_pktmbuf_mtod(m, const uint8_t*) + 20, sizeof(id));
  return id;
}

inline transport::Gid Ip(uint8_t last) {
  const uint8_t b[4] = {10, 0, 0, last};
  return transport::Ipv4MappedGid(b);
}

// A RoCEv2 frame from (smac, sip) to (dmac, dip), QPN `qpn`, 16 bytes of
// payload (UD: a DETH from src_qpn); null if the pool is empty.
inline rte_mbuf* RoceFrame(rte_mempool* pool, const transport::MacAddress& smac, const transport::Gid& sip,
                           const transport::MacAddress& dmac, const transport::Gid& dip, uint32_t qpn,
                           transport::Opcode op = transport::Opcode::kRcSendOnly, uint32_t src_qpn = 0) {
  transport::PacketFields f;
  f.src_mac = smac;
  f.dst_mac = dmac;
  f.src_gid = sip;
  f.dst_gid = dip;
  f.udp_src_port = 0xC000;
  f.bth.opcode = static_cast<uint8_t>(op);
  f.bth.dest_qp = qpn;
  f.deth.src_qp = src_qpn;
  f.deth.qkey = 0x1234;
  f.payload_length = 16;
  const uint8_t payload[16] = {};
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m != nullptr && transport::BuildPacket(f, payload, m) != transport::BuildError::kOk) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  return m;
}

}  // namespace uroce::pmd::testing
