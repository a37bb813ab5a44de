#include "cm/cm_state.h"

#include <cstddef>

namespace uroce::cm {
namespace {

constexpr size_t kStates = static_cast<size_t>(CmState::kClosed) + 1;

struct StateRow {
  const char* name;
  // The states this one may move to, a bit per CmState.
  uint8_t next;
};

constexpr uint8_t Bit(CmState s) { return static_cast<uint8_t>(1u << static_cast<unsigned>(s)); }

// One row per state, in CmState's order.
constexpr StateRow kTable[kStates] = {
    // Active side, REQ out: a REP moves it on (the RTU goes out at once);
    // a REJ, a failed QP move, a timeout or the caller giving up ends it.
    {"REQ sent", Bit(CmState::kEstablished) | Bit(CmState::kClosed)},
    // Passive side, REQ in: the application accepts (REP) or rejects.
    {"REQ received", Bit(CmState::kRepSent) | Bit(CmState::kClosed)},
    // Passive side, REP out: the RTU establishes; a REJ or a timeout ends it;
    // a DREQ in or out, or the peer gone, means the active side was
    // established (its RTU was lost) and now releases.
    {"REP sent",
     Bit(CmState::kEstablished) | Bit(CmState::kDreqSent) | Bit(CmState::kTimewait) | Bit(CmState::kClosed)},
    // Released by a DREQ out (kDreqSent) or in, or the peer gone (kTimewait).
    {"established", Bit(CmState::kDreqSent) | Bit(CmState::kTimewait)},
    // The DREP, a DREQ crossing ours, the peer gone, or no answer.
    {"DREQ sent", Bit(CmState::kTimewait)},
    // The end of a released connection: it is forgotten, never moved on.
    {"time wait", 0},
    // A new connection starts here: out (REQ sent) or in (REQ received).
    {"closed", Bit(CmState::kReqSent) | Bit(CmState::kReqReceived)},
};

}  // namespace

const char* CmStateName(CmState state) {
  const auto i = static_cast<size_t>(state);
  return i < kStates ? kTable[i].name : "invalid";
}

bool CmTransitionAllowed(CmState from, CmState to) {
  const auto i = static_cast<size_t>(from);
  return i < kStates && static_cast<size_t>(to) < kStates && (kTable[i].next & Bit(to)) != 0;
}

}  // namespace uroce::cm
