// Requester (IBTA vol. 1, 9.5 and 9.7.4): turns send work requests into
// packets, and restarts from a PSN for go-back-N retransmission (the
// completer asks). See requester.cc.
//
// Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/completions.h"
#include "transport/engine_core.h"
#include "transport/engine_types.h"
#include "transport/queue_pair.h"
#include "transport/transmitter.h"

namespace uroce::transport {

class Requester {
 public:
  // `ahs`: the engine's address handle table (UD destinations), read only.
  Requester(EngineCore& core, Transmitter& tx, Completions& completions, const std::vector<AddressHandle>& ahs)
      : core_(core), tx_(tx), completions_(completions), ahs_(ahs) {}
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  // Takes newly posted requests of `qp` into its window and sends what the
  // window, the budget and the transmit stage allow.
  void Run(QueuePair* qp);
  // Go-back-N: resume sending at `psn`.
  void RestartFrom(QueuePair* qp, Psn psn);
  // The tail-loss probe: the last packet sent, once more, with AckReq (not
  // a READ or atomic request: see ResendPacket). False when none went out.
  bool ProbeTail(QueuePair* qp);
  // Whether the oldest unacknowledged PSN belongs to a READ or atomic, which
  // only a NAK or the application's timeout asks for again (a standard
  // responder's).
  bool OldestIsReadOrAtomic(const QueuePair* qp) const {
    const SendSlot* slot = SlotOf(qp, qp->req.unacked);
    return slot != nullptr && slot->read_or_atomic;
  }
  // The started request `psn` belongs to, or null.
  const SendSlot* SlotOf(const QueuePair* qp, Psn psn) const;

 private:
  // IBV_WR_BIND_MW / IBV_WR_LOCAL_INV at the head of the window (nothing
  // before it outstanding): carried out and retired. False: refused, the QP
  // entered ERR.
  bool RunLocalOperation(QueuePair* qp, const SendWqeHeader& w);
  bool StartSendWqe(QueuePair* qp, SendSlot& slot);
  bool EmitRequestPacket(QueuePair* qp, SendSlot& slot);
  // The whole message as one pull descriptor (transport/pull_descriptor.h),
  // when it may go as one: kNotPulled leaves it to the packets.
  enum class PullOutcome : uint8_t { kNotPulled, kSent, kNoRoom };
  PullOutcome EmitPullDescriptor(QueuePair* qp, SendSlot& slot);
  // The next run of packets of a SEND or WRITE as one staged chunk
  // (transport/pull_descriptor.h), from r.psn: one held already goes again
  // as it is, else a new one is filled. kNotStaged leaves it to a pull
  // descriptor or packets; kWait: no chunk is free while this QP holds some
  // (their acknowledgements free them), so the QP waits for the next poll.
  enum class StageOutcome : uint8_t { kNotStaged, kSent, kSentLast, kNoRoom, kWait };
  StageOutcome EmitStagedChunk(QueuePair* qp, SendSlot& slot);
  // `psn`, sent before and not acknowledged, once more with AckReq; sending
  // then resumes where it stood. A READ or atomic request only if
  // `read_or_atomic_too`. False when nothing went out.
  bool ResendPacket(QueuePair* qp, Psn psn, bool read_or_atomic_too);
  // Gathers `length` bytes at `offset` of the request's buffers. Every chunk
  // passes the local key check again (the region may have been deregistered
  // since the request started): false on a failure, nothing copied past it.
  bool CopyFromWqe(const QueuePair* qp, const SendWqeView& wqe, uint64_t offset, uint8_t* dest, uint32_t length) const;

  EngineCore& core_;
  Transmitter& tx_;
  Completions& completions_;
  const std::vector<AddressHandle>& ahs_;
  bool resending_ = false;
  bool stage_wait_ = false;  // EmitStagedChunk said kWait: Run stops this QP's burst  // EmitRequestPacket sends ResendPacket's packet: AckReq set
};

}  // namespace uroce::transport
