// The engine's transmit side: StartPacket/FinishPacket build a frame into an
// mbuf, the transmit stage holds it until FlushTx hands it to the port, and
// frames to ourselves wait in the loopback stage for the receiver
// (receiver.h) at the next poll. The requester and the responder build their
// frames here; nothing here knows who receives them, so the stages that
// build frames sit above this class and the receiver above them.
//
// Engine thread only, except QueueRawFrame (any thread).
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

#include "common/ring.h"
#include "transport/engine_core.h"
#include "transport/packet_builder.h"
#include "transport/packet_fields.h"
#include "transport/queue_pair.h"

namespace uroce::transport {

class Transmitter {
 public:
  // Frames either stage holds at most.
  static constexpr uint32_t kTxStage = 512;

  explicit Transmitter(EngineCore& core) : core_(core) {}
  Transmitter(const Transmitter&) = delete;
  Transmitter& operator=(const Transmitter&) = delete;

  // Transmit staging: frames built this poll wait here until tx_burst takes
  // them; a full TX queue keeps them for the next poll.
  // A poll stages at most kTxStage frames, even when it hands some to the
  // port early (kFlushBytes): one poll's work stays bounded however many
  // QPs have something to send.
  bool TxRoom(uint32_t frames) const {
    return tx_count_ + frames <= kTxStage && staged_this_poll_ + frames <= kTxStage;
  }
  // The engine's poll begins (Engine::Poll).
  void BeginPoll() {
    staged_this_poll_ = 0;
    port_full_this_poll_ = false;
  }
  bool LoopbackRoom() const { return loopback_count_ < kTxStage; }
  // Writes the headers of `fields` (addresses from `path`) into a new mbuf;
  // the caller copies fields.payload_length bytes to *payload, then calls
  // FinishPacket. Null when no buffer is free (the caller retries later).
  rte_mbuf* StartPacket(const PathInfo& path, PacketFields& fields, uint8_t** payload);
  void FinishPacket(rte_mbuf* m);
  // Instead of FinishPacket: the payload could not be had (an implicit
  // on-demand region's page); the buffer goes back, nothing is sent.
  void AbandonPacket(rte_mbuf* m);
  // Into the transmit stage; once kFlushBytes are staged, FlushTx.
  void Stage(rte_mbuf* m);
  void StageRawFrames();
  void FlushTx();
  // No frame waits in the transmit stage (all went to the port).
  bool StageEmpty() const { return tx_count_ == 0; }
  // Any thread: see Engine::QueueRawFrame.
  bool QueueRawFrame(rte_mbuf* m) { return raw_tx_.TryPush(m); }

  // For the receiver: the frames the loopback stage holds now (*frames, the
  // count returned). They keep their places, and count against
  // LoopbackRoom, until ReleaseLoopback; frames staged to ourselves while
  // the receiver handles them go behind them and wait for the next poll.
  uint32_t LoopbackFrames(rte_mbuf* const** frames) const {
    *frames = loopback_stage_;
    return loopback_count_;
  }
  // The receiver is done with the first `n` frames LoopbackFrames gave it
  // (it freed or passed on each); the stage keeps the rest, in order.
  void ReleaseLoopback(uint32_t n);

  // Frees every frame still staged or queued (the engine's destruction).
  void FreeAll();

 private:
  // A transmit buffer: from the spares, refilled kTxSpares at a time with
  // one rte_pktmbuf_alloc_bulk (one at a time is ~9 % of a 64 B
  // message-rate profile). When the pool has fewer
  // than that left, one at a time, so a nearly empty pool still
  // gives what it has. Null when it has none.
  rte_mbuf* AllocTx();

  static constexpr uint32_t kTxSpares = 32;
  // Large frames leave in bursts of about this many bytes, not at the end of
  // the poll: a QP may build 32 MTU-sized packets in one poll (a copy and an
  // ICRC each), and the peer would wait for the last of them before it got
  // the first. Sent early, the first ones are on their way, and the peer
  // busy, while the rest are built. Small frames still go in one burst per
  // poll. On a memif pair this keeps a 1 MiB WRITE's receiver fed: its
  // goodput at 1 % loss went from about 80 % of the lossless figure to
  // about 90 % (docs/performance.md, "Loss").
  static constexpr uint32_t kFlushBytes = 16384;
  uint32_t staged_bytes_ = 0;  // staged since the last FlushTx
  uint32_t staged_this_poll_ = 0;
  bool port_full_this_poll_ = false;  // TxBurst took fewer than offered this poll

  EngineCore& core_;
  PendingPacket pending_tx_;  // between StartPacket and FinishPacket
  // Header templates (packet_builder.h), direct-mapped by the address of
  // the path a packet is built for (a QP's, an address handle's): a QP that
  // sends again copies its network headers instead of writing each field.
  // A template is checked against the packet's fields before use, so a
  // collision or a changed path only costs a remake.
  static constexpr size_t kHeaderTemplates = 64;
  HeaderTemplate header_templates_[kHeaderTemplates];
  bool pending_loopback_ = false;
  bool pending_without_icrc_ = false;  // goes over a local link in link form (PeerMemory::LinkFrameTo)
  rte_mbuf* tx_stage_[kTxStage];
  uint32_t tx_count_ = 0;
  // Frames to ourselves (PathInfo::loopback), received at the next poll.
  rte_mbuf* loopback_stage_[kTxStage];
  uint32_t loopback_count_ = 0;
  // Allocated, not yet used: owned by this object until AllocTx hands one
  // out; FreeAll returns them (the engine's destruction).
  rte_mbuf* tx_spares_[kTxSpares];
  uint32_t tx_spare_count_ = 0;
  MpmcRing<rte_mbuf*> raw_tx_{256};  // QueueRawFrame -> Poll
};

}  // namespace uroce::transport
