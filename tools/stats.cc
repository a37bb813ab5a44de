// `uroce stats`: the counters of a running uroce process, read from its DPDK
// telemetry socket (the same data `dpdk-telemetry.py` shows under /uroce/).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "host/daemon_client.h"
#include "runtime/telemetry_client.h"
#include "tools/command.h"
#include "tools/config_flags.h"
#include "tools/json_value.h"

namespace uroce::tools {
namespace {

}  // namespace

int StatsUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce stats (--pid PID | --file-prefix PREFIX | --config FILE | --socket PATH) [--json]\n"
               "       uroce stats --daemon [SOCKET]\n"
               "  PID: a running uroce process (a tool, or a program under uroce exec) whose\n"
               "  configuration sets no [eal] file_prefix (configs/pair-a.ini and the others);\n"
               "  PREFIX is the running process's EAL --file-prefix ([eal] file_prefix) where it\n"
               "  sets one. --daemon: the processes\n"
               "  attached to a uroce daemon (SOCKET, or $UROCE_DAEMON, or /run/uroce/uroce.sock),\n"
               "  the uplink's and the switch's counters.\n");
  return out == stdout ? 0 : 2;
}

namespace {

// A process without a configured file prefix runs under EAL's unique one,
// uroce-PID-TAG-N (pmd/eal.cc): the one directory of that pid with a
// telemetry socket.
StatusOr<std::string> PrefixOfPid(const std::string& pid) {
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("--pid wants a process id, not '" + pid + "'");
  }
  const std::string probe = runtime::TelemetrySocketPath("x");  // BASE/dpdk/x/dpdk_telemetry.v2
  const std::filesystem::path dir = std::filesystem::path(probe).parent_path().parent_path();
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("uroce-" + pid + "-", 0) == 0 && std::filesystem::exists(entry.path() / "dpdk_telemetry.v2", ec)) {
      found.push_back(name);
    }
  }
  if (found.empty()) return NotFound("no uroce process " + pid + " with telemetry under " + dir.string());
  if (found.size() > 1) return InvalidArgument("process " + pid + " has several prefixes; give --file-prefix");
  return found[0];
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "uroce stats: %s\n", what.c_str());
  return 1;
}

// The object or array under the answer's single key.
StatusOr<JsonValue> Answer(runtime::TelemetryClient& client, const std::string& command) {
  auto raw = client.Query(command);
  if (!raw.ok()) return raw.status();
  auto json = ParseJson(*raw);
  if (!json.ok()) return Status(json.status().code(), command + ": " + json.status().message());
  const size_t comma = command.find(',');
  const JsonValue* v = json->Get(command.substr(0, comma));
  if (v == nullptr || v->kind == JsonValue::Kind::kNull) {
    return NotFound(command + ": no answer (not a uroce process, or it is shutting down)");
  }
  return *v;
}

void PrintCounters(const JsonValue& object, const std::vector<std::string>& skip) {
  int column = 0;
  for (const auto& [key, value] : object.members) {
    bool skipped = false;
    for (const std::string& s : skip) skipped |= key == s;
    if (skipped) continue;
    if (column == 0) std::printf("   ");
    std::printf(" %s=%s", key.c_str(), value.text.c_str());
    if (++column == 6) {
      std::printf("\n");
      column = 0;
    }
  }
  if (column != 0) std::printf("\n");
}

}  // namespace

int StatsCommand(int argc, char** argv) {
  std::string prefix, socket_path;
  bool json = false;
  ConfigFlags flags;
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (TakeConfigFlag(argc, argv, &i, &flags, &error)) {
      if (!error.empty()) return Fail(error);
      continue;
    }
    if (!std::strcmp(argv[i], "--daemon")) {
      const std::string path = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : host::DaemonSocketPath();
      auto text = host::QueryDaemonStats(path);
      if (!text.ok()) return Fail(text.status().message());
      std::printf("uroce daemon at %s\n%s", path.c_str(), text->c_str());
      return 0;
    }
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "--file-prefix") && i + 1 < argc) {
      prefix = argv[++i];
    } else if (!std::strcmp(argv[i], "--socket") && i + 1 < argc) {
      socket_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--pid") && i + 1 < argc) {
      auto found = PrefixOfPid(argv[++i]);
      if (!found.ok()) return Fail(found.status().message());
      prefix = *found;
    } else {
      return StatsUsage(stderr);
    }
  }
  if (!flags.file.empty()) {
    auto config = LoadToolConfig(flags, "");
    if (!config.ok()) return Fail(config.status().message());
    if (config->eal.file_prefix.empty()) {
      return Fail(flags.file + " sets no [eal] file_prefix; give the running process's --file-prefix");
    }
    prefix = config->eal.file_prefix;
  }
  if (socket_path.empty()) {
    if (prefix.empty()) return StatsUsage(stderr);
    socket_path = runtime::TelemetrySocketPath(prefix);
  }
  auto client = runtime::TelemetryClient::Connect(socket_path);
  if (!client.ok()) return Fail(client.status().message());

  if (json) {
    // The raw answers, one JSON object per line, as dpdk-telemetry.py would.
    std::vector<std::string> commands = {"/uroce/info", "/uroce/threads", "/uroce/ports"};
    auto ports = Answer(*client, "/uroce/ports");
    if (!ports.ok()) return Fail(ports.status().message());
    for (const JsonValue& p : ports->items) commands.push_back("/uroce/port," + p.text);
    auto qps = Answer(*client, "/uroce/qps");
    if (!qps.ok()) return Fail(qps.status().message());
    for (const JsonValue& q : qps->items) commands.push_back("/uroce/qp," + q.text);
    for (const std::string& c : commands) {
      auto raw = client->Query(c);
      if (!raw.ok()) return Fail(raw.status().message());
      std::printf("%s\n", raw->c_str());
    }
    return 0;
  }

  auto info = Answer(*client, "/uroce/info");
  if (!info.ok()) return Fail(info.status().message());
  const JsonValue* pid = info->Get("pid");
  const JsonValue* progress = info->Get("progress");
  std::printf("uroce process %s (%s progress), telemetry %s\n", pid ? pid->text.c_str() : "?",
              progress ? progress->text.c_str() : "?", socket_path.c_str());
  // Where each thread runs: "thread TID NAME: cpus LIST, last on CPU N,
  // context switches V voluntary / I involuntary" (older processes have no
  // /uroce/threads: nothing printed).
  if (auto threads = Answer(*client, "/uroce/threads"); threads.ok()) {
    for (const JsonValue& t : threads->items) {
      char name[64] = "", cpus[256] = "";
      int tid = 0, last = -1;
      unsigned long long vol = 0, invol = 0;
      if (std::sscanf(t.text.c_str(), "%d %63s cpus=%255s last_cpu=%d voluntary=%llu involuntary=%llu", &tid, name,
                      cpus, &last, &vol, &invol) == 6) {
        std::printf("thread %d %s: cpus %s, last on CPU %d, context switches %llu voluntary / %llu involuntary\n", tid,
                    name, cpus, last, vol, invol);
      } else {
        std::printf("thread %s\n", t.text.c_str());
      }
    }
  }
  auto ports = Answer(*client, "/uroce/ports");
  if (!ports.ok()) return Fail(ports.status().message());
  for (const JsonValue& name : ports->items) {
    auto port = Answer(*client, "/uroce/port," + name.text);
    if (!port.ok()) return Fail(port.status().message());
    auto field = [&](const char* k) {
      const JsonValue* v = port->Get(k);
      return v ? v->text : std::string("?");
    };
    std::printf("endpoint %s: port %s (%s), mac %s, gids %s\n", name.text.c_str(), field("port_id").c_str(),
                field("driver").c_str(), field("mac").c_str(), field("gids").c_str());
    PrintCounters(*port, {"name", "port_id", "driver", "mac", "gids"});
  }
  auto qps = Answer(*client, "/uroce/qps");
  if (!qps.ok()) return Fail(qps.status().message());
  if (qps->items.empty()) std::printf("no QPs\n");
  for (const JsonValue& id : qps->items) {
    auto qp = Answer(*client, "/uroce/qp," + id.text);
    if (!qp.ok()) continue;  // destroyed since the list was read
    auto field = [&](const char* k) {
      const JsonValue* v = qp->Get(k);
      return v ? v->text : std::string("?");
    };
    std::printf("QP %s: %s %s, destination QP %s\n", id.text.c_str(), field("type").c_str(), field("state").c_str(),
                field("dest_qpn").c_str());
    PrintCounters(*qp, {"endpoint", "qpn", "type", "state", "dest_qpn"});
  }
  return 0;
}

}  // namespace uroce::tools
