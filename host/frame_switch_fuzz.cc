// libFuzzer target for the daemon's switch (host/frame_switch.h): frames from
// anyone (the wire or an attached process) in any order. Input: records of
// [port byte][fix-up byte][length: 2 bytes LE][frame bytes]. The port byte
// picks the uplink or one of two process slots; the fix-up byte may make the
// frame's addresses the host's (Ethernet source or destination, IPv4
// destination) so that the fuzzer gets past the cheap checks into the CM
// routing and the neighbour answers. An input whose first byte has its top
// bit set runs the switch in kernel mode (a kernel uplink: the processes'
// neighbour requests become questions, each answered after every Poll).
// After every input: every buffer the
// switch handed out or kept is back in the pool, or it aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "pmd/fuzz_environment.h"
#include "host/frame_switch.h"
#include "pmd/mempool.h"

namespace uroce::host {

using pmd::AvailableMbufs;
using pmd::MempoolPtr;

namespace {

constexpr unsigned kPoolSize = 2047;
const transport::MacAddress kHostMac = {0x02, 0, 0, 0, 0, 0x01};
const uint8_t kHostIp[4] = {10, 0, 0, 1};

class FuzzPort : public transport::PacketIo {
 public:
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && !in.empty()) {
      pkts[k++] = in.front();
      in.pop_front();
    }
    return k;
  }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    // Take half of what is offered: the switch must free the rest.
    const uint16_t take = n / 2 + (n & 1);
    rte_pktmbuf_free_bulk(pkts, take);
    return take;
  }
  std::deque<rte_mbuf*> in;
};

struct World {
  MempoolPtr pool;
  FuzzPort ports[3];
};

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    w->pool = pmd::StartFuzzEalWithPool("frame_switch_fuzz", {.name = "fuzz_pool", .mbufs = kPoolSize, .per_core_cache = 0});
    return w;
  }();
  return *world;
}

}  // namespace
}  // namespace uroce::host

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::pmd;
  using namespace uroce::host;
  World& w = GetWorld();
  FrameSwitch::Options options;
  options.mac = kHostMac;
  options.gids = {uroce::transport::Ipv4MappedGid(kHostIp)};
  options.uplink = &w.ports[0];
  options.pool = w.pool.get();
  options.kernel_neighbors = size > 0 && (data[0] & 0x80) != 0;
  NeighborQuestion questions[FrameSwitch::kQuestions];
  {
    FrameSwitch sw(options);
    if (!sw.Attach(1, &w.ports[1]).ok() || !sw.Attach(2, &w.ports[2]).ok()) abort();
    if (!sw.Listen(7174, 2).ok()) abort();
    size_t at = 0;
    unsigned frames = 0;
    while (at + 4 <= size && frames < 64) {
      const uint8_t port = data[at] % 3;
      const uint8_t fixups = data[at + 1];
      const size_t length = std::min<size_t>(data[at + 2] | (data[at + 3] << 8), 2000);
      at += 4;
      const size_t take = std::min(length, size - at);
      rte_mbuf* m = rte_pktmbuf_alloc(w.pool.get());
      if (m == nullptr) break;
      char* bytes = rte_pktmbuf_append(m, static_cast<uint16_t>(take));
      if (bytes == nullptr) {
        rte_pktmbuf_free(m);
        break;
      }
      std::memcpy(bytes, data + at, take);
      at += take;
      if ((fixups & 1) && take >= 12) std::memcpy(bytes + 6, kHostMac.data(), 6);   // from the host
      if ((fixups & 2) && take >= 6) std::memcpy(bytes, kHostMac.data(), 6);        // to the host
      if ((fixups & 4) && take >= 34) std::memcpy(bytes + 30, kHostIp, 4);          // IPv4 to the host
      if ((fixups & 8) && take >= 30) std::memcpy(bytes + 26, kHostIp, 4);          // IPv4 from the host
      w.ports[port].in.push_back(m);
      ++frames;
      if (fixups & 0x80) {
        sw.Poll();
        const size_t n = sw.TakeNeighborQuestions(questions, FrameSwitch::kQuestions);
        for (size_t i = 0; i < n; ++i) sw.AnswerNeighborQuestion(questions[i], kHostMac);
      }
      if (fixups & 0x40) sw.Detach(1 + (fixups & 1));
    }
    for (int i = 0; i < 8; ++i) sw.Poll();
  }
  for (FuzzPort& p : w.ports) {
    for (rte_mbuf* m : p.in) rte_pktmbuf_free(m);
    p.in.clear();
  }
  if (AvailableMbufs(w.pool.get()) != kPoolSize) abort();  // a buffer leaked
  return 0;
}
