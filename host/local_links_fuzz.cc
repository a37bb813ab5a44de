// libFuzzer target for a process's direct link to another process on the
// host (host/local_links.h): the input is the frames a hostile process puts
// into the link. Records of [length: 2 bytes LE][bytes], each a frame sent
// into the link by the other end (in link form, transport/link_frame.h,
// when the length's top bit is set), then received by LocalLinks (which
// must refuse what that process may not send us) and sent back out
// (routing reads the same headers). Aborts on a leaked mbuf or on a
// refused frame that was taken anyway.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "pmd/fuzz_environment.h"
#include "host/frame_inspect.h"
#include "host/local_links.h"
#include "pmd/mempool.h"
#include "host/shm_channel.h"
#include "transport/link_frame.h"
#include "transport/packet_parser.h"

namespace {

constexpr unsigned kPoolSize = 511;

// The port to the daemon: takes everything, frees it at once.
class SinkPort : public uroce::transport::PacketIo {
 public:
  uint16_t RxBurst(rte_mbuf**, uint16_t) override { return 0; }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    rte_pktmbuf_free_bulk(pkts, n);
    return n;
  }
};

struct World {
  uroce::pmd::MempoolPtr pool;
  SinkPort daemon;
};

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    w->pool = uroce::pmd::StartFuzzEalWithPool("local_links_fuzz",
                                               {.name = "fuzz_pool", .mbufs = kPoolSize, .per_core_cache = 0});
    return w;
  }();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using uroce::host::LocalLinks;
  using uroce::host::ShmChannel;
  World& w = GetWorld();
  // Slot 3 (us) and slot 7 (the hostile one), on 10.0.0.1 and fd00::1.
  LocalLinks::Options o;
  o.daemon = &w.daemon;
  o.pool = w.pool.get();
  o.own_slot = 3;
  o.mac = {0x02, 0, 0, 0, 0, 0x01};
  const uint8_t v4[4] = {10, 0, 0, 1};
  uroce::transport::Gid v6{};
  v6[0] = 0xfd;
  v6[15] = 1;
  o.gids = {uroce::transport::Ipv4MappedGid(v4), v6};
  auto links = std::make_unique<LocalLinks>(o);
  auto file = ShmChannel::Create(16, 1518);
  if (!file.ok()) abort();
  if (!links->Add(7, (*file)->fd()).ok()) abort();
  auto hostile = ShmChannel::Map((*file)->fd(), ShmChannel::Side::kProcess);
  if (!hostile.ok()) abort();
  size_t at = 0;
  rte_mbuf* burst[32];
  while (at + 2 <= size) {
    const bool link_form = (data[at + 1] & 0x80) != 0;
    const size_t length =
        std::min<size_t>(static_cast<size_t>(data[at] | ((data[at + 1] & 0x7F) << 8)) % 1519, size - at - 2);
    at += 2;
    if (link_form) {
      (void)(*hostile)->SendBytes(data + at, static_cast<uint32_t>(length), true);
    } else {
      rte_mbuf* m = rte_pktmbuf_alloc(w.pool.get());
      if (m == nullptr) abort();
      char* room = length == 0 ? nullptr : rte_pktmbuf_append(m, static_cast<uint16_t>(length));
      if (length != 0 && room == nullptr) abort();
      if (length != 0) std::memcpy(room, data + at, length);
      if ((*hostile)->Send(&m, 1) != 1) rte_pktmbuf_free(m);
    }
    at += length;
    const uint16_t got = links->RxBurst(burst, 32);
    // A taken frame is one slot 7 may send us: RoCEv2 as the host, to a QPN
    // of our lease other than QP 1, UD only from slot 7's. Or one that the
    // engine's parser takes for RoCE and refuses (a connected service's
    // frame is read at fixed offsets at the link and parsed whole by the
    // engine), whose fields at those offsets say the same.
    for (uint16_t i = 0; i < got; ++i) {
      if (links->LinkFrame(burst[i])) {
        // In link form: a connected service's packet (the engine's link
        // parser refuses a UD opcode) between the host's addresses, to a
        // QPN of our lease other than QP 1.
        const uint8_t* f = rte_pktmbuf_mtod(burst[i], const uint8_t*);
        uint32_t qpn = 0;
        if (!uroce::transport::LinkFrameDestQp(f, rte_pktmbuf_data_len(burst[i]), &qpn)) abort();
        uroce::transport::Gid src, dst;
        std::memcpy(src.data(), f + uroce::transport::kLinkSrcGidOffset, 16);
        std::memcpy(dst.data(), f + uroce::transport::kLinkDstGidOffset, 16);
        if (qpn == 1 || (qpn >> 16) != 3 || std::find(o.gids.begin(), o.gids.end(), src) == o.gids.end() ||
            std::find(o.gids.begin(), o.gids.end(), dst) == o.gids.end()) {
          abort();
        }
        continue;
      }
      uroce::host::FrameInfo info;
      uroce::transport::PacketView view;
      uroce::transport::ParseOptions strict;
      strict.verify_icrc = true;
      const uroce::transport::ParseError error = uroce::transport::ParsePacket(burst[i], strict, &view);
      if (error != uroce::transport::ParseError::kOk) {
        if (!view.is_roce) abort();  // the engine would hand it to its ARP/ND handler
        const size_t l3 = 14, udp = l3 + view.ip_header_bytes;
        if (view.ip_header_bytes != 20 && view.ip_header_bytes != 40) abort();
        const uint8_t* f = rte_pktmbuf_mtod(burst[i], const uint8_t*);
        info.kind = uroce::host::FrameInfo::Kind::kRoce;
        info.dest_qpn = static_cast<uint32_t>(f[udp + 8 + 5]) << 16 | f[udp + 8 + 6] << 8 | f[udp + 8 + 7];
        info.src_ip = view.fields.src_gid;
        info.dst_ip = view.fields.dst_gid;
      } else if (!uroce::host::InspectFrame(burst[i], &info)) {
        abort();
      }
      if (info.kind != uroce::host::FrameInfo::Kind::kRoce || info.dest_qpn == 1 ||
          (info.dest_qpn >> 16) != 3 || (info.ud && (info.src_qpn >> 16) != 7) ||
          std::memcmp(rte_pktmbuf_mtod_offset(burst[i], const uint8_t*, 6), o.mac.data(), 6) != 0 ||
          std::find(o.gids.begin(), o.gids.end(), info.src_ip) == o.gids.end() ||
          std::find(o.gids.begin(), o.gids.end(), info.dst_ip) == o.gids.end()) {
        abort();
      }
    }
    // Then it goes where routing says.
    const uint16_t sent = links->TxBurst(burst, got);
    rte_pktmbuf_free_bulk(burst + sent, got - sent);
    // What looped back to us (our own QPNs) is read and freed.
    const uint16_t looped = links->RxBurst(burst, 32);
    rte_pktmbuf_free_bulk(burst, looped);
  }
  hostile->reset();
  links.reset();
  file->reset();
  if (uroce::pmd::AvailableMbufs(w.pool.get()) != kPoolSize) abort();  // a buffer leaked
  return 0;
}
