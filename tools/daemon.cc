// `uroce daemon [--config FILE] [--set SECTION.KEY=VALUE] [--impair SPEC]`: the host's uroce
// device, shared by every process, as the kernel's rxe is. The daemon itself
// is host/daemon.h; this command reads its configuration, starts EAL between
// the control socket and the uplinks, and runs it until SIGINT/SIGTERM.
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "host/daemon.h"
#include "host/daemon_protocol.h"
#include "runtime/config.h"
#include "runtime/runtime.h"
#include "pmd/port_setup.h"
#include "pmd/shutdown_signal.h"
#include "tools/command.h"
#include "tools/config_flags.h"

namespace uroce::tools {

using runtime::DaemonConfig;

int DaemonUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce daemon --config FILE [--set SECTION.KEY=VALUE ...] [--impair SPEC]\n"
               "  the host's uroce devices, uroce0.. (one per [endpoint.NAME], the uplinks: a DPDK port, or\n"
               "  port = kernel:IFNAME to share the machine's NIC with the kernel), shared by every process\n"
               "  that opens a uroce device without a configuration of its own ([daemon] socket, default %s;\n"
               "  programs find it there or by UROCE_DAEMON). SIGINT/SIGTERM stop it.\n"
               "  --impair SPEC ([impair]): faults and a bottleneck on the uplinks, on frames leaving the\n"
               "  host (direction=tx) and entering it (rx).\n",
               DaemonConfig{}.socket.c_str());
  return out == stdout ? 0 : 2;
}

int DaemonCommand(int argc, char** argv) {
  ConfigFlags flags;
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (TakeConfigFlag(argc, argv, &i, &flags, &error)) {
      if (!error.empty()) {
        std::fprintf(stderr, "uroce daemon: %s\n", error.c_str());
        return 2;
      }
      continue;
    }
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      DaemonUsage(stderr);
      return 0;
    }
    std::fprintf(stderr, "uroce daemon: unknown argument '%s'\n", argv[i]);
    return DaemonUsage(stderr);
  }
  if (flags.file.empty()) {
    std::fprintf(stderr, "uroce daemon: give --config FILE (its [endpoint.NAME] sections are the uplinks)\n");
    return DaemonUsage(stderr);
  }
  auto config = LoadToolConfig(flags, "");
  if (!config.ok()) {
    std::fprintf(stderr, "uroce daemon: %s\n", config.status().ToString().c_str());
    return 2;
  }
  // [impair] sits on the uplinks: frames leaving the host and entering it.
  // An RNR storm is an engine's, and the daemon has none.
  if (config->impair.rnr_storm > 0) {
    std::fprintf(stderr, "uroce daemon: [impair] rnr_storm is for programs (uroce exec --impair rnr_storm=P): the "
                         "daemon runs no engine\n");
    return 2;
  }
  std::optional<pmd::PortImpairment> uplink_faults;
  if (config->impair.frame_faults()) uplink_faults = runtime::PortImpairmentFor(config->impair);
  if (config->endpoints.empty() || config->endpoints.size() > host::kMaxUplinks) {
    std::fprintf(stderr, "uroce daemon: the configuration needs 1 to %zu [endpoint.NAME] sections, the uplinks (%zu given)\n",
                 host::kMaxUplinks, config->endpoints.size());
    return 2;
  }
  for (const runtime::EndpointConfig& ec : config->endpoints) {
    if (ec.kind == runtime::PortKind::kRingPair || ec.kind == runtime::PortKind::kShm) {
      std::fprintf(stderr,
                   "uroce daemon: [endpoint.%s]: an uplink is a DPDK device (a vdev or a PCI NIC) or a kernel "
                   "interface (kernel:IFNAME)\n",
                   ec.name.c_str());
      return 2;
    }
  }
  pmd::InstallShutdownSignals();
  // The uplinks' part of their [endpoint.NAME] sections (host/host_config.h).
  const std::vector<host::EndpointPortConfig> uplinks(config->endpoints.begin(), config->endpoints.end());
  // The daemon's reports are this program's output to its operator.
  std::unique_ptr<host::Daemon> daemon = host::Daemon::Create(
      config->daemon, uplinks, [](const std::string& line) { std::fprintf(stderr, "uroce daemon: %s\n", line.c_str()); },
      uplink_faults);
  Status s = daemon->Listen();
  if (s.ok()) s = pmd::StartEalFor(config->eal);
  if (s.ok()) s = daemon->StartUplinks();
  if (!s.ok()) {
    std::fprintf(stderr, "uroce daemon: %s\n", s.message().c_str());
    daemon->Stop();
    pmd::RemoveEalRuntimeDir();
    return 1;
  }
  daemon->Run();
  daemon->Stop();
  // EAL is left to the process's end (its ports are the daemon's to close),
  // but not its runtime directory.
  pmd::RemoveEalRuntimeDir();
  return 0;
}

}  // namespace uroce::tools
