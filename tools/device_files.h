// The files by which programs find an RDMA device besides libibverbs: the
// character device /dev/infiniband/uverbsN and the sysfs tree
// /sys/class/infiniband/<dev> (ports/1/gids, gid_attrs/types and ndevs,
// device/numa_node, device/local_cpus, device/net) and
// /sys/class/infiniband_verbs/uverbsN. A kernel RDMA driver makes them;
// uroce has no kernel driver, and UCX ignores a device without them (it
// requires the character device, and without gid_attrs/types takes every GID
// for RoCE v1), rdma-core's rdma_cm tests look for device/net.
//
// `uroce exec` presents them to the program it runs, without changing the
// host: in a mount namespace of its own (unshare(2) CLONE_NEWNS, all mounts
// private), an overlay (overlayfs) over /sys/class and one over /dev add the
// files from a tmpfs; /dev's own mounts (pts, shm, mqueue, hugepages) are put
// back on top. The namespace is the program's (exec keeps it) and ends with
// it; nothing is left on the host. Costs: root (CAP_SYS_ADMIN) and a kernel
// with overlayfs; a program in the namespace does not see mounts made on the
// host after it started; a write through /sys/class or to a new file in /dev
// lands in the overlay's tmpfs, not in sysfs or on the host (programs do not
// write there; DPDK's sysfs writes go through /sys/bus).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "transport/headers.h"

namespace uroce::tools {

// One uroce device as libibverbs lists it (api/verbs/registry.cc names them
// uroce<index> with dev_name uverbs<index>).
struct PresentedDevice {
  unsigned index = 0;
  std::vector<transport::Gid> gids;  // the port's GID table, in order
  // The kernel interface that holds one of the device's addresses, if any
  // (gid_attrs/ndevs, device/net); empty for virtual ports (net_ring, memif).
  std::string netdev;
};

// The devices of a uroce configuration, with their kernel interfaces.
StatusOr<std::vector<PresentedDevice>> DevicesOfConfig(const std::string& config_path);
// The devices of the running daemon at `socket_path` (its DEVICES answer,
// host/daemon_client.h), which a program without a configuration attaches to.
StatusOr<std::vector<PresentedDevice>> DevicesOfDaemon(const std::string& socket_path);
// The DEVICES answer's text as devices (split out for tests); kIoError for
// text that is not one.
StatusOr<std::vector<PresentedDevice>> ParseDaemonDevices(const std::string& text);

// The files' contents, as path (relative to /sys/class or /dev) -> text;
// split out so that tests check them without root.
struct DeviceTree {
  std::vector<std::pair<std::string, std::string>> sys_files;  // relative to /sys/class
  std::vector<std::string> sys_dirs;                           // created even when empty
  std::vector<std::pair<std::string, unsigned>> char_devices;  // relative to /dev: name, minor (major 231)
};
DeviceTree BuildDeviceTree(const std::vector<PresentedDevice>& devices, unsigned cpus);

// Makes this process's mount namespace private and presents `devices` in it
// (see above). Any failure leaves /dev and /sys/class as they were.
Status PresentDeviceFiles(const std::vector<PresentedDevice>& devices);

}  // namespace uroce::tools
