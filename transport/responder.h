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
#include "transport/headers.h"
#include "transport/impairment.h"
#include "transport/opcode.h"
#include "transport/packet_parser.h"
#include "transport/pull_descriptor.h"
#include "transport/queue_pair.h"
#include "transport/transmitter.h"

namespace uroce::transport {

// The steps of an RC or UC request packet through the responder, in order
// (the way Linux rxe's responder is written: a state enum and a loop
// `step = RunStep(step, ...)` until kDone). A step that ends the request
// (dropped, NAKed, a duplicate, a READ the responses acknowledge) goes to
// kDone.
enum class ResponderStep : uint8_t {
  kCheckPsn,         // new, duplicate or ahead (IBTA 9.7.5.1.1, 9.7.5.1.2)
  kCheckOpSequence,  // the opcode continues the message in progress (9.7.5.1.5)
  kCheckLength,      // payload length against the path MTU (9.7.5.1.3)
  kExecute,          // access checks, then data placed / READ queued / atomic done
  kAcknowledge,      // the next PSN, and an ACK if the requester asked
  kDone,
};
// Its name, for logs and tests ("check_psn", ...).
const char* ResponderStepName(ResponderStep step);

class Responder {
 public:
  Responder(EngineCore& core, Transmitter& tx, Completions& completions);
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // A request packet for `qp` (RC, UC or UD), parsed from `mbuf`. True when
  // the responder kept `mbuf` (held after a gap: selective retransmission);
  // false when the caller still owns it.
  bool HandleRequest(QueuePair* qp, const PacketView& packet, rte_mbuf* mbuf);
  // Sends queued READ responses and atomic acknowledgements of `qp`.
  void RunReadResponses(QueuePair* qp);
  // Sends the ACKs and NAKs the QPs on the ACK list wait to send.
  void SendPendingAcks();
  // `qp` is being destroyed: off the ACK list.
  void ForgetQp(QueuePair* qp);
  // The notification point (DCQCN; RoCEv2 annex A17.9.3): a data packet of
  // the QP's peer arrived marked CE. A CNP goes back to the peer's QP, at
  // most one per CongestionConfig::cnp_interval_ns.
  void NoteCongestionExperienced(QueuePair* qp);

 private:
  // One RC or UC request packet on its way through the steps.
  // One request packet as every step sees it; a step starts with
  // `const auto& [qp, p, s, rc, psn, info] = r;`.
  struct Request {
    QueuePair* qp;
    const PacketView& p;
    ResponderState& s;  // qp->resp
    bool rc;
    Psn psn;
    const OpcodeInfo& info;
  };
  // The steps, from kCheckPsn, for one RC/UC/XRC request.
  void RunRequest(QueuePair* qp, const PacketView& packet);
  void RunStagedChunk(QueuePair* qp, const PacketView& packet);
  // After a staged chunk's bytes were copied: still the chunk its
  // descriptor named (true, counted), or the QP fails (false). True for
  // every other request.
  bool StagedCopyIntact(QueuePair* qp, Psn psn);
  // The next run of a READ's response as one staged chunk
  // (transport/pull_descriptor.h), between linked processes: kNotStaged
  // when it goes as packets (too small, paced, no area, a key that does
  // not grant the whole chunk: the packets say why); kWait when the QP's
  // chunks are all out and the reader is taking them (the next poll looks
  // again), until its oldest has waited kStagedReadWaitNs: then packets.
  enum class StagedReadOutcome : uint8_t { kNotStaged, kSent, kNoRoom, kWait };
  // What a QP's READ responses may hold of a link's area (a quarter of
  // it), and for how long a chunk the requester has not taken is kept: a
  // reader slower than that finds it filled again and asks once more.
  static constexpr uint32_t kMaxStagedReadChunks = 8;
  static constexpr uint64_t kStagedReadHoldNs = 100'000'000;
  static constexpr uint64_t kStagedReadWaitNs = 1'000'000;
  StagedReadOutcome EmitStagedReadResponse(QueuePair* qp, ReadResponseJob& job);
  ResponderStep RunStep(ResponderStep step, const Request& r);
  // Selective retransmission: keeps the packet being handled in the QP's
  // window, `distance` PSNs after the expected one. False when it cannot.
  bool HoldAhead(QueuePair* qp, const PacketView& packet, uint32_t distance);
  // Handles, in order, the held packets the expected PSN has reached; NAKs
  // the next gap if packets after it are still held.
  void DrainHeld(QueuePair* qp);
  ResponderStep CheckPsn(const Request& r);
  ResponderStep CheckOpSequence(const Request& r);
  ResponderStep CheckLength(const Request& r);
  ResponderStep Execute(const Request& r);
  ResponderStep ExecuteSend(const Request& r);
  ResponderStep ExecuteWrite(const Request& r);
  ResponderStep ExecuteRead(const Request& r);
  ResponderStep ExecuteAtomic(const Request& r);
  ResponderStep ExecuteAtomicWrite(const Request& r);
  // A whole SEND or WRITE as a pull descriptor (transport/pull_descriptor.h).
  ResponderStep ExecutePull(const Request& r);
  ResponderStep Acknowledge(const Request& r);

  void HandleDuplicate(QueuePair* qp, const PacketView& packet);
  void HandleUdReceive(QueuePair* qp, const PacketView& packet);
  bool SelectXrcSrq(QueuePair* qp, const PacketView& packet);
  bool PlaceInRecv(QueuePair* qp, uint64_t offset, const uint8_t* data, uint32_t length, ibv_wc_status* error);
  bool EnqueueResponse(QueuePair* qp, ReadResponseJob job);
  void HandleDuplicateRead(QueuePair* qp, const PacketView& packet);
  bool RemoteReadAllowed(const QueuePair* qp, const RethFields& reth) const;
  bool PlaceWriteAhead(QueuePair* qp, const PacketView& p, uint32_t distance);
  void DropReadJobsCoveredBy(ResponderState& s, const ReadResponseJob& job);
  void ListForAck(QueuePair* qp);
  void QueueAck(QueuePair* qp, Psn psn);
  void QueueNak(QueuePair* qp, Psn psn, uint8_t syndrome);
  bool EmitAcknowledge(QueuePair* qp, Psn psn, uint8_t syndrome);
  bool AckInLink(QueuePair* qp, Psn psn);
  void SendNak(QueuePair* qp, Psn psn, NakCode code);
  void SendRnrNak(QueuePair* qp, Psn psn);
  void ResponderFatal(QueuePair* qp, Psn psn, NakCode code, ibv_wc_status recv_status);
  // The RNR storm (EngineConfig::rnr_storm): true when this RC request
  // that needs a receive is to find none (counted).
  bool RnrStorm();

  EngineCore& core_;
  Transmitter& tx_;
  Completions& completions_;
  FaultGenerator rnr_storm_;  // seeded from EngineConfig::rnr_storm_seed
  // QPs with an ACK or NAK to send (QueuePair::ack_listed).
  std::vector<QueuePair*> ack_list_;
  // The mbuf of the request HandleRequest is handling (null while held
  // packets are drained: those are not held again), and whether it was kept.
  rte_mbuf* holdable_ = nullptr;
  bool held_ = false;
  // The request being drained was placed on arrival (PlaceWriteAhead): its
  // view has no payload, and ExecuteWrite copies nothing.
  bool placed_ = false;
  // The PSNs the request just executed spans: 1, or a pull descriptor's
  // `packets`, or a staged chunk's (Acknowledge moves past all of them).
  uint32_t span_ = 1;
  // The staged chunk being handled (RunStagedChunk), and its link: checked
  // again once copied (StagedCopyIntact). Null for any other request.
  const StagedChunk* staged_ = nullptr;
  uint32_t staged_link_ = 0;
};

}  // namespace uroce::transport
