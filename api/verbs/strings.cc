// Text and rate helpers: ibv_wc_status_str(3), ibv_node_type_str(3),
// ibv_port_state_str(3), ibv_event_type_str(3), ibv_rate_to_mult(3),
// mult_to_ibv_rate(3), ibv_rate_to_mbps(3), mbps_to_ibv_rate(3). The texts
// are rdma-core's, since programs print them and scripts match them.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "api/verbs/objects.h"

namespace {

struct RateRow {
  ibv_rate rate;
  int mult;  // of 2.5 Gb/s; -1 when not a multiple
  int mbps;
};

constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},    {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},    {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},   {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, -1, 14062},   {IBV_RATE_56_GBPS, -1, 56250},    {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750}, {IBV_RATE_25_GBPS, -1, 25781},    {IBV_RATE_100_GBPS, -1, 103125},
    {IBV_RATE_200_GBPS, -1, 206250}, {IBV_RATE_300_GBPS, -1, 309375},  {IBV_RATE_28_GBPS, -1, 28125},
    {IBV_RATE_50_GBPS, -1, 53125},   {IBV_RATE_400_GBPS, -1, 425000},  {IBV_RATE_600_GBPS, -1, 637500},
    {IBV_RATE_800_GBPS, -1, 850000}, {IBV_RATE_1200_GBPS, -1, 1275000},
};

}  // namespace

extern "C" {

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kText[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error", "TM error",
      "TM software rendezvous"};
  const auto i = static_cast<unsigned>(status);
  return i < sizeof(kText) / sizeof(kText[0]) ? kText[i] : "unknown";
}

const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kText[] = {"InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router",
                                      "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
  const int i = static_cast<int>(node_type) - 1;
  return i >= 0 && i < static_cast<int>(sizeof(kText) / sizeof(kText[0])) ? kText[i] : "unknown";
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kText[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
                                      "PORT_ACTIVE_DEFER"};
  const auto i = static_cast<unsigned>(port_state);
  return i < sizeof(kText) / sizeof(kText[0]) ? kText[i] : "invalid state";
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kText[] = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active", "port error",
      "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
      "last WQE reached", "client reregistration", "GID table change", "WQ fatal"};
  const auto i = static_cast<unsigned>(event);
  return i < sizeof(kText) / sizeof(kText[0]) ? kText[i] : "unknown";
}

int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates) {
    if (r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// The destination MAC of an address: uroce resolves neighbours itself (ARP,
// ND) when an AH or a connected QP is made; callers outside it get ENOSYS.
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) {
  errno = ENOSYS;
  return ENOSYS;
}

// Device memory is not offered.
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_dm(ibv_dm*) {}

}  // extern "C"
