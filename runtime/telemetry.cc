#include "runtime/telemetry.h"

#include <rte_telemetry.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/config.h"
#include "pmd/threads.h"
#include "transport/address_text.h"
#include "transport/qp_state.h"

namespace uroce::runtime {

using transport::GidToString;
using pmd::ImpairedPortCounters;
using transport::MacToString;
using pmd::ReadThreadPlacements;
using pmd::ThreadPlacement;

namespace {

struct Published {
  std::vector<TelemetryEndpoint> endpoints;
  std::string progress;
};

std::mutex g_mutex;  // telemetry thread and control path; never the engine thread
std::map<int, Published> g_published;
int g_next_handle = 1;

const TelemetryEndpoint* FindEndpoint(const std::string& name) {
  for (const auto& [handle, p] : g_published) {
    for (const TelemetryEndpoint& e : p.endpoints) {
      if (e.name == name) return &e;
    }
  }
  return nullptr;
}

const char* QpTypeName(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    default: return "other";
  }
}

int Info(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_int(d, "pid", static_cast<int>(getpid()));
  size_t endpoints = 0;
  std::string progress;
  for (const auto& [h, p] : g_published) {
    endpoints += p.endpoints.size();
    progress = p.progress;
  }
  rte_tel_data_add_dict_u64(d, "endpoints", endpoints);
  rte_tel_data_add_dict_string(d, "progress", progress.c_str());
  return 0;
}

// Every thread of the process and where it runs (pmd/threads.h): one
// string per thread, "TID NAME cpus=LIST last_cpu=N voluntary=V
// involuntary=I". Not under g_mutex: it reads /proc only.
int Threads(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  for (const ThreadPlacement& t : ReadThreadPlacements()) {
    char line[RTE_TEL_MAX_STRING_LEN];
    std::snprintf(line, sizeof(line), "%d %s cpus=%s last_cpu=%d voluntary=%llu involuntary=%llu", t.tid,
                  t.name.c_str(), t.allowed_cpus.c_str(), t.last_cpu,
                  static_cast<unsigned long long>(t.voluntary_switches),
                  static_cast<unsigned long long>(t.involuntary_switches));
    if (rte_tel_data_add_array_string(d, line) != 0) break;  // the array is full
  }
  return 0;
}

int Ports(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  for (const auto& [h, p] : g_published) {
    for (const TelemetryEndpoint& e : p.endpoints) rte_tel_data_add_array_string(d, e.name.c_str());
  }
  return 0;
}

int Port(const char*, const char* params, rte_tel_data* d) {
  if (params == nullptr || *params == '\0') return -EINVAL;
  std::lock_guard<std::mutex> lock(g_mutex);
  const TelemetryEndpoint* e = FindEndpoint(params);
  if (e == nullptr) return -EINVAL;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_string(d, "name", e->name.c_str());
  rte_tel_data_add_dict_int(d, "port_id", e->port_id);
  rte_tel_data_add_dict_string(d, "driver", e->driver.c_str());
  rte_tel_data_add_dict_string(d, "mac", MacToString(e->mac).c_str());
  std::string gids;
  for (const auto& g : e->gids) gids += (gids.empty() ? "" : " ") + GidToString(g);
  rte_tel_data_add_dict_string(d, "gids", gids.c_str());
  const transport::EngineCounters c = e->engine->counters();
  const std::pair<const char*, uint64_t> counters[] = {
      {"rx_frames", c.rx_frames},
      {"tx_frames", c.tx_frames},
      {"rx_bytes", c.rx_bytes},
      {"tx_bytes", c.tx_bytes},
      {"retransmits", c.retransmits},
      {"timeouts", c.timeouts},
      {"rto_expiries", c.rto_expiries},
      {"tail_probes", c.tail_probes},
      {"held_packets", c.held_packets},
      {"placed_ahead", c.placed_ahead},
      {"selective_resends", c.selective_resends},
      {"reorder_full", c.reorder_full},
      {"naks_sent", c.naks_sent},
      {"naks_received", c.naks_received},
      {"rnr_naks_sent", c.rnr_naks_sent},
      {"rnr_naks_received", c.rnr_naks_received},
      {"out_of_sequence", c.out_of_sequence},
      {"duplicates", c.duplicates},
      {"rx_icrc_errors", c.rx_icrc_errors},
      {"rx_parse_errors", c.rx_parse_errors},
      {"rx_unknown_qp", c.rx_unknown_qp},
      {"rx_dropped", c.rx_dropped},
      {"rx_bad_xrc_srq", c.rx_bad_xrc_srq},
      {"rx_non_roce", c.rx_non_roce},
      {"tx_alloc_failures", c.tx_alloc_failures},
      {"tx_build_errors", c.tx_build_errors},
      {"tx_queue_full_polls", c.tx_queue_full_polls},
      {"tx_raw_frames", c.tx_raw_frames},
      {"rnr_storm_naks", c.rnr_storm_naks},
      {"cnps_sent", c.cnps_sent},
      {"cnps_received", c.cnps_received},
      {"cnps_ignored", c.cnps_ignored},
      {"rx_ce_marked", c.rx_ce_marked},
      {"paced_waits", c.paced_waits},
      {"pulls_sent", c.pulls_sent},
      {"pulls_received", c.pulls_received},
      {"pull_bytes", c.pull_bytes},
      {"pulls_refused", c.pulls_refused},
      {"pull_failures", c.pull_failures},
      {"staged_sent", c.staged_sent},
      {"staged_received", c.staged_received},
      {"staged_bytes", c.staged_bytes},
      {"staged_refused", c.staged_refused},
      {"staged_failures", c.staged_failures},
      {"stage_waits", c.stage_waits},
      {"link_acks_sent", c.link_acks_sent},
      {"link_acks_received", c.link_acks_received},
  };
  for (const auto& [name, value] : counters) rte_tel_data_add_dict_u64(d, name, value);
  if (e->impaired != nullptr) {
    const ImpairedPortCounters ic = e->impaired->counters();
    const std::pair<const char*, const transport::ImpairmentCounters*> sides[] = {{"tx", &ic.tx}, {"rx", &ic.rx}};
    for (const auto& [side, k] : sides) {
      const std::pair<const char*, uint64_t> fields[] = {
          {"frames", k->sent},         {"dropped", k->dropped},     {"duplicated", k->duplicated},
          {"reordered", k->reordered}, {"delayed", k->delayed},     {"corrupted", k->corrupted},
          {"overflowed", k->overflowed},
          {"queue_dropped", k->queue_dropped},
          {"ce_marked", k->ce_marked},
      };
      for (const auto& [field, value] : fields) {
        rte_tel_data_add_dict_u64(d, (std::string("impair_") + side + "_" + field).c_str(), value);
      }
    }
  }
  if (e->neighbors != nullptr) {
    const NeighborCounters n = e->neighbors->counters();
    const std::pair<const char*, uint64_t> nc[] = {
        {"arp_requests_received", n.arp_requests_received},
        {"arp_replies_sent", n.arp_replies_sent},
        {"arp_requests_sent", n.arp_requests_sent},
        {"arp_replies_received", n.arp_replies_received},
        {"nd_solicitations_received", n.nd_solicitations_received},
        {"nd_advertisements_sent", n.nd_advertisements_sent},
        {"nd_solicitations_sent", n.nd_solicitations_sent},
        {"nd_advertisements_received", n.nd_advertisements_received},
        {"neighbors_learned", n.learned},
        {"resolve_timeouts", n.resolve_timeouts},
    };
    for (const auto& [name, value] : nc) rte_tel_data_add_dict_u64(d, name, value);
  }
  return 0;
}

int Qps(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  for (const auto& [h, p] : g_published) {
    for (const TelemetryEndpoint& e : p.endpoints) {
      for (const transport::QpStats& s : e.engine->QpStatsSnapshot()) {
        rte_tel_data_add_array_string(d, (e.name + "/" + std::to_string(s.qpn)).c_str());
      }
    }
  }
  return 0;
}

int Qp(const char*, const char* params, rte_tel_data* d) {
  if (params == nullptr) return -EINVAL;
  const char* slash = std::strchr(params, '/');
  if (slash == nullptr) return -EINVAL;
  const std::string name(params, slash);
  char* end = nullptr;
  const unsigned long qpn = std::strtoul(slash + 1, &end, 0);
  if (end == slash + 1 || *end != '\0') return -EINVAL;
  std::lock_guard<std::mutex> lock(g_mutex);
  const TelemetryEndpoint* e = FindEndpoint(name);
  if (e == nullptr) return -EINVAL;
  for (const transport::QpStats& s : e->engine->QpStatsSnapshot()) {
    if (s.qpn != qpn) continue;
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "endpoint", e->name.c_str());
    rte_tel_data_add_dict_u64(d, "qpn", s.qpn);
    rte_tel_data_add_dict_string(d, "type", QpTypeName(s.type));
    rte_tel_data_add_dict_string(d, "state", transport::QpStateName(s.state));
    rte_tel_data_add_dict_u64(d, "dest_qpn", s.dest_qpn);
    if (transport::IsReliable(s.type)) {
      // How each half recovers loss with this peer (docs/transport.md).
      rte_tel_data_add_dict_string(d, "requester_recovery", s.requester_selective ? "selective" : "go-back-N");
      rte_tel_data_add_dict_string(d, "responder_recovery", s.responder_selective ? "selective" : "go-back-N");
      // Congestion control (docs/congestion.md): the algorithm, its rate
      // (0: not paced) and window (0: the QP's own) as they stand.
      rte_tel_data_add_dict_string(d, "congestion", s.congestion.c_str());
      rte_tel_data_add_dict_u64(d, "congestion_rate_mbps", s.congestion_rate_mbps);
      rte_tel_data_add_dict_u64(d, "congestion_window", s.congestion_window);
    }
    const transport::QpCounters& c = s.counters;
    const std::pair<const char*, uint64_t> counters[] = {
        {"tx_packets", c.tx_packets},       {"rx_packets", c.rx_packets},
        {"tx_bytes", c.tx_bytes},           {"rx_bytes", c.rx_bytes},
        {"retransmits", c.retransmits},     {"timeouts", c.timeouts},
        {"naks_sent", c.naks_sent},         {"naks_received", c.naks_received},
        {"rnr_naks_sent", c.rnr_naks_sent}, {"rnr_naks_received", c.rnr_naks_received},
        {"out_of_sequence", c.out_of_sequence}, {"duplicates", c.duplicates},
        {"rto_expiries", c.rto_expiries},   {"tail_probes", c.tail_probes},
        {"held_packets", c.held_packets},   {"placed_ahead", c.placed_ahead},
        {"selective_resends", c.selective_resends},
        {"cnps_sent", c.cnps_sent},         {"cnps_received", c.cnps_received},
        {"srtt_ns", s.srtt_ns},             {"rttvar_ns", s.rttvar_ns},
        {"rto_ns", s.rto_ns},
    };
    for (const auto& [n, v] : counters) rte_tel_data_add_dict_u64(d, n, v);
    return 0;
  }
  return -EINVAL;
}

}  // namespace

void RegisterTelemetryCommands() {
  static std::once_flag once;
  std::call_once(once, [] {
    rte_telemetry_register_cmd("/uroce/info", Info, "uroce process: pid, progress mode, endpoints. No parameters");
    rte_telemetry_register_cmd("/uroce/ports", Ports, "uroce endpoint names. No parameters");
    rte_telemetry_register_cmd("/uroce/threads", Threads,
                               "Every thread of the process: TID, name, allowed CPUs, last CPU, context switches. "
                               "No parameters");
    rte_telemetry_register_cmd("/uroce/port", Port,
                               "One uroce endpoint: port, addresses, engine and ARP/ND counters. Parameter: name");
    rte_telemetry_register_cmd("/uroce/qps", Qps, "Every uroce QP as NAME/QPN. No parameters");
    rte_telemetry_register_cmd("/uroce/qp", Qp, "One uroce QP: state and counters. Parameter: NAME/QPN");
  });
}

int PublishTelemetry(const std::vector<TelemetryEndpoint>& endpoints, const std::string& progress) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int handle = g_next_handle++;
  g_published[handle] = Published{endpoints, progress};
  return handle;
}

void UnpublishTelemetry(int handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_published.erase(handle);
}

}  // namespace uroce::runtime
