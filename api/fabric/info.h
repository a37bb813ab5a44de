// fi_getinfo(3) for uroce: one struct fi_info per uroce device (configuration
// endpoint) that satisfies the hints, FI_EP_MSG over RC QPs.
//
// fi_info lists go to libfabric, which frees them with its fi_freeinfo: every
// piece is malloc'ed (calloc/strdup) and nothing else hangs off them, as
// libfabric's own fi_freeinfo expects (it frees src/dest addresses, the attr
// structs, domain and fabric names and prov_name, and nothing more).
#pragma once

#include <rdma/fabric.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cm/socket_address.h"
#include "transport/headers.h"

namespace uroce::fabric {

// What getinfo knows of one uroce device.
struct DeviceAddresses {
  std::string domain_name;       // "uroce0": the verbs device name
  std::vector<transport::Gid> gids;  // IPv4-mapped and/or IPv6
  uint32_t mtu = 1500;
};

// The capabilities uroce's FI_EP_MSG endpoints have.
inline constexpr uint64_t kPrimaryCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV | FI_READ | FI_WRITE |
                                         FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr uint64_t kSecondaryCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
// MR modes uroce needs of the application: descriptors for local buffers
// (lkeys) and keys it chooses (rkeys). FI_MR_VIRT_ADDR and FI_MR_ALLOCATED
// are accepted but not required.
inline constexpr uint64_t kRequiredMrMode = FI_MR_LOCAL | FI_MR_PROV_KEY;
inline constexpr uint64_t kOptionalMrMode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
inline constexpr size_t kInjectSize = 256;  // transport::kMaxInlineData
inline constexpr size_t kIovLimit = 16;     // transport::kMaxSendSge
inline constexpr size_t kQueueSize = 1024;  // default tx/rx depth
inline constexpr size_t kMaxQueueSize = 16384;
inline constexpr uint64_t kMaxMsgSize = 1ull << 31;

// fi_getinfo for `devices`. Returns 0 with *info set, or -FI_ENODATA when
// nothing matches, or another -FI_E* for bad arguments.
int GetInfo(const std::vector<DeviceAddresses>& devices, uint32_t version, const char* node, const char* service,
            uint64_t flags, const fi_info* hints, fi_info** info);

// A deep copy that libfabric's fi_freeinfo can free; FreeInfo frees ours the
// same way (for objects that keep their own copy).
fi_info* DupInfo(const fi_info* info);
void FreeInfo(fi_info* info);

// Addresses: sockaddr_in / sockaddr_in6 <-> GID + port.
using cm::GidToSockaddr;
using cm::SockaddrLength;
using cm::SockaddrToGid;
// fi_getname / fi_getpeer (fi_cm(3)): copies `ss` to addr, *addrlen its
// length; -FI_ETOOSMALL (with the length needed) when it does not fit.
int CopySockaddr(const sockaddr_storage& ss, void* addr, size_t* addrlen);

}  // namespace uroce::fabric
