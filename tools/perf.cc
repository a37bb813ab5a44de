// `uroce perf`: latency, bandwidth and message rate per RDMA operation, like
// perftest's ib_send_lat / ib_write_bw / ... . With --port ring one process
// runs both sides over a net_ring pair; with memif or afpacket a server and a
// client process exchange QPNs, PSNs, addresses and rkeys over a side
// channel (tools/side_channel.h) and then measure over DPDK. With --port
// daemon both attach to the running `uroce daemon` (UROCE_DAEMON or its
// default socket) as any program does, and their frames cross its switch:
// the same measurement with the daemon in the path.
#include <rte_cycles.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/private_dir.h"
#include "host/daemon_client.h"
#include "pmd/eal.h"
#include "pmd/port_setup.h"
#include "runtime/runtime.h"
#include "pmd/shutdown_signal.h"
#include "tools/command.h"
#include "tools/config_flags.h"
#include "tools/perf_side.h"
#include "tools/side_channel.h"
#include "transport/address_text.h"

namespace uroce::tools {
namespace {

constexpr unsigned kStallSeconds = 30;  // no completion for this long: the run failed
// Every wait on the side channel ends (the peer is not trusted to answer):
// the client's connect, each reply, and the server's wait between messages.
constexpr unsigned kControlTimeoutMs = 60000;
// The server waits this long for its client to connect.
constexpr unsigned kAcceptTimeoutMs = 300000;
// During a run the client says TICK this often, so the server can tell a
// long run from a client that went silent (kControlTimeoutMs without a line).
constexpr unsigned kTickMs = 1000;
// --clients: a server serves at most this many at once.
constexpr unsigned long kMaxClients = 64;

struct Options {
  std::vector<PerfTest> tests = {PerfTest::kSendLat};
  std::vector<uint32_t> sizes = {64};
  uint64_t iters = 0;  // 0: the default (1000)
  uint32_t qps = 1;
  uint32_t idle_qps = 0;
  uint32_t window = 0;  // 0: RunSpec::DefaultWindow
  uint32_t clients = 1;  // the server's: clients served at once
  std::string port = "ring";
  std::string role;  // server | client; empty with ring
  std::string control;
  // The side channel's token (SideChannel::ParseToken's hex); empty: no
  // hello. A TCP server without --token makes one (token_new).
  std::string token;
  bool token_new = false;
  bool token_none = false;  // --token none: no hello over TCP, asked for by name
  bool verify = false;
  bool csv = false;
  bool json = false;  // the table as one JSON array of objects
  bool quiet = false;
  ConfigFlags config;
};

}  // namespace

int PerfUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce perf [--test T[,T...]|all] [--size BYTES[,BYTES...]] [--iters N] [--qps N]\n"
               "                  [--idle-qps N] [--window N] [--port ring|memif|afpacket|daemon] [--role server|client]\n"
               "                  [--control PATH|HOST:PORT] [--token HEX|none] [--clients N] [--verify] [--csv|--json]\n"
               "                  [--quiet]\n"
               "                  [--config FILE] [--set SECTION.KEY=VALUE ...] [--impair SPEC]\n"
               "  tests: send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw incast\n"
               "  incast: --qps N WRITE flows of --size into the server, each with its share\n"
               "  of --window, and a probe QP reading 64 B back to back: aggregate MB/s,\n"
               "  Jain's fairness index over the flows, the probe's median and p99 round\n"
               "  trip (not in --test all; docs/congestion.md).\n"
               "  --port ring runs both sides in this process (configs/ring.ini); memif and\n"
               "  afpacket run one side per process (configs/pair-a.ini / pair-b.ini,\n"
               "  veth-a.ini / veth-b.ini for the server / client), started in any order.\n"
               "  daemon: each side attaches to the running uroce daemon (UROCE_DAEMON or\n"
               "  /run/uroce/uroce.sock) like any program, so its switch is in the path.\n"
               "  Latency: median and p99 of half a round trip (send, write) or a whole one\n"
               "  (read, atomic), like perftest. --verify checks every byte that moves.\n"
               "  --control: the side channel, a UNIX socket PATH (default\n"
               "  perf-PORT.sock in the user's private directory: UROCE_RUNTIME_DIR,\n"
               "  XDG_RUNTIME_DIR/uroce or /tmp/uroce-UID), both sides of the\n"
               "  same user; or TCP HOST:PORT. TCP hands the client a writable rkey, so\n"
               "  an empty HOST (:PORT) listens on 127.0.0.1 only; give 0.0.0.0:PORT or\n"
               "  an address to serve other hosts, on a network you trust.\n"
               "  --token: over TCP the sides first prove they share a one-time token.\n"
               "  The server makes one and prints 'uroce perf: token HEX' on stderr\n"
               "  (or takes --token HEX or UROCE_PERF_TOKEN); the client must be given\n"
               "  it the same way. --token none on both sides: no token (the first\n"
               "  client to connect gets the run). On a PATH the token is optional.\n"
               "  The server waits up to 300 s for a client and 60 s for each message.\n"
               "  --clients N (server): serve N clients at once (up to 64), each with its\n"
               "  own QPs; every run starts when all N have asked for it, so N client\n"
               "  processes make an N:1 incast (docs/congestion.md).\n"
               "  Limits: --size up to 1G, --iters up to 100000000, --qps up to 256,\n"
               "  --window up to 4096, at most 4 GiB of buffer per side.\n"
               "  --idle-qps N: N more connected RC QPs on each side that never carry\n"
               "  anything (up to 20000; what idle QPs cost every message).\n");
  return out == stdout ? 0 : 2;
}

namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool ParseSize(const std::string& s, uint32_t* out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return false;
  if (*end == 'K' || *end == 'k') v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
  if (*end != '\0' || v == 0 || v > (1u << 30)) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// The side channel's token: --token, else UROCE_PERF_TOKEN (so a script can
// give both sides the same one), checked and in lowercase; "none" turns the
// hello off. Over TCP a client must have one or "none"; a server without
// one makes its own (RunServer prints it).
bool ResolveToken(Options* o) {
  if (o->port == "ring") return true;  // one process: no side channel
  if (o->token.empty()) {
    // secure_getenv(3): a token from the environment is not taken into a
    // set-user-ID program.
    const char* env = secure_getenv("UROCE_PERF_TOKEN");
    if (env != nullptr && *env != '\0') o->token = env;
  }
  if (o->token == "none") {
    o->token.clear();
    o->token_none = true;
    return true;
  }
  if (!o->token.empty()) {
    auto token = SideChannel::ParseToken(o->token);
    if (!token.ok()) {
      std::fprintf(stderr, "uroce perf: --token: %s\n", token.status().message().c_str());
      return false;
    }
    o->token = *token;
    return true;
  }
  if (SideChannel::IsPath(o->control)) return true;  // the peer credentials are the check there
  if (o->role == "server") {
    o->token_new = true;
    return true;
  }
  std::fprintf(stderr,
               "uroce perf: --control %s is TCP: give the token the server printed ('uroce perf: token HEX') "
               "with --token HEX or UROCE_PERF_TOKEN, or --token none if the server was started with --token none\n",
               o->control.c_str());
  return false;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (TakeConfigFlag(argc, argv, &i, &o->config, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "uroce perf: %s\n", error.c_str());
        return false;
      }
      continue;
    }
    const std::string flag = argv[i];
    if (flag == "--verify") {
      o->verify = true;
      continue;
    }
    if (flag == "--csv") {
      o->csv = true;
      continue;
    }
    if (flag == "--json") {
      o->json = true;
      continue;
    }
    if (flag == "--quiet") {
      o->quiet = true;
      continue;
    }
    if (flag == "--help" || flag == "-h" || i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (flag == "--test") {
      o->tests.clear();
      for (const std::string& t : SplitList(v == "all" ? "send_lat,write_lat,read_lat,atomic_lat,send_bw,write_bw,read_bw" : v)) {
        PerfTest test;
        if (!ParsePerfTest(t, &test)) {
          std::fprintf(stderr, "uroce perf: unknown test '%s'\n", t.c_str());
          return false;
        }
        o->tests.push_back(test);
      }
    } else if (flag == "--size") {
      o->sizes.clear();
      for (const std::string& s : SplitList(v)) {
        uint32_t size = 0;
        if (!ParseSize(s, &size)) {
          std::fprintf(stderr, "uroce perf: bad size '%s'\n", s.c_str());
          return false;
        }
        o->sizes.push_back(size);
      }
    } else if (flag == "--iters") {
      char* end = nullptr;
      o->iters = std::strtoull(v.c_str(), &end, 10);
      if (o->iters == 0 || *end != '\0' || v[0] == '-') return false;
    } else if (flag == "--qps") {
      o->qps = static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 10));
      if (o->qps == 0 || o->qps > 256) return false;
    } else if (flag == "--idle-qps") {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (*end != '\0' || v.empty() || v[0] == '-' || n > RunSpec::kMaxIdleQps) return false;
      o->idle_qps = static_cast<uint32_t>(n);
    } else if (flag == "--window") {
      o->window = static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 10));
      if (o->window == 0 || o->window > 4096) return false;
    } else if (flag == "--port") {
      if (v != "ring" && v != "memif" && v != "afpacket" && v != "daemon") return false;
      o->port = v;
    } else if (flag == "--role") {
      if (v != "server" && v != "client") return false;
      o->role = v;
    } else if (flag == "--clients") {
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (*end != '\0' || v.empty() || v[0] == '-' || n == 0 || n > kMaxClients) return false;
      o->clients = static_cast<uint32_t>(n);
    } else if (flag == "--control") {
      o->control = v;
    } else if (flag == "--token") {
      o->token = v;
      if (v.empty()) return false;
    } else {
      std::fprintf(stderr, "uroce perf: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if (o->sizes.empty() || o->tests.empty()) return false;
  if (o->port == "ring" && !o->role.empty()) {
    std::fprintf(stderr, "uroce perf: --port ring runs both sides in one process; drop --role\n");
    return false;
  }
  if (o->port != "ring" && o->role.empty()) {
    std::fprintf(stderr, "uroce perf: --port %s needs --role server or --role client\n", o->port.c_str());
    return false;
  }
  if (o->clients > 1 && o->role != "server") {
    std::fprintf(stderr, "uroce perf: --clients is the server's (--role server)\n");
    return false;
  }
  if (o->port == "daemon" && !o->config.file.empty()) {
    std::fprintf(stderr, "uroce perf: --port daemon takes its configuration from the daemon; drop --config\n");
    return false;
  }
  if (o->control.empty()) {
    // In the user's private directory: a fixed path in the shared /tmp could
    // be bound first by another user, the peer of the run then.
    auto dir = PrivateRuntimeDir();
    if (!dir.ok()) {
      std::fprintf(stderr, "uroce perf: --control: %s\n", dir.status().message().c_str());
      return false;
    }
    o->control = *dir + "/perf-" + o->port + ".sock";
  }
  return ResolveToken(o);
}

std::vector<RunSpec> Specs(const Options& o) {
  std::vector<RunSpec> specs;
  for (PerfTest t : o.tests) {
    for (uint32_t size : o.sizes) {
      // Atomics move 8 bytes whatever --size says: one run.
      if (t == PerfTest::kAtomicLat && size != o.sizes.front()) continue;
      RunSpec s;
      s.test = t;
      s.size = t == PerfTest::kAtomicLat ? 8 : size;
      s.iters = o.iters ? o.iters : 1000;
      s.qps = o.qps;
      s.idle_qps = o.idle_qps;
      s.window = IsLatencyTest(t) ? 1 : (o.window ? o.window : RunSpec::DefaultWindow(t, s.size));
      s.window = std::max(s.window, IsLatencyTest(t) ? 1u : s.qps);
      if (t == PerfTest::kIncast) s.window = std::max(s.window, 2 * s.qps);  // two per flow at least
      s.verify = o.verify;
      specs.push_back(s);
    }
  }
  return specs;
}

std::string Describe(const RunSpec& s) {
  return std::string(PerfTestName(s.test)) + " " + std::to_string(s.size) + " B";
}

// Progress on stderr about once a second, and the stall guard.
class Ticker {
 public:
  Ticker(const RunSpec& spec, bool quiet) : spec_(spec), quiet_(quiet) { last_change_ = next_ = Now(); }
  // False once nothing completed for kStallSeconds.
  bool Tick(uint64_t completed) {
    const uint64_t now = Now();
    if (completed != last_completed_) {
      last_completed_ = completed;
      last_change_ = now;
    }
    if (now >= next_) {
      next_ = now + rte_get_tsc_hz();
      if (!quiet_) {
        std::fprintf(stderr, "uroce perf: %s: %llu/%llu\n", Describe(spec_).c_str(), (unsigned long long)completed,
                     (unsigned long long)spec_.iters);
      }
    }
    return now - last_change_ < kStallSeconds * rte_get_tsc_hz();
  }

 private:
  static uint64_t Now() { return rte_get_tsc_cycles(); }
  RunSpec spec_;
  bool quiet_;
  uint64_t last_completed_ = ~0ull, last_change_ = 0, next_ = 0;
};

void PrintResults(const std::vector<PerfResult>& results, const Options& o, const runtime::UroceConfig& config) {
  const char* progress = config.progress == runtime::ProgressMode::kEngine ? "engine" : "inline";
  if (o.json) {
    // The CSV's columns as keys; latency only for latency tests (null else).
    std::printf("[");
    for (size_t i = 0; i < results.size(); ++i) {
      const PerfResult& r = results[i];
      // incast: the probe's round trips, and Jain's index over the flows.
      const bool lat = IsLatencyTest(r.spec.test) || r.spec.test == PerfTest::kIncast;
      auto us = [lat](double v) { return lat ? std::to_string(v) : std::string("null"); };
      const std::string jain = r.spec.test == PerfTest::kIncast ? ",\"jain\":" + std::to_string(r.jain) : "";
      std::printf("%s\n {\"test\":\"%s\",\"size\":%u,\"iters\":%llu,\"qps\":%u,\"lat_median_us\":%s,"
                  "\"lat_p99_us\":%s,\"lat_mean_us\":%s,\"mb_per_s\":%.2f,\"gbit_per_s\":%.3f,"
                  "\"mmsg_per_s\":%.4f,\"port\":\"%s\",\"progress\":\"%s\"%s}",
                  i == 0 ? "" : ",", PerfTestName(r.spec.test), r.spec.size, (unsigned long long)r.completed,
                  r.spec.qps, us(r.median_us).c_str(), us(r.p99_us).c_str(), us(r.mean_us).c_str(), r.mb_per_s,
                  r.gbit_per_s, r.mmsg_per_s, o.port.c_str(), progress, jain.c_str());
    }
    std::printf("\n]\n");
    std::fflush(stdout);
    return;
  }
  if (o.csv) {
    std::printf(
        "test,size,iters,qps,lat_median_us,lat_p99_us,lat_mean_us,mb_per_s,gbit_per_s,mmsg_per_s,port,progress\n");
    for (const PerfResult& r : results) {
      const bool lat = IsLatencyTest(r.spec.test);
      auto us = [lat](double v) { return lat ? std::to_string(v) : std::string(); };
      std::printf("%s,%u,%llu,%u,%s,%s,%s,%.2f,%.3f,%.4f,%s,%s\n", PerfTestName(r.spec.test), r.spec.size,
                  (unsigned long long)r.completed, r.spec.qps, us(r.median_us).c_str(), us(r.p99_us).c_str(),
                  us(r.mean_us).c_str(), r.mb_per_s, r.gbit_per_s, r.mmsg_per_s, o.port.c_str(), progress);
    }
    std::fflush(stdout);
    return;
  }
  std::printf("uroce perf over %s (%s progress)%s\n", o.port.c_str(), progress,
              o.verify ? ", every byte verified" : "");
  std::printf("%-11s %9s %8s %4s %12s %12s %10s %8s %8s\n", "test", "bytes", "iters", "qps", "lat med us",
              "lat p99 us", "MB/s", "Gb/s", "Mmsg/s");
  for (const PerfResult& r : results) {
    char med[32] = "-", p99[32] = "-";
    if (IsLatencyTest(r.spec.test) || r.spec.test == PerfTest::kIncast) {
      std::snprintf(med, sizeof(med), "%.2f", r.median_us);
      std::snprintf(p99, sizeof(p99), "%.2f", r.p99_us);
    }
    std::printf("%-11s %9u %8llu %4u %12s %12s %10.1f %8.3f %8.4f\n", PerfTestName(r.spec.test), r.spec.size,
                (unsigned long long)r.completed, r.spec.qps, med, p99, r.mb_per_s, r.gbit_per_s, r.mmsg_per_s);
  }
  for (const PerfResult& r : results) {
    if (r.spec.test != PerfTest::kIncast) continue;
    std::string flows;
    for (uint64_t m : r.flow_messages) flows += (flows.empty() ? "" : " ") + std::to_string(m);
    std::printf("incast %u B: %u flows, Jain's index %.3f (messages per flow at 90 %%: %s); latency columns: the "
                "64 B READ probe's round trip\n",
                r.spec.size, r.spec.qps, r.jain, flows.c_str());
  }
  std::fflush(stdout);
}

// What every role shares: configuration, EAL, runtime, and their end.
class PerfProcess {
 public:
  explicit PerfProcess(const Options& o) : o_(o) {}

  Status Start(const std::string& builtin) {
    if (o_.port == "daemon") {
      // The configuration the daemon hands out, with the caller's --set
      // overrides (lcores, say) applied on top.
      auto session = host::DaemonSession::Attach(host::DaemonSocketPath());
      if (!session.ok()) return session.status();
      auto config = runtime::LoadConfigFromDaemon(**session, o_.config.overrides);
      if (!config.ok()) return config.status();
      config_ = *config;
      daemon_ = std::move(*session);
    } else {
      auto config = LoadToolConfig(o_.config, builtin);
      if (!config.ok()) return config.status();
      config_ = *config;
    }
    // Room for --idle-qps on either side (the server learns the number only
    // from the client's RUN): the engine's QP table is one pointer per QP.
    config_.engine.max_qps =
        std::max<uint32_t>(config_.engine.max_qps, RunSpec::kMaxIdleQps + RunSpec::kMaxQps + 64);
    pmd::InstallShutdownSignals();
    UROCE_RETURN_IF_ERROR(pmd::StartEalFor(config_.eal));
    auto rt = runtime::Runtime::Start(config_);
    if (!rt.ok()) return rt.status();
    rt_ = std::move(*rt);
    // A measurement needs the link: up to each endpoint's link_timeout_ms.
    UROCE_RETURN_IF_ERROR(rt_->WaitForLinks());
    if (daemon_) StartDaemonWatch();
    return Status::Ok();
  }

  ~PerfProcess() { StopDaemonWatch(); }

  // Between tries on the side channel: keeps the engines going (inline mode)
  // so the peer's ARP requests and packets are answered. False on a signal.
  bool Idle() {
    if (rt_->inline_progress()) {
      rt_->Progress();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return !pmd::ShutdownRequested();
  }

  // Flushes (when interrupted the runtime flushes the QPs still up), shuts
  // down, stops EAL; returns the exit code.
  // `sides` die before the runtime (they deregister memory from its engines).
  int Finish(int rc, std::unique_ptr<PerfSide>* side = nullptr, std::unique_ptr<PerfSide>* other = nullptr) {
    StopDaemonWatch();
    if (rt_) {
      const bool interrupted = pmd::ShutdownRequested();
      if (interrupted) rt_->FlushQueuePairs();
      if (side != nullptr) side->reset();
      if (other != nullptr) other->reset();
      const runtime::ShutdownReport report = rt_->Shutdown();
      rt_.reset();
      if (interrupted) {
        const int sig = pmd::ShutdownSignal();
        std::fprintf(stderr, "uroce perf: %s: shut down; %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                     report.Summary().c_str());
        rc = report.pools_full() ? 128 + sig : 1;
      } else {
        std::fprintf(stderr, "uroce perf: %s\n", report.Summary().c_str());
      }
      if (!report.pools_full()) {
        std::fprintf(stderr, "uroce perf: packet buffers leaked\n");
        rc = 1;
      }
    }
    if (pmd::EalRunning()) (void)pmd::StopEal();
    return rc;
  }

  runtime::Runtime& rt() { return *rt_; }
  const runtime::UroceConfig& config() const { return config_; }

 private:
  // --port daemon: as the verbs library's progress thread does, reads what
  // the daemon sends (LINK to the other process, host/local_links.h) every
  // few milliseconds, off the measuring thread.
  void StartDaemonWatch() {
    watch_ = std::thread([this] {
      while (!stop_watch_.load(std::memory_order_acquire)) {
        if (daemon_->DaemonGone()) break;
        rt_->ApplyLinkChanges(daemon_.get());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  void StopDaemonWatch() {
    stop_watch_.store(true, std::memory_order_release);
    if (watch_.joinable()) watch_.join();
  }

  const Options& o_;
  runtime::UroceConfig config_;
  std::thread watch_;
  std::atomic<bool> stop_watch_{false};
  std::unique_ptr<host::DaemonSession> daemon_;  // --port daemon: attached while it lives
  std::unique_ptr<runtime::Runtime> rt_;
};

// Server, after the client finished: reads the completions it has not seen
// yet (the client's last ACK can arrive before this side polled its CQ).
Status Settle(runtime::Runtime& rt, PerfSide& server) {
  const uint64_t deadline = rte_get_tsc_cycles() + 10 * rte_get_tsc_hz();
  while (!server.Settled()) {
    rt.Progress();
    UROCE_RETURN_IF_ERROR(server.Step());
    if (rte_get_tsc_cycles() > deadline) return Unavailable("the server's last completions never came");
    if (pmd::ShutdownRequested()) return Unavailable("interrupted");
  }
  return Status::Ok();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "uroce perf: %s\n", s.message().c_str());
  return 1;
}

// --port ring: client on endpoint a, server on endpoint b, one thread.
int RunInProcess(const Options& o) {
  PerfProcess p(o);
  Status s = p.Start("ring");
  if (!s.ok()) return p.Finish(Fail(s));
  runtime::Runtime& rt = p.rt();
  if (rt.device_count() < 2) return p.Finish(Fail(InvalidArgument("--port ring needs two endpoints")));
  runtime::Runtime::Device& ce = rt.device(0);
  runtime::Runtime::Device& se = rt.device(1);
  std::vector<PerfResult> results;
  std::unique_ptr<PerfSide> client, server;
  for (const RunSpec& spec : Specs(o)) {
    client = std::make_unique<PerfSide>(ce, true, spec);
    server = std::make_unique<PerfSide>(se, false, spec);
    s = client->Prepare();
    if (s.ok()) s = server->Prepare();
    if (s.ok()) s = server->Connect(client->Local());
    if (s.ok()) s = client->Connect(server->Local());
    if (s.ok()) s = server->Arm();
    if (s.ok()) s = client->Arm();
    if (s.ok()) s = client->Start();
    Ticker ticker(spec, o.quiet);
    while (s.ok() && !client->done()) {
      rt.Progress();
      s = server->Step();
      if (s.ok()) s = client->Step();
      if (pmd::ShutdownRequested()) break;
      if (!ticker.Tick(client->completed())) {
        s = Unavailable(Describe(spec) + ": no completion for " + std::to_string(kStallSeconds) + " s");
      }
    }
    if (pmd::ShutdownRequested()) return p.Finish(2, &client, &server);
    if (s.ok()) s = Settle(rt, *server);
    if (s.ok()) s = server->Verify();
    if (s.ok()) s = client->Verify();
    if (!s.ok()) {
      Fail(Status(s.code(), Describe(spec) + ": " + s.message()));
      client.reset();
      server.reset();
      return p.Finish(1);
    }
    results.push_back(client->Result());
    client.reset();
    server.reset();
  }
  PrintResults(results, o, p.config());
  return p.Finish(0);
}

// One client of the server: its side channel, and its side during a run.
struct ServedClient {
  explicit ServedClient(SideChannel channel) : ch(std::move(channel)) {}
  SideChannel ch;
  std::unique_ptr<PerfSide> side;  // this run's; null between runs
  RunSpec spec;
  bool left = false;  // said BYE or closed: takes no more runs
  bool done = false;  // said DONE this run
  uint64_t last_heard = 0;
};

// The server process: answers its clients' runs (--clients N: N of them at
// once, each run of every client starting together), then exits once all
// have left.
int RunServer(const Options& o) {
  PerfProcess p(o);
  // The listener and the token come first, before the port: a memif link
  // comes up only once the client runs, and the client needs the token to
  // start. A client that connects early waits in the listen queue.
  auto listener = SideChannel::Listen(o.control);
  if (!listener.ok()) return Fail(listener.status());
  std::string token = o.token;
  if (o.token_new) {
    auto made = SideChannel::NewToken();
    if (!made.ok()) return Fail(made.status());
    token = *made;
    // On stderr, where the user (or a script) reads it and hands it to the
    // client; stdout stays the results'.
    std::fprintf(stderr, "uroce perf: token %s\n", token.c_str());
  } else if (o.token_none && !SideChannel::IsPath(o.control)) {
    std::fprintf(stderr, "uroce perf: --token none: the first client to reach %s gets the run\n", o.control.c_str());
  }
  Status s = p.Start(o.port == "memif" ? "pair-a" : "veth-a");
  if (!s.ok()) return p.Finish(Fail(s));
  runtime::Runtime& rt = p.rt();
  auto idle = [&p] { return p.Idle(); };
  runtime::Runtime::Device& ep = rt.device(0);
  std::fprintf(stderr, "uroce perf: server %s (%s) on %s, waiting for %u client%s on %s\n", ep.name.c_str(),
               transport::GidToString(ep.side.gid).c_str(), ep.config.port.c_str(), o.clients,
               o.clients == 1 ? "" : "s", listener->LocalAddress().c_str());  // the port PORT 0 picked, too
  std::vector<ServedClient> clients;
  clients.reserve(o.clients);
  // Sides die before the runtime (they deregister memory from its engines).
  auto finish = [&p, &clients](int rc) {
    if (pmd::ShutdownRequested()) p.rt().FlushQueuePairs();  // as Finish does, before the sides go
    for (ServedClient& c : clients) c.side.reset();
    return p.Finish(rc);
  };
  while (clients.size() < o.clients) {
    auto ch = listener->Accept(kAcceptTimeoutMs, idle, token);
    if (!ch.ok()) return finish(pmd::ShutdownRequested() ? 2 : Fail(ch.status()));
    clients.emplace_back(std::move(*ch));
  }
  int rc = 0;
  for (;;) {
    // A run: every client still here sends its RUN and its side's
    // information, or leaves. A client's failure ends the server (it is a
    // measurement: nothing would be left to compare).
    size_t running = 0;
    for (ServedClient& c : clients) {
      if (c.left) continue;
      auto line = c.ch.Receive(kControlTimeoutMs, idle);
      if (!line.ok()) {
        if (pmd::ShutdownRequested()) return finish(2);
        if (line.status().code() == StatusCode::kNotFound) {  // the client left
          c.left = true;
          continue;
        }
        return finish(Fail(line.status()));
      }
      if (*line == "BYE") {
        c.left = true;
        continue;
      }
      if (line->rfind("HELLO ", 0) == 0) {
        // A client with a token, and this server without one.
        const Status hello = PermissionDenied("the client sent a token, and this server takes none (--token none "
                                              "or a path without --token): give both sides the same");
        (void)c.ch.Send("ERROR " + hello.message());
        return finish(Fail(hello));
      }
      auto spec = RunSpec::Decode(*line);
      if (!spec.ok()) {
        (void)c.ch.Send("ERROR " + spec.status().message().substr(0, 1024));  // the client says why it ends
        return finish(Fail(spec.status()));
      }
      auto info_line = c.ch.Receive(kControlTimeoutMs, idle);
      if (!info_line.ok()) return finish(Fail(info_line.status()));
      auto remote = SideInfo::Decode(*info_line);
      if (!remote.ok()) return finish(Fail(remote.status()));
      c.spec = *spec;
      c.side = std::make_unique<PerfSide>(ep, false, *spec);
      s = c.side->Prepare();
      if (s.ok()) s = c.side->Connect(*remote);
      if (s.ok()) s = c.side->Arm();
      if (!s.ok()) {
        (void)c.ch.Send("ERROR " + s.message());
        return finish(Fail(s));
      }
      c.done = false;
      ++running;
    }
    if (running == 0) break;  // all have left
    // Each client starts once it has our side's information: all at once.
    for (ServedClient& c : clients) {
      if (s.ok() && c.side) s = c.ch.Send(c.side->Local().Encode());
    }
    // Answer until every client says DONE; look at the channels about once a
    // millisecond, so the loop stays free of system calls in between. A
    // client says TICK every second; one silent for kControlTimeoutMs ends
    // the run rather than holding this server forever. A client that is
    // done gets its verdict at once: a slower one (its rate cut by
    // congestion control, say) does not keep it waiting.
    const uint64_t check_every = rte_get_tsc_hz() / 1000;
    const uint64_t silence_limit = rte_get_tsc_hz() / 1000 * kControlTimeoutMs;
    uint64_t next_check = rte_get_tsc_cycles() + check_every;
    for (ServedClient& c : clients) c.last_heard = rte_get_tsc_cycles();
    auto answer = [&](ServedClient& c, Status verdict) {
      if (verdict.ok()) verdict = Settle(rt, *c.side);
      if (verdict.ok()) verdict = c.side->Verify();
      (void)c.ch.Send(verdict.ok() ? "RESULT ok" : "RESULT fail " + verdict.message());
      if (!verdict.ok() || !o.quiet) {
        std::fprintf(stderr, "uroce perf: %s: %s\n", Describe(c.spec).c_str(),
                     verdict.ok() ? "served" : verdict.message().c_str());
      }
      if (!verdict.ok()) rc = 1;
      c.side.reset();
    };
    size_t done = 0;
    while (s.ok() && done < running) {
      rt.Progress();
      for (ServedClient& c : clients) {
        if (s.ok() && c.side) s = c.side->Step();
      }
      if (pmd::ShutdownRequested()) return finish(2);
      const uint64_t now = rte_get_tsc_cycles();
      if (now < next_check) continue;
      next_check = now + check_every;
      for (ServedClient& c : clients) {
        if (!c.side || c.done || !s.ok()) continue;
        std::string msg;
        Status err;
        if (c.ch.TryReceive(&msg, &err)) {
          c.last_heard = now;
          if (msg == "DONE") {
            c.done = true;
            ++done;
            answer(c, Status::Ok());
          } else if (msg != "TICK") {
            s = InvalidArgument("expected DONE, got " + PrintableLine(msg));
          }
        } else if (!err.ok()) {
          s = err;
        } else if (now - c.last_heard > silence_limit) {
          s = Unavailable("a client said nothing for " + std::to_string(kControlTimeoutMs / 1000) + " s");
        }
      }
    }
    for (ServedClient& c : clients) {
      if (c.side) answer(c, s);  // the run failed: each client still waiting hears why
    }
    if (rc != 0) break;
  }
  return finish(rc);
}

int RunClient(const Options& o) {
  PerfProcess p(o);
  Status s = p.Start(o.port == "memif" ? "pair-b" : "veth-b");
  if (!s.ok()) return p.Finish(Fail(s));
  runtime::Runtime& rt = p.rt();
  auto idle = [&p] { return p.Idle(); };
  auto ch = SideChannel::Connect(o.control, kControlTimeoutMs, idle, o.token);
  if (!ch.ok()) return p.Finish(pmd::ShutdownRequested() ? 2 : Fail(ch.status()));
  runtime::Runtime::Device& ep = rt.device(0);
  std::vector<PerfResult> results;
  std::unique_ptr<PerfSide> side;
  for (const RunSpec& spec : Specs(o)) {
    side = std::make_unique<PerfSide>(ep, true, spec);
    s = side->Prepare();
    if (s.ok()) s = ch->Send(spec.Encode());
    if (s.ok()) s = ch->Send(side->Local().Encode());
    StatusOr<std::string> reply = s.ok() ? ch->Receive(kControlTimeoutMs, idle) : StatusOr<std::string>(s);
    if (reply.ok() && reply->rfind("ERROR ", 0) == 0) reply = IoError("the server refused: " + PrintableLine(reply->substr(6)));
    if (reply.ok()) {
      auto remote = SideInfo::Decode(*reply);
      s = remote.ok() ? side->Connect(*remote) : remote.status();
    } else {
      s = reply.status();
    }
    if (s.ok()) s = side->Arm();
    if (s.ok()) s = side->Start();
    Ticker ticker(spec, o.quiet);
    const uint64_t tick_every = rte_get_tsc_hz() / 1000 * kTickMs;
    uint64_t next_tick = rte_get_tsc_cycles() + tick_every;
    while (s.ok() && !side->done()) {
      rt.Progress();
      s = side->Step();
      if (pmd::ShutdownRequested()) return p.Finish(2, &side);
      if (!ticker.Tick(side->completed())) {
        s = Unavailable(Describe(spec) + ": no completion for " + std::to_string(kStallSeconds) + " s");
      }
      if (s.ok() && rte_get_tsc_cycles() >= next_tick) {
        next_tick = rte_get_tsc_cycles() + tick_every;
        s = ch->Send("TICK");  // the server's sign that this client is alive
      }
    }
    if (s.ok()) s = ch->Send("DONE");
    if (s.ok()) {
      auto verdict = ch->Receive(kControlTimeoutMs, idle);
      if (!verdict.ok()) s = verdict.status();
      else if (*verdict != "RESULT ok") s = IoError("the server says: " + PrintableLine(verdict->substr(std::min<size_t>(7, verdict->size()))));
    }
    if (s.ok()) s = side->Verify();
    if (!s.ok()) {
      if (pmd::ShutdownRequested()) return p.Finish(2, &side);
      Fail(Status(s.code(), Describe(spec) + ": " + s.message()));
      return p.Finish(1, &side);
    }
    results.push_back(side->Result());
    side.reset();
  }
  (void)ch->Send("BYE");
  PrintResults(results, o, p.config());
  return p.Finish(0, &side);
}

}  // namespace

int PerfCommand(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) return PerfUsage(stderr);
  // The limits the server applies to a peer's RUN, applied to our own
  // flags first, so an absurd request fails here with a clear message.
  for (const RunSpec& spec : Specs(o)) {
    if (Status v = spec.Validate(); !v.ok()) {
      std::fprintf(stderr, "uroce perf: %s\n", v.message().c_str());
      return 2;
    }
  }
  if (o.port == "ring") return RunInProcess(o);
  return o.role == "server" ? RunServer(o) : RunClient(o);
}

}  // namespace uroce::tools
