// The host daemon (`uroce daemon`, tools/daemon.cc): the host's uroce
// device, shared by every process, as the kernel's rxe is.
//
// The daemon owns the uplinks ([endpoint.NAME]: a DPDK port, or the kernel's
// own interface shared with the kernel, host/kernel_uplink.h) and a control
// socket ([daemon] socket, default /run/uroce/uroce.sock, mode 0660). A
// process that opens a uroce device with no configuration of its own
// attaches through the socket (host/daemon_protocol.h): the daemon leases it a
// slot (QPNs slot<<16 ..), makes a shared-memory port for it
// (host/shm_channel.h), and hands it the port and a configuration on it with
// the uplink's addresses and MAC. The process runs its own engine for its own
// QPs (its memory never leaves it); the daemon's FrameSwitch
// (host/frame_switch.h) moves frames between the uplink and the processes by
// destination QPN, and between processes on the host without touching the
// wire.
//
// Its reports (uplinks started, processes attached and released, messages
// refused, the stop line) go to the DaemonReport its owner gives, one line
// each: `uroce daemon` prints them on standard error, which is the
// program's choice, not the library's. Run returns once
// pmd::ShutdownRequested (SIGINT/SIGTERM);
// Stop closes the sessions, so every attached process moves its QPs to the
// error state (their work completes as flushed), then the ports close and
// the socket goes.
//
// Threads: one. The switch loop also serves the control socket between polls
// (a ppoll(2) that doubles as the idle sleep), so the switch needs no lock.
// Everything a process sends is untrusted (docs/security.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "host/host_config.h"
#include "pmd/impaired_port_io.h"

namespace uroce::host {

// One report line, without a newline; called on the daemon's thread.
using DaemonReport = std::function<void(const std::string& line)>;

class Daemon {
 public:
  // `config`: its [daemon] section; `uplinks`: one [endpoint.NAME] each;
  // `report`: where its report lines go (none if empty). `uplink_faults`
  // ([impair], `uroce daemon --impair`): faults and a bottleneck on every
  // uplink, where frames leave the host (tx) and where they enter it (rx),
  // each uplink drawing its own stream of the seed; STATS shows what they
  // did (an "impair" line per uplink), and so does the stop report.
  static std::unique_ptr<Daemon> Create(const DaemonConfig& config, const std::vector<EndpointPortConfig>& uplinks,
                                        DaemonReport report,
                                        std::optional<pmd::PortImpairment> uplink_faults = std::nullopt);
  virtual ~Daemon() = default;

  // The control socket, before EAL starts: a second daemon stops here.
  virtual Status Listen() = 0;
  // The uplinks' ports and switches; EAL runs by now.
  virtual Status StartUplinks() = 0;
  // Switches frames and serves the socket until a shutdown is requested.
  virtual void Run() = 0;
  // Closes the sessions, the ports and the socket; more calls do nothing.
  virtual void Stop() = 0;
};

}  // namespace uroce::host
