// uroce's one logging path: DPDK's rte_log (rte_log(3) in DPDK's API
// reference), under uroce's own log types, named as DPDK's own are. EAL's
// --log-level option (the configuration's `[eal] log_level`) selects them,
// for example 'uroce.*:debug' or 'uroce.api:error'. Each type starts at
// NOTICE unless such an option picked another level.
//
// Where the messages go is rte_log's choice: standard error before EAL has
// started, and after that EAL's log stream (standard error, with a copy to
// syslog). Libraries log here, never with fprintf, at ERR for what a user
// must see under the shipped configurations' `log_level = *:error`. The
// exceptions: the two stub libraries that carry no DPDK
// (api/fabric/loader.cc, api/rdmacm/librdmacm.cc), which only say that
// uroce's libibverbs.so.1 is missing; a failed UROCE_DCHECK
// (common/check.h), which must print before EAL starts and then aborts; and
// `uroce daemon`'s report lines, which the library hands to its program
// (host/daemon.h DaemonReport) as that program's output.
#pragma once

#include <rte_log.h>

namespace uroce::pmd {

// Which part of uroce speaks. Its log type is "uroce." and the part's name.
enum class LogSource {
  kPmd,      // "uroce.pmd": ports, EAL, lcores
  kHost,     // "uroce.host": a process's side of the host daemon
  kRuntime,  // "uroce.runtime": a process's devices, start and shutdown
  kApi,      // "uroce.api": why an rdma_cm or libfabric call failed
};

// The rte_log type of `source`, registered at its first use (any thread).
int LogType(LogSource source);

}  // namespace uroce::pmd

// UROCE_LOG(WARNING, kRuntime, "format\n", ...): one message at an rte_log
// level (EMERG ... DEBUG), prefixed "uroce: " as every uroce message is.
#define UROCE_LOG(level, source, ...) \
  rte_log(RTE_LOG_##level, ::uroce::pmd::LogType(::uroce::pmd::LogSource::source), "uroce: " __VA_ARGS__)
