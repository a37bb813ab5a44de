// `uroce floor`: the medium's floor, without uroce's transport. Two processes
// bounce and stream raw Ethernet frames over the very port `uroce perf`
// measures on (net_memif between two processes by default: the built-in
// configs/pair-a.ini and pair-b.ini), through the same runtime, pools and
// PacketIo, but with no engine in the path: no headers, no ICRC, no ACKs,
// no completions. tools/perf_compare prints it beside uroce, so that its
// table shows what uroce adds to the medium.
//
//   uroce floor --role server [--config FILE] [--set SECTION.KEY=VALUE]
//   uroce floor --role client [--size B] [--iters N] [--config FILE] [--set ...]
//
// The client first bounces one frame until it comes back (the link is up),
// bounces for 0.2 s more to warm up, then measures N round trips (half of each, as `uroce perf` reports
// latency), then streams 10 N frames and asks the server how many arrived.
// Its last line: `floor: size B lat_median_us M lat_p99_us P lat_mean_us A
// rate_mmsg_per_s R`. Frames carry the IEEE local experimental EtherType
// 0x88B5, which uroce's engine refuses, and no address anyone owns.
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pmd/eal.h"
#include "pmd/port_setup.h"
#include "runtime/runtime.h"
#include "pmd/shutdown_signal.h"
#include "tools/command.h"
#include "tools/config_flags.h"

namespace uroce::tools {
namespace {

constexpr uint16_t kEtherType = 0x88B5;  // IEEE 802 local experimental
constexpr uint16_t kBurst = 32;
constexpr uint32_t kMinSize = 64;
constexpr uint32_t kMaxSize = 1514;
constexpr uint64_t kMaxIters = 10'000'000;
constexpr double kReplySeconds = 1.0;   // a bounce that does not come back in this: failed
constexpr double kServerIdleSeconds = 300.0;
constexpr double kSendSeconds = 5.0;     // a port that takes nothing for this long: its peer is gone

// What a frame asks (the byte after the EtherType).
enum Kind : uint8_t { kPing = 1, kStream = 2, kEnd = 3, kCount = 4, kQuit = 5 };

struct Options {
  std::string role;
  uint32_t size = kMinSize;
  uint64_t iters = 100000;
  ConfigFlags config;
};

}  // namespace

int FloorUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce floor --role server|client [--size B] [--iters N] [--config FILE]\n"
               "                   [--set SECTION.KEY=VALUE]\n"
               "  raw frames bounced and streamed over the port uroce perf uses (memif pair by\n"
               "  default), no transport: the medium's floor. --size %u..%u (default 64),\n"
               "  --iters round trips (default 100000; the stream sends 10 times as many).\n",
               kMinSize, kMaxSize);
  return out == stdout ? 0 : 2;
}

namespace {

bool ParseNumber(const char* text, uint64_t max, uint64_t* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

// The port and its pool, as the runtime opened them; the engine is never
// polled (inline progress), so the port is ours alone.
struct Port {
  transport::PacketIo* io = nullptr;
  rte_mempool* pool = nullptr;
};

rte_mbuf* Frame(const Port& p, uint32_t size, Kind kind, uint64_t value) {
  rte_mbuf* m = rte_pktmbuf_alloc(p.pool);
  if (m == nullptr) return nullptr;
  uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(size)));
  if (d == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  std::memset(d, 0, size);
  std::memset(d, 0xff, 6);                // broadcast: nobody's address
  d[6] = 0x02;                            // a locally administered source
  d[12] = kEtherType >> 8;
  d[13] = kEtherType & 0xff;
  d[14] = kind;
  std::memcpy(d + 16, &value, sizeof(value));
  return m;
}

// Our frame's kind and value; false for anything else.
bool Read(const rte_mbuf* m, Kind* kind, uint64_t* value) {
  if (rte_pktmbuf_data_len(m) < 24) return false;
  const uint8_t* d = rte_pktmbuf_mtod(m, const uint8_t*);
  if (d[12] != (kEtherType >> 8) || d[13] != (kEtherType & 0xff)) return false;
  *kind = static_cast<Kind>(d[14]);
  std::memcpy(value, d + 16, sizeof(*value));
  return true;
}

double Seconds(uint64_t cycles) { return static_cast<double>(cycles) / static_cast<double>(rte_get_tsc_hz()); }

// Sends one frame (taken over), retrying while the port is full; false on a
// signal or when the port took nothing for kSendSeconds (the frame is freed).
bool SendOne(const Port& p, rte_mbuf* m) {
  const uint64_t start = rte_rdtsc();
  while (p.io->TxBurst(&m, 1) == 0) {
    if (pmd::ShutdownRequested() || Seconds(rte_rdtsc() - start) > kSendSeconds) {
      rte_pktmbuf_free(m);
      return false;
    }
  }
  return true;
}

int Serve(const Port& p) {
  rte_mbuf* burst[kBurst];
  uint64_t streamed = 0;
  uint64_t last_frame = rte_rdtsc();
  for (;;) {
    if (pmd::ShutdownRequested()) return 2;
    const uint16_t n = p.io->RxBurst(burst, kBurst);
    if (n == 0) {
      if (Seconds(rte_rdtsc() - last_frame) > kServerIdleSeconds) {
        std::fprintf(stderr, "uroce floor: no frame for %.0f s: the server stops\n", kServerIdleSeconds);
        return 1;
      }
      continue;
    }
    last_frame = rte_rdtsc();
    // Leaving mid-burst: the frames not looked at yet are ours to free.
    auto leave = [&](uint16_t from, int rc) {
      for (uint16_t j = from; j < n; ++j) rte_pktmbuf_free(burst[j]);
      return rc;
    };
    for (uint16_t i = 0; i < n; ++i) {
      Kind kind;
      uint64_t value;
      if (!Read(burst[i], &kind, &value)) {
        rte_pktmbuf_free(burst[i]);
        continue;
      }
      switch (kind) {
        case kPing:
          if (!SendOne(p, burst[i])) return leave(static_cast<uint16_t>(i + 1), 2);  // the same frame goes back
          break;
        case kStream:
          ++streamed;
          rte_pktmbuf_free(burst[i]);
          break;
        case kEnd: {
          rte_pktmbuf_free(burst[i]);
          rte_mbuf* reply = Frame(p, kMinSize, kCount, streamed);
          if (reply == nullptr || !SendOne(p, reply)) return leave(static_cast<uint16_t>(i + 1), 1);
          streamed = 0;
          break;
        }
        case kQuit:
          rte_pktmbuf_free(burst[i]);
          return leave(static_cast<uint16_t>(i + 1), 0);
        default:
          rte_pktmbuf_free(burst[i]);
          break;
      }
    }
  }
}

// Waits for a frame of `want` (others are freed); its value, or false after
// `seconds` or on a signal.
bool Await(const Port& p, Kind want, double seconds, uint64_t* value) {
  rte_mbuf* burst[kBurst];
  const uint64_t start = rte_rdtsc();
  for (;;) {
    const uint16_t n = p.io->RxBurst(burst, kBurst);
    bool found = false;
    for (uint16_t i = 0; i < n; ++i) {
      Kind kind;
      uint64_t v;
      if (!found && Read(burst[i], &kind, &v) && kind == want) {
        *value = v;
        found = true;
      }
      rte_pktmbuf_free(burst[i]);
    }
    if (found) return true;
    if (pmd::ShutdownRequested() || Seconds(rte_rdtsc() - start) > seconds) return false;
  }
}

int Measure(const Port& p, const Options& o) {
  // The link: one bounce that comes back (the server may start later).
  uint64_t echoed = 0;
  bool up = false;
  for (int tries = 0; tries < 300 && !up; ++tries) {
    rte_mbuf* m = Frame(p, o.size, kPing, ~uint64_t{0});
    if (m == nullptr || !SendOne(p, m)) return 1;
    up = Await(p, kPing, 0.1, &echoed);
  }
  if (!up) {
    std::fprintf(stderr, "uroce floor: no answer from a server within 30 s\n");
    return 1;
  }
  // Warm-up, 0.2 s of bounces not counted: the first thousands of round
  // trips after start-up take 20 times as long (both sides' threads and
  // caches settling), and a short run would report them.
  for (const uint64_t start = rte_rdtsc(); Seconds(rte_rdtsc() - start) < 0.2;) {
    rte_mbuf* m = Frame(p, o.size, kPing, ~uint64_t{0} - 1);
    if (m == nullptr || !SendOne(p, m)) return 1;
    if (!Await(p, kPing, kReplySeconds, &echoed)) {
      std::fprintf(stderr, "uroce floor: a warm-up round trip did not come back\n");
      return 1;
    }
  }
  // Round trips: half of each, as uroce perf reports its latency.
  std::vector<double> half_us;
  half_us.reserve(o.iters);
  for (uint64_t i = 0; i < o.iters; ++i) {
    rte_mbuf* m = Frame(p, o.size, kPing, i);
    if (m == nullptr) {
      std::fprintf(stderr, "uroce floor: out of mbufs\n");
      return 1;
    }
    const uint64_t t0 = rte_rdtsc();
    if (!SendOne(p, m)) return 2;
    uint64_t got = 0;
    // A stale echo (of the link check) is skipped.
    do {
      if (!Await(p, kPing, kReplySeconds, &got)) {
        std::fprintf(stderr, "uroce floor: round trip %llu did not come back\n", (unsigned long long)i);
        return 1;
      }
    } while (got != i);
    half_us.push_back(Seconds(rte_rdtsc() - t0) * 1e6 / 2);
  }
  // A stream: bursts as fast as the port takes them, then how many arrived.
  const uint64_t frames = o.iters * 10;
  const uint64_t t0 = rte_rdtsc();
  rte_mbuf* burst[kBurst];
  for (uint64_t sent = 0; sent < frames;) {
    const uint16_t n = static_cast<uint16_t>(std::min<uint64_t>(kBurst, frames - sent));
    uint16_t built = 0;
    while (built < n) {
      rte_mbuf* m = Frame(p, o.size, kStream, sent + built);
      if (m == nullptr) break;
      burst[built++] = m;
    }
    if (built == 0) {
      std::fprintf(stderr, "uroce floor: out of mbufs\n");
      return 1;
    }
    uint16_t done = 0;
    const uint64_t burst_start = rte_rdtsc();
    while (done < built) {
      done = static_cast<uint16_t>(done + p.io->TxBurst(burst + done, static_cast<uint16_t>(built - done)));
      const bool stuck = done < built && Seconds(rte_rdtsc() - burst_start) > kSendSeconds;
      if (pmd::ShutdownRequested() || stuck) {
        rte_pktmbuf_free_bulk(burst + done, built - done);
        if (stuck) std::fprintf(stderr, "uroce floor: the port took nothing for %.0f s\n", kSendSeconds);
        return stuck ? 1 : 2;
      }
    }
    sent += built;
  }
  uint64_t arrived = 0;
  bool counted = false;
  for (int tries = 0; tries < 10 && !counted; ++tries) {
    rte_mbuf* m = Frame(p, kMinSize, kEnd, 0);
    if (m == nullptr || !SendOne(p, m)) return 1;
    counted = Await(p, kCount, kReplySeconds, &arrived);
  }
  const double seconds = Seconds(rte_rdtsc() - t0);
  rte_mbuf* quit = Frame(p, kMinSize, kQuit, 0);
  if (quit != nullptr) SendOne(p, quit);
  if (!counted) {
    std::fprintf(stderr, "uroce floor: the server did not say how many frames arrived\n");
    return 1;
  }
  std::sort(half_us.begin(), half_us.end());
  double sum = 0;
  for (double v : half_us) sum += v;
  const double median = half_us[half_us.size() / 2];
  const double p99 = half_us[std::min(half_us.size() - 1, half_us.size() * 99 / 100)];
  const double rate = static_cast<double>(arrived) / seconds / 1e6;
  std::printf("uroce floor: %llu round trips, then %llu of %llu streamed frames arrived in %.3f s\n",
              (unsigned long long)o.iters, (unsigned long long)arrived, (unsigned long long)frames, seconds);
  std::printf("floor: size %u lat_median_us %.2f lat_p99_us %.2f lat_mean_us %.2f rate_mmsg_per_s %.3f\n", o.size,
              median, p99, sum / static_cast<double>(half_us.size()), rate);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int FloorCommand(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    std::string error;
    if (TakeConfigFlag(argc, argv, &i, &o.config, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "uroce floor: %s\n", error.c_str());
        return 2;
      }
      continue;
    }
    if (i + 1 >= argc) return FloorUsage(stderr);
    uint64_t v = 0;
    if (flag == "--role") {
      o.role = argv[++i];
    } else if (flag == "--size" && ParseNumber(argv[i + 1], kMaxSize, &v) && v >= kMinSize) {
      o.size = static_cast<uint32_t>(v);
      ++i;
    } else if (flag == "--iters" && ParseNumber(argv[i + 1], kMaxIters, &v) && v > 0) {
      o.iters = v;
      ++i;
    } else {
      return FloorUsage(stderr);
    }
  }
  if (o.role != "server" && o.role != "client") return FloorUsage(stderr);
  // The engine must not take our frames: it runs only when polled.
  o.config.overrides.push_back({"engine", "progress", "inline"});
  auto config = LoadToolConfig(o.config, o.role == "server" ? "pair-a" : "pair-b");
  if (!config.ok()) {
    std::fprintf(stderr, "uroce floor: %s\n", config.status().ToString().c_str());
    return 1;
  }
  pmd::InstallShutdownSignals();
  if (Status s = pmd::StartEalFor(config->eal); !s.ok()) {
    std::fprintf(stderr, "uroce floor: %s\n", s.ToString().c_str());
    return 1;
  }
  auto rt = runtime::Runtime::Start(*config);
  if (rt.ok()) {
    if (Status linked = (*rt)->WaitForLinks(); !linked.ok()) rt = linked;
  }
  if (!rt.ok()) {
    std::fprintf(stderr, "uroce floor: %s\n", rt.status().ToString().c_str());
    (void)pmd::StopEal();
    return 1;
  }
  runtime::Runtime::Device& ep = (*rt)->device(0);
  const Port port{ep.io.get(), ep.pool.get()};
  int rc = 1;
  if (o.size > ep.config.mtu + 14u) {
    std::fprintf(stderr, "uroce floor: --size %u is more than the port's MTU %u allows\n", o.size, ep.config.mtu);
  } else {
    rc = o.role == "server" ? Serve(port) : Measure(port, o);
  }
  const runtime::ShutdownReport report = (*rt)->Shutdown();
  rt->reset();
  if (!report.pools_full() || !report.impairments.empty()) {
    std::fprintf(stderr, "uroce floor: %s\n", report.Summary().c_str());
  }
  (void)pmd::StopEal();
  return rc != 0 ? rc : report.pools_full() ? 0 : 1;
}

}  // namespace uroce::tools
