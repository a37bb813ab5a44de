// The engine's receive side: frames in (the port's receive bursts and the
// transmitter's loopback stage), parsed, checked and dispatched to the
// responder (requests) or the completer (acknowledgements and responses).
// It sits above the stages it dispatches to; only the engine (engine.h)
// holds one.
//
// Engine thread only.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <vector>

#include "transport/completer.h"
#include "transport/engine_core.h"
#include "transport/responder.h"
#include "transport/transmitter.h"

namespace uroce::transport {

class Receiver {
 public:
  Receiver(EngineCore& core, Transmitter& tx, Responder& responder, Completer& completer);
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // Takes the frames that loopback staged last poll into the receive path.
  void ReceiveLoopback();
  void ReceiveBurst();

 private:
  // from_loopback: taken from our own loopback stage, not from the port.
  // True: the caller frees `m` (every frame but one a non-RoCE handler took).
  bool HandleFrame(rte_mbuf* m, bool from_loopback = false);

  static constexpr int kRxBurstsPerPoll = 4;

  EngineCore& core_;
  Transmitter& tx_;
  Responder& responder_;
  Completer& completer_;
  std::vector<rte_mbuf*> rx_burst_;
  std::vector<rte_mbuf*> rx_done_;  // handled frames, freed in bulk
};

}  // namespace uroce::transport
