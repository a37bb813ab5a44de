// Responder (IBTA vol. 1, 9.7.5.1 "Responder side"): requests in (checked,
// placed, answered), READ responses and atomic acknowledgements out within
// the per-QP budget, and coalesced ACKs and NAKs. See responder.cc.
//
// Engine thread only (ForgetQp: the control path holding the progress token).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

#include "transport/completions.h"
#include "transport/engine_core.h"
#include "transport/frame_io.h"
#include "transport/headers.h"
#include "transport/packet_parser.h"
#include "transport/queue_pair.h"

namespace uroce::transport {

class Responder {
 public:
  Responder(EngineCore& core, FrameIo& frames, Completions& completions);
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // A request packet for `qp` (RC, UC or UD).
  void HandleRequest(QueuePair* qp, const PacketView& packet);
  // Sends queued READ responses and atomic acknowledgements of `qp`.
  void RunReadResponses(QueuePair* qp);
  // Sends the ACKs and NAKs the QPs on the ACK list wait to send.
  void SendPendingAcks();
  // `qp` is being destroyed: off the ACK list.
  void ForgetQp(QueuePair* qp);

 private:
  void HandleDuplicate(QueuePair* qp, const PacketView& packet);
  void HandleUdReceive(QueuePair* qp, const PacketView& packet);
  bool PlaceInRecv(QueuePair* qp, uint64_t offset, const uint8_t* data, uint32_t length, ibv_wc_status* error);
  bool EnqueueResponse(QueuePair* qp, const ReadResponseJob& job);
  void HandleDuplicateRead(QueuePair* qp, const PacketView& packet);
  bool RemoteReadAllowed(const QueuePair* qp, const RethFields& reth) const;
  void ListForAck(QueuePair* qp);
  void QueueAck(QueuePair* qp, Psn psn);
  void QueueNak(QueuePair* qp, Psn psn, uint8_t syndrome);
  bool EmitAcknowledge(QueuePair* qp, Psn psn, uint8_t syndrome);
  void SendNak(QueuePair* qp, Psn psn, NakCode code);
  void SendRnrNak(QueuePair* qp, Psn psn);
  void ResponderFatal(QueuePair* qp, Psn psn, NakCode code, ibv_wc_status recv_status);

  EngineCore& core_;
  FrameIo& frames_;
  Completions& completions_;
  // QPs with an ACK or NAK to send (QueuePair::ack_listed).
  std::vector<QueuePair*> ack_list_;
};

}  // namespace uroce::transport
