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

// The steps of an acknowledgement-class packet through the completer (the
// way Linux rxe's completer is written: a state enum and a loop
// `step = RunStep(step, ...)` until kDone). ACKs and NAKs take the first
// branch, READ responses and atomic acknowledgements the second; both end in
// kDone, which a step that drops, fails or finishes the packet goes to.
enum class CompleterStep : uint8_t {
  kCheckPsn,  // inside what was sent and not yet acknowledged (9.7.5.2.2)
  // An ACK or NAK (its AETH).
  kCheckAck,     // the AETH syndrome chooses among the four below
  kAck,          // retire what it covers; a READ it passes lost its response
  kRnrNak,       // retire before it, wait the RNR timer, resend (9.7.5.2.8)
  kSequenceNak,  // resend from its PSN (9.7.5.2.4)
  kFatalNak,     // the oldest request fails and the QP enters error
  // A READ response (9.7.5.1.3) or an atomic acknowledgement.
  kRetireEarlier,    // it acknowledges every request before it
  kMatchRequest,     // it answers the oldest request, a READ or an atomic
  kAtomicWriteDone,  // an ATOMIC WRITE's zero-length READ response
  kAtomicResult,     // the original value into the result buffer
  kReadData,         // one MTU, scattered into the request's buffers (in order, or by PSN when selective)
  kComplete,         // the request is retired, the acknowledgement moves past it
  kDone,
};
// Its name, for logs and tests ("check_psn", ...).
const char* CompleterStepName(CompleterStep step);

class Completer {
 public:
  // `requester`: where a retransmission restarts (go-back-N).
  Completer(EngineCore& core, Completions& completions, Requester& requester)
      : core_(core), completions_(completions), requester_(requester) {}
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void HandleAcknowledge(QueuePair* qp, const PacketView& packet);
  void HandleResponse(QueuePair* qp, const PacketView& packet);
  // A CNP from the QP's peer (annex A17.9.3): its congestion control, if
  // it has one, slows down; counted either way.
  void HandleCongestionNotification(QueuePair* qp);
  // The local ACK timer of `qp`, against the poll's time.
  void RunTimers(QueuePair* qp);
  // ACKs as words in a local link (transport/link_ack.h), around a poll's
  // receive: the words of the QPs waiting for one are read first, with how
  // far the link's frames went then; a word is taken once the receive has
  // read that far (PeerMemory::LinkReadPast), so that it never passes a
  // READ or atomic response the responder sent before it (a word says
  // "executed through", and would declare the response lost).
  void SnapshotLinkAcks();
  void TakeLinkAcks();

 private:
  // One packet as every step sees it.
  struct Response {
    QueuePair* qp;
    const PacketView& p;
    RequesterState& r;  // qp->req
    Psn psn;
    bool acknowledge;  // an ACK or NAK, not a READ response or atomic acknowledgement
  };
  void Run(const Response& response);
  CompleterStep RunStep(CompleterStep step, const Response& response);
  CompleterStep CheckPsn(const Response& response);
  CompleterStep CheckAck(const Response& response);
  CompleterStep Ack(const Response& response);
  CompleterStep RnrNak(const Response& response);
  CompleterStep SequenceNak(const Response& response);
  CompleterStep FatalNak(const Response& response);
  CompleterStep RetireEarlier(const Response& response);
  CompleterStep MatchRequest(const Response& response);
  CompleterStep AtomicWriteDone(const Response& response);
  CompleterStep AtomicResult(const Response& response);
  CompleterStep ReadData(const Response& response);
  CompleterStep Complete(const Response& response);

  // A READ response that is a staged chunk (transport/pull_descriptor.h):
  // the run of the READ its PSNs stand for, copied out of the link's
  // payload area in one piece, in order or by PSN as packets would be.
  enum class StagedPlacement : uint8_t { kPlaced, kGone, kBadResponse, kLocalProtection };
  CompleterStep ReadStagedChunk(const Response& response, SendSlot& oldest, Psn expected, int32_t ahead);
  StagedPlacement PlaceStagedRead(QueuePair* qp, const SendSlot& slot, Psn psn, const PacketView& p, uint32_t* span);

  // Selective READ (docs/transport.md, "Selective retransmission").
  bool PlaceReadPacket(QueuePair* qp, const SendSlot& slot, Psn psn, const PacketView& p, bool fail_on_error);
  void AnchorReadAhead(RequesterState& r, Psn expected);
  void PlaceAhead(QueuePair* qp, Psn psn, const PacketView& p);
  void ConsumePlacedReads(QueuePair* qp);
  void RetireOldestAnswered(QueuePair* qp);
  void NoteExecuted(RequesterState& r, Psn psn);
  // The first PSN the oldest request still waits for.
  Psn OldestWaiting(const QueuePair* qp) const;

  bool RetireThrough(QueuePair* qp, Psn psn);
  // r.unacked moved forward by `acked_packets`: the retry budget, the gap
  // restart and the retransmission timer start again, and the congestion
  // control hears of it (with the round trip, when one was measured).
  void NoteProgress(QueuePair* qp, uint32_t acked_packets);
  // A retransmission is due (a NAK, the RTO, the application's timeout):
  // the congestion control hears of the loss.
  void SignalLoss(QueuePair* qp);
  void AcknowledgeThrough(QueuePair* qp, Psn psn);
  bool AckPsnValid(const QueuePair* qp, Psn psn) const;
  // Asks once for the oldest request from the first PSN it still waits for.
  void RestartOldest(QueuePair* qp);
  void RestartOnce(QueuePair* qp, Psn psn);
  // Selective retransmission: `psn` alone is to be resent.
  void RequestSelectiveResend(QueuePair* qp, Psn psn);
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
