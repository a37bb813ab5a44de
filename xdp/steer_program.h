// uroce's XDP program (xdp/uroce_steer.bpf.c), compiled by Bazel with
// clang's BPF target and carried inside the binary, so the daemon needs no
// file at run time; and the layout of the maps the daemon fills and reads
// (they must match the program's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::xdp {

// The program's name as the kernel reports it (bpftool, `ip link`): the
// daemon recognizes a program a daemon that died left attached by it.
constexpr const char* kSteerProgramName = "uroce_steer";

// The ELF object (BTF included) that DPDK's af_xdp driver loads with libbpf.
std::string_view SteerProgramObject();

// The program's maps, by the names the kernel reports (at most 15
// characters: BPF_OBJ_NAME_LEN).
constexpr const char* kConfigMapName = "uroce_cfg";       // ARRAY[1] of SteerConfig
constexpr const char* kAddressesMapName = "uroce_addrs";  // HASH: 16-byte GID -> uint8_t
constexpr const char* kCountersMapName = "uroce_cnt";     // PERCPU_ARRAY[kSteerCounters] of uint64_t
constexpr const char* kSocketsMapName = "xsks_map";       // XSKMAP, DPDK's af_xdp driver fills it

// uroce_addrs' size (the program's MAX_ADDRESSES).
constexpr size_t kSteerAddresses = 64;

// uroce_cfg's only value. RoCE for a listed address is dropped while
// `enabled` is 0: the daemon sets it last, after the addresses and the MAC.
struct SteerConfig {
  uint8_t mac[6];
  uint8_t enabled;
};
static_assert(sizeof(SteerConfig) == 7, "the program's struct uroce_cfg is 7 bytes");

// uroce_cnt's indices (the program's CNT_* values).
enum SteerCounter : uint32_t {
  kSteered = 0,       // RoCE for the uplink, to its queue's AF_XDP socket
  kNotOurs = 1,       // RoCE for another address: passed to the kernel
  kNoSocket = 2,      // RoCE for the uplink on a queue with no socket: dropped
  kBadMac = 3,        // RoCE for the uplink's address to another MAC: dropped
  kUnconfigured = 4,  // RoCE for the uplink before it was enabled: dropped
  kSteerCounters = 5,
};

}  // namespace uroce::xdp
