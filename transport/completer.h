// Completer (IBTA vol. 1, 9.7.5.2 "Requester side: acknowledgement
// processing"): ACKs, NAKs, READ responses and atomic acknowledgements for
// the requests the requester sent, and the local ACK timer. See completer.cc.
//
// Engine thread only.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/completions.h"
#include "transport/engine_core.h"
#include "transport/packet_parser.h"
#include "transport/queue_pair.h"
#include "transport/requester.h"

namespace uroce::transport {

class Completer {
 public:
  // `requester`: where a retransmission restarts (go-back-N).
  Completer(EngineCore& core, Completions& completions, Requester& requester)
      : core_(core), completions_(completions), requester_(requester) {}
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void HandleAcknowledge(QueuePair* qp, const PacketView& packet);
  void HandleResponse(QueuePair* qp, const PacketView& packet);
  // The local ACK timer of `qp`, against the poll's time.
  void RunTimers(QueuePair* qp);

 private:
  bool RetireThrough(QueuePair* qp, Psn psn);
  void AcknowledgeThrough(QueuePair* qp, Psn psn);
  bool AckPsnValid(const QueuePair* qp, Psn psn) const;
  void RestartOnce(QueuePair* qp, Psn psn);
  void FailOldest(QueuePair* qp, ibv_wc_status status);
  // Scatters READ response or atomic data into the request's buffers, each
  // chunk checked again for local write access; false on a failure.
  bool ScatterToWqe(const QueuePair* qp, const SendWqeView& wqe, uint64_t offset, const uint8_t* data,
                    uint32_t length) const;

  EngineCore& core_;
  Completions& completions_;
  Requester& requester_;
};

}  // namespace uroce::transport
