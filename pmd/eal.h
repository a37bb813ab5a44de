// DPDK start-up for uroce processes and tests (control path only).
//
// EAL can be initialised once per process. Tests and the demo run it without
// hugepages and without PCI (--no-huge --no-pci --no-shconf), each process
// with its own --file-prefix so that several can run side by side.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace uroce::pmd {

struct EalConfig {
  std::string program_name = "uroce";
  std::string lcores = "0";        // EAL --lcores: "0-1", or lcore@cpu maps.
  bool hugepages = false;          // false: --no-huge (anonymous memory).
  bool pci = false;                // false: --no-pci (virtual devices only).
  unsigned memory_mb = 256;        // -m: memory EAL reserves.
  std::string file_prefix;         // empty: UniqueFilePrefix().
  std::vector<std::string> vdevs;  // each becomes --vdev ARG.
  std::string log_level;           // --log-level, e.g. "*:warning"; empty: EAL's.
  std::vector<std::string> extra_args;  // passed to EAL as they are.
  // EAL's -d / --driver-path loads a shared object, i.e. runs its code in
  // this process. Refused in extra_args unless this is set (the
  // configuration's [eal] allow_driver_load).
  bool allow_driver_load = false;
};

// The first of `args` that makes EAL load a shared object (DPDK's -d LIB or
// --driver-path LIB), in any form getopt_long(3) takes: "-d X", "-dX",
// "-vdX" (after flags that take no argument), "--driver-path=X", or an
// abbreviation such as "--driver"; empty when there is none.
std::string FindDriverLoadArgument(const std::vector<std::string>& args);

// "uroce-<pid>-<random tag>-<n>": unique per process (even across PID
// namespaces, as in Bazel's sandbox) and per call.
std::string UniqueFilePrefix();

// The argv EAL gets for `config` (without resolving an empty file prefix).
std::vector<std::string> EalArguments(const EalConfig& config);

// Starts EAL. Fails with kFailedPrecondition if it already runs in this
// process, kInvalidArgument for a driver load not allowed (see above), and
// with the rte_errno text if EAL refuses.
Status StartEal(const EalConfig& config);

// The EAL lcores that `lcores` (EAL's -l / --lcores syntax: "0-1", "0,2",
// "1@(0-1)") names, sorted, each once; empty if the text is not understood.
std::vector<unsigned> ParseLcoreList(const std::string& lcores);

// Without hugepages, DPDK 22.11 backs all of EAL's memory (heap, pools,
// the lists that name them) with one memfd mapped MAP_SHARED ("nohuge"), so
// that vhost-user can map it. A fork(2) child then shares its parent's heap:
// what either allocates lands in the other's lists, and what a child
// allocates outlives it. This turns that mapping into private memory with
// the same contents, at the same address, so that a forked child gets a
// copy-on-write heap of its own (runtime/process.h,
// ForgetParentAfterFork). Only for a process with no vhost-user or
// virtio_user port (they hand the memfd to their peer): a process attached
// to a uroce daemon. Call it right after StartEal, before anything else
// allocates from EAL. Does nothing with hugepages (the files are mapped as
// they are). Control path.
Status MakeEalMemoryPrivate();

// True between a successful StartEal and StopEal.
bool EalRunning();

// The file prefix the running EAL uses.
const std::string& EalFilePrefix();

// Releases EAL's resources and removes its runtime directory. EAL cannot be
// started again in the same process afterwards (a DPDK limitation).
Status StopEal();

// Removes the runtime directory of the EAL that StartEal started
// (/var/run/dpdk/<prefix>, or $XDG_RUNTIME_DIR/dpdk/<prefix> for a user
// other than root), with the telemetry socket in it, and leaves EAL running.
// For a process that ends without StopEal (the verbs, rdma_cm and libfabric
// libraries at exit: other threads may still use EAL then). Does nothing if
// StartEal did not run. Control path.
void RemoveEalRuntimeDir();

}  // namespace uroce::pmd
