// What a process does around its DPDK ports before and while it starts
// them, for the process runtime (runtime/runtime.h) and the host daemon
// alike: EAL started for a configuration, the buffers a port's MTU needs,
// and the af_packet ring geometry.
//
// Control path.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "pmd/eal.h"

namespace uroce::pmd {

// What StopEal's counterpart needs before rte_eal_init: removes a memif
// server's stale socket file (one nobody listens on, left by a process that
// died), then StartEal(eal) with its lcores fitted to the CPUs this process
// may use.
Status StartEalFor(const EalConfig& eal);

// The data room of a pool's buffers for ports of Ethernet MTU `mtu`.
uint16_t DataRoomFor(uint32_t mtu);
// For a net_af_packet port (`port`: its vdev string): its ring frames hold
// the largest frame `mtu` allows, or an error that says which port
// arguments to add.
Status CheckAfPacketFrameSize(const std::string& port, uint32_t mtu);

// The value of `key` in a vdev argument string ("net_memif0,role=server,..."),
// "" if it has none.
std::string VdevArg(const std::string& vdev, const std::string& key);

}  // namespace uroce::pmd
