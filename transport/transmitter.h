// The engine's frame layer: frames in (the port's receive bursts and our own
// loopback stage, parsed, checked and dispatched to the responder or the
// completer) and frames out (StartPacket/FinishPacket build a frame into an
// mbuf, the transmit stage holds it until FlushTx hands it to the port).
//
// Engine thread only, except QueueRawFrame (any thread).
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <vector>

#include "transport/engine_core.h"
#include "transport/mpmc_ring.h"
#include "transport/packet_builder.h"
#include "transport/packet_fields.h"
#include "transport/queue_pair.h"

namespace uroce::transport {

class Completer;
class Responder;

class FrameIo {
 public:
  // The stages a received frame goes to; they may be constructed after this
  // object (they are only used from Poll on).
  FrameIo(EngineCore& core, Responder& responder, Completer& completer);
  FrameIo(const FrameIo&) = delete;
  FrameIo& operator=(const FrameIo&) = delete;

  // Transmit staging: frames built this poll wait here until tx_burst takes
  // them; a full TX queue keeps them for the next poll.
  bool TxRoom(uint32_t frames) const { return tx_count_ + frames <= kTxStage; }
  bool LoopbackRoom() const { return loopback_count_ < kTxStage; }
  // Writes the headers of `fields` (addresses from `path`) into a new mbuf;
  // the caller copies fields.payload_length bytes to *payload, then calls
  // FinishPacket. Null when no buffer is free (the caller retries later).
  rte_mbuf* StartPacket(const PathInfo& path, PacketFields& fields, uint8_t** payload);
  void FinishPacket(rte_mbuf* m);
  // Instead of FinishPacket: the payload could not be had (an implicit
  // on-demand region's page); the buffer goes back, nothing is sent.
  void AbandonPacket(rte_mbuf* m);
  void Stage(rte_mbuf* m);
  void StageRawFrames();
  void FlushTx();
  // Takes the frames that loopback staged last poll into the receive path.
  void ReceiveLoopback();
  void ReceiveBurst();
  // Any thread: see Engine::QueueRawFrame.
  bool QueueRawFrame(rte_mbuf* m) { return raw_tx_.TryPush(m); }
  // Frees every frame still staged or queued (the engine's destruction).
  void FreeAll();

 private:
  // from_loopback: taken from our own loopback stage, not from the port.
  // True: the caller frees `m` (every frame but one a non-RoCE handler took).
  bool HandleFrame(rte_mbuf* m, bool from_loopback = false);

  // A transmit buffer: from the spares, refilled kTxSpares at a time with
  // one rte_pktmbuf_alloc_bulk (one at a time is ~9 % of a 64 B
  // message-rate profile). When the pool has fewer
  // than that left, one at a time, so a nearly empty pool still
  // gives what it has. Null when it has none.
  rte_mbuf* AllocTx();

  static constexpr uint32_t kTxStage = 512;
  static constexpr uint32_t kTxSpares = 32;
  static constexpr int kRxBurstsPerPoll = 4;

  EngineCore& core_;
  Responder& responder_;
  Completer& completer_;
  PendingPacket pending_tx_;  // between StartPacket and FinishPacket
  bool pending_loopback_ = false;
  rte_mbuf* tx_stage_[kTxStage];
  uint32_t tx_count_ = 0;
  // Frames to ourselves (PathInfo::loopback), received at the next poll.
  rte_mbuf* loopback_stage_[kTxStage];
  uint32_t loopback_count_ = 0;
  // Allocated, not yet used: owned by this object until AllocTx hands one
  // out; FreeAll returns them (the engine's destruction).
  rte_mbuf* tx_spares_[kTxSpares];
  uint32_t tx_spare_count_ = 0;
  std::vector<rte_mbuf*> rx_burst_;
  std::vector<rte_mbuf*> rx_done_;  // handled frames, freed in bulk
  MpmcRing<rte_mbuf*> raw_tx_{256};  // QueueRawFrame -> Poll
};

}  // namespace uroce::transport
