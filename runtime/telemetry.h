// uroce's counters in DPDK telemetry, so that `dpdk-telemetry.py` and
// `uroce stats` read them from a running process (the socket is
// <runtime dir>/dpdk_telemetry.v2, e.g. /var/run/dpdk/<file-prefix>/).
// The commands follow ethdev's convention (a list, then one object by name):
//
//   /uroce/info              process: pid, progress mode, endpoints
//   /uroce/ports             endpoint names
//   /uroce/port,NAME         one endpoint: port, MAC, GIDs, engine counters
//                            (packets, bytes, retransmits, NAKs, RNR, ICRC and
//                            parse drops, out of sequence), ARP/ND counters, and
//                            with [impair] the injected faults (impair_tx_dropped,
//                            impair_rx_reordered, ..., rnr_storm_naks)
//   /uroce/qps               "NAME/QPN" of every QP
//   /uroce/qp,NAME/QPN       one QP: type, state, destination, counters
//   /uroce/threads           every thread of the process: TID, name, the
//                            CPUs it may run on, the CPU it last ran on,
//                            voluntary and involuntary context switches
//
// Telemetry runs its callbacks on its own control thread; they read the
// engines through their control path (Engine::counters, QpStatsSnapshot),
// which copies between two polls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pmd/impaired_port_io.h"
#include "runtime/neighbor_resolver.h"
#include "transport/engine.h"

namespace uroce::runtime {

struct TelemetryEndpoint {
  std::string name;
  uint16_t port_id = 0;
  std::string port;  // the configured port string
  std::string driver;
  transport::MacAddress mac{};
  std::vector<transport::Gid> gids;
  transport::Engine* engine = nullptr;
  const NeighborResolver* neighbors = nullptr;
  const pmd::ImpairedPortIo* impaired = nullptr;  // [impair] with frame faults, else null
};

// Registers the commands with rte_telemetry (after rte_eal_init; once per
// process, later calls do nothing).
void RegisterTelemetryCommands();

// Control path: makes `endpoints` visible to the commands until
// UnpublishTelemetry(handle). `progress` is "engine" or "inline".
int PublishTelemetry(const std::vector<TelemetryEndpoint>& endpoints, const std::string& progress);
void UnpublishTelemetry(int handle);

}  // namespace uroce::runtime
