// `uroce stats`: the counters of a running uroce process, read from its DPDK
// telemetry socket (the same data `dpdk-telemetry.py` shows under /uroce/).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "host/daemon_client.h"
#include "runtime/telemetry_client.h"
#include "tools/command.h"
#include "tools/config_flags.h"

namespace uroce::tools {

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

// ordered_json keeps an object's members in the order telemetry wrote them,
// which is the order the counters are printed in.
using Json = nlohmann::ordered_json;

StatusOr<Json> ParseJson(const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.what() says where the text stops being JSON (line and column).
    return InvalidArgument(std::string("bad JSON from telemetry: ") + e.what());
  }
}

// A value as `uroce stats` prints it: a string as it is, a number as JSON
// writes it (telemetry sends integers only, whose text this is), anything
// else as nothing.
std::string Text(const Json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_number()) return v.dump();
  return "";
}

// The member `key` of an object; nullptr for a missing key or a value that
// is not an object.
const Json* Member(const Json& v, const std::string& key) {
  if (!v.is_object()) return nullptr;
  const auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

// The elements of an array; none for anything else (iterating an object
// would visit its values).
const Json& Items(const Json& v) {
  static const Json kNone = Json::array();
  return v.is_array() ? v : kNone;
}

// The object or array under the answer's single key.
StatusOr<Json> Answer(runtime::TelemetryClient& client, const std::string& command) {
  auto raw = client.Query(command);
  if (!raw.ok()) return raw.status();
  auto json = ParseJson(*raw);
  if (!json.ok()) return Status(json.status().code(), command + ": " + json.status().message());
  const size_t comma = command.find(',');
  const Json* v = Member(*json, command.substr(0, comma));
  if (v == nullptr || v->is_null()) {
    return NotFound(command + ": no answer (not a uroce process, or it is shutting down)");
  }
  return *v;
}

void PrintCounters(const Json& object, const std::vector<std::string>& skip) {
  if (!object.is_object()) return;
  int column = 0;
  for (const auto& [key, value] : object.items()) {
    bool skipped = false;
    for (const std::string& s : skip) skipped |= key == s;
    if (skipped) continue;
    if (column == 0) std::printf("   ");
    std::printf(" %s=%s", key.c_str(), Text(value).c_str());
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
    for (const Json& p : Items(*ports)) commands.push_back("/uroce/port," + Text(p));
    auto qps = Answer(*client, "/uroce/qps");
    if (!qps.ok()) return Fail(qps.status().message());
    for (const Json& q : Items(*qps)) commands.push_back("/uroce/qp," + Text(q));
    for (const std::string& c : commands) {
      auto raw = client->Query(c);
      if (!raw.ok()) return Fail(raw.status().message());
      std::printf("%s\n", raw->c_str());
    }
    return 0;
  }

  auto info = Answer(*client, "/uroce/info");
  if (!info.ok()) return Fail(info.status().message());
  const Json* pid = Member(*info, "pid");
  const Json* progress = Member(*info, "progress");
  std::printf("uroce process %s (%s progress), telemetry %s\n", pid ? Text(*pid).c_str() : "?",
              progress ? Text(*progress).c_str() : "?", socket_path.c_str());
  // Where each thread runs: "thread TID NAME: cpus LIST, last on CPU N,
  // context switches V voluntary / I involuntary" (older processes have no
  // /uroce/threads: nothing printed).
  if (auto threads = Answer(*client, "/uroce/threads"); threads.ok()) {
    for (const Json& t : Items(*threads)) {
      const std::string line = Text(t);
      char name[64] = "", cpus[256] = "";
      int tid = 0, last = -1;
      unsigned long long vol = 0, invol = 0;
      if (std::sscanf(line.c_str(),
                      "%d %63s cpus=%255s last_cpu=%d voluntary=%llu involuntary=%llu", &tid, name,
                      cpus, &last, &vol, &invol) == 6) {
        std::printf("thread %d %s: cpus %s, last on CPU %d, context switches %llu voluntary / %llu involuntary\n", tid,
                    name, cpus, last, vol, invol);
      } else {
        std::printf("thread %s\n", line.c_str());
      }
    }
  }
  auto ports = Answer(*client, "/uroce/ports");
  if (!ports.ok()) return Fail(ports.status().message());
  for (const Json& item : Items(*ports)) {
    const std::string name = Text(item);
    auto port = Answer(*client, "/uroce/port," + name);
    if (!port.ok()) return Fail(port.status().message());
    auto field = [&](const char* k) {
      const Json* v = Member(*port, k);
      return v ? Text(*v) : std::string("?");
    };
    std::printf("endpoint %s: port %s (%s), mac %s, gids %s\n", name.c_str(),
                field("port_id").c_str(), field("driver").c_str(), field("mac").c_str(),
                field("gids").c_str());
    PrintCounters(*port, {"name", "port_id", "driver", "mac", "gids"});
  }
  auto qps = Answer(*client, "/uroce/qps");
  if (!qps.ok()) return Fail(qps.status().message());
  if (Items(*qps).empty()) std::printf("no QPs\n");
  for (const Json& item : Items(*qps)) {
    const std::string id = Text(item);
    auto qp = Answer(*client, "/uroce/qp," + id);
    if (!qp.ok()) continue;  // destroyed since the list was read
    auto field = [&](const char* k) {
      const Json* v = Member(*qp, k);
      return v ? Text(*v) : std::string("?");
    };
    std::printf("QP %s: %s %s, destination QP %s\n", id.c_str(), field("type").c_str(),
                field("state").c_str(), field("dest_qpn").c_str());
    PrintCounters(*qp, {"endpoint", "qpn", "type", "state", "dest_qpn"});
  }
  return 0;
}

}  // namespace uroce::tools
