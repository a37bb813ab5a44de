// frame_injector SOCKET HEX [COUNT]: a process attached to `uroce daemon`
// that writes any frame it likes into its own port, for attack tests. It
// attaches as every uroce program does (host::DaemonSession), maps the port
// the daemon handed it (host::ShmChannel) and sends the frame given in hex
// COUNT times (default 1), bypassing the engine's own builders: what a
// hostile member of the daemon's group can do with its shared memory. It
// then keeps the session for a second (the switch polls its ring; a closed
// session is released at once) and prints "sent N slot S".
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "host/daemon_client.h"
#include "pmd/eal.h"
#include "pmd/mempool.h"
#include "host/shm_channel.h"
#include "runtime/config.h"

namespace {

bool ParseHex(const char* text, std::vector<uint8_t>* out) {
  const size_t n = std::strlen(text);
  if (n == 0 || n % 2 != 0) return false;
  for (size_t i = 0; i < n; i += 2) {
    char byte[3] = {text[i], text[i + 1], '\0'};
    char* end = nullptr;
    const unsigned long value = std::strtoul(byte, &end, 16);
    if (end != byte + 2) return false;
    out->push_back(static_cast<uint8_t>(value));
  }
  return true;
}

int Fail(const char* what, const uroce::Status& status) {
  std::fprintf(stderr, "frame_injector: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace uroce;  // NOLINT: a small test program
  std::vector<uint8_t> frame;
  if (argc < 3 || !ParseHex(argv[2], &frame)) {
    std::fprintf(stderr, "usage: frame_injector SOCKET HEX [COUNT]\n");
    return 2;
  }
  const int count = argc > 3 ? std::atoi(argv[3]) : 1;
  auto session = host::DaemonSession::Attach(argv[1]);
  if (!session.ok()) return Fail("attach", session.status());
  auto config = runtime::LoadConfigFromDaemon(**session, {});
  if (!config.ok()) return Fail("grant", config.status());
  if (config->endpoints.empty()) return Fail("grant", InvalidArgument("no port"));
  pmd::EalConfig eal;
  eal.program_name = "frame_injector";
  eal.memory_mb = 64;
  eal.log_level = "*:error";
  if (Status s = pmd::StartEal(eal); !s.ok()) return Fail("EAL", s);
  auto pool = pmd::CreatePktPool({.name = "injector", .mbufs = 255, .per_core_cache = 0});
  if (!pool.ok()) return Fail("pool", pool.status());
  auto port = host::ShmChannel::Map(config->endpoints.front().shm_fd);
  if (!port.ok()) return Fail("port", port.status());
  int sent = 0;
  for (int i = 0; i < count; ++i) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool->get());
    if (m == nullptr) break;
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    if (data == nullptr) {
      rte_pktmbuf_free(m);
      break;
    }
    std::memcpy(data, frame.data(), frame.size());
    if ((*port)->Send(&m, 1) != 1) {
      rte_pktmbuf_free(m);
      usleep(1000);
      continue;
    }
    ++sent;
  }
  // Whatever comes back (answers, copies) is read and freed.
  for (int i = 0; i < 100; ++i) {
    rte_mbuf* in[32];
    const uint16_t n = (*port)->Receive(in, 32, pool->get());
    rte_pktmbuf_free_bulk(in, n);
    usleep(10000);
  }
  std::printf("sent %d slot %u\n", sent, (*session)->slot());
  port->reset();
  pool->reset();
  return 0;
}
