// The states of one IB CM connection and the transitions between them
// (after IBTA vol. 1 12.9.6), as far as RC over RoCEv2 needs them: no
// LAP/APR, no SIDR, no MRA state of its own (an MRA only extends a wait).
//
// ConnectionManager (connection_manager.h) moves a connection only through
// this table: every change of state is one call that checks it, in builds
// with UROCE_DCHECKS (common/check.h).
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <cstdint>

namespace uroce::cm {

// kClosed is IBTA's Idle: a connection not started yet, refused, timed out
// or given up. The numbering is internal and never on the wire.
enum class CmState : uint8_t { kReqSent, kReqReceived, kRepSent, kEstablished, kDreqSent, kTimewait, kClosed };

// "REQ sent", "established", ...: for logs and failed checks.
const char* CmStateName(CmState state);

// Whether a connection may go from `from` to `to` (the table in cm_state.cc).
bool CmTransitionAllowed(CmState from, CmState to);

}  // namespace uroce::cm
