// libFuzzer target for the daemon's side of a process port
// (host/shm_channel.h): the input is what a hostile process writes into the
// shared memory between the daemon's reads. Records of [offset: 2 bytes LE]
// [length byte][bytes], written into the process-to-daemon ring (indices and
// slots) and into the daemon's ring's consumer index, each followed by a
// Receive and a Send on the daemon's side. With the input's first byte odd,
// the channel is one end of a local link: it takes slots in link form
// (transport/link_frame.h) and sends with SendLinkFrames. Aborts on a leaked
// mbuf; a read outside the mapping would crash under ASan or SIGSEGV.
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "pmd/fuzz_environment.h"
#include "pmd/mempool.h"
#include "host/shm_channel.h"

namespace {

constexpr unsigned kPoolSize = 511;
constexpr uint32_t kSlots = 16;
constexpr uint32_t kMaxFrame = 256;

struct World {
  uroce::pmd::MempoolPtr pool;
};

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    w->pool = uroce::pmd::StartFuzzEalWithPool("shm_channel_fuzz",
                                               {.name = "fuzz_pool", .mbufs = kPoolSize, .per_core_cache = 0});
    return w;
  }();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using uroce::host::ShmChannel;
  World& w = GetWorld();
  auto channel = ShmChannel::Create(kSlots, kMaxFrame);
  if (!channel.ok()) abort();
  ShmChannel& c = **channel;
  const bool link = size > 0 && (data[0] & 1) != 0;
  if (link) c.TakeLinkFrames();
  const size_t file = ShmChannel::FileSize(kSlots, (4 + kMaxFrame + 63) / 64 * 64);
  auto* shared = static_cast<uint8_t*>(mmap(nullptr, file, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd(), 0));
  if (shared == MAP_FAILED) abort();
  size_t at = 0;
  rte_mbuf* burst[32];
  while (at + 3 <= size) {
    const size_t offset = (data[at] | (data[at + 1] << 8)) % file;
    const size_t length = std::min<size_t>({data[at + 2], size - at - 3, file - offset});
    std::memcpy(shared + offset, data + at + 3, length);
    at += 3 + length;
    const uint16_t got = c.Receive(burst, 32, w.pool.get());
    // Whatever came in goes back out (the daemon's ring toward the process).
    const uint16_t sent = link ? c.SendLinkFrames(burst, got) : c.Send(burst, got);
    rte_pktmbuf_free_bulk(burst + sent, got - sent);
  }
  munmap(shared, file);
  channel->reset();
  if (uroce::pmd::AvailableMbufs(w.pool.get()) != kPoolSize) abort();  // a buffer leaked
  return 0;
}
