// A process's port to `uroce daemon`: two rings of frames in one shared
// memory file (memfd_create(2), sealed against resizing), one ring each way.
// The daemon creates the file, maps it, and hands the descriptor to the
// process over its control session (SCM_RIGHTS); each side copies frames in
// and out of its own mbufs, as memif's copy mode does.
//
// Why not memif: DPDK 22.11's memif handles its control channel on EAL's
// interrupt thread. In a daemon that hot-plugs a port per process, a process
// that exits mid-traffic had the interrupt thread unmap the port's rings
// while the switch was reading them (SIGSEGV), and two processes attaching
// at once broke memif's socket bookkeeping (a double free, then a PANIC in
// eal-intr-thread). Here the daemon's one thread does everything: the
// mapping stays until the daemon releases the session itself, whether the
// process exited, crashed or was killed.
//
// Trust: the other side may write anything into the shared memory at any
// moment. A reader takes the peer's index once per burst, refuses one that
// claims more than the ring holds, reads each slot's length once and checks
// it, and copies the frame into its own mbuf before anyone parses it; the
// geometry comes from the creator's own copy, never from the shared header
// (the process checks the header against the file's size when it maps it).
//
// Each ring has one producer and one consumer, each index written by its
// side only (release stores, acquire loads): no lock, no system call. The
// rings are not common/ring.h's: those trust their own positions, which
// threads of one process share, while here every index and length read from
// the shared memory is checked first.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "transport/packet_io.h"

namespace uroce::host {

struct ShmChannelCounters {
  uint64_t rx_frames = 0, tx_frames = 0;
  uint64_t rx_bad_length = 0;   // a slot whose length the reader refused
  uint64_t rx_bad_index = 0;    // the peer's index claimed more than the ring holds
  uint64_t rx_no_mbuf = 0;      // frames left in the ring: the pool was empty
  uint64_t tx_too_long = 0;     // frames longer than a slot, dropped
  uint64_t rx_link_frames = 0, tx_link_frames = 0;  // of the frames, in link form (SendLinkFrames)
};

// Receive sets a frame's mbuf hash.usr to this when it came in its link form
// (transport/link_frame.h), to 0 otherwise.
inline constexpr uint32_t kLinkFrameMark = 1u << 31;

// Frames each way so far, as the shared indices say (the creator's view of
// a file both ends can write: for display, never trusted). They wrap at 2^32.
struct ShmChannelTraffic {
  uint32_t to_process = 0, from_process = 0;
};

// A local link's payload area each way (host/local_links.h): 32 chunks of
// 64 KiB, 2 MiB. A QP's window (EngineConfig::max_unacked_packets, 128
// packets of up to 4 KiB) holds at most 8 chunks, so four QPs stream at once
// before one waits; memory a process never stages into is never touched.
inline constexpr uint32_t kLinkStageChunks = 32;

// A local link's acknowledgement area each way (transport/link_ack.h): a
// word per requester QP, indexed by its QPN's low bits; 32 KiB.
inline constexpr uint32_t kLinkAckEntries = 4096;
inline constexpr uint32_t kMaxAckEntries = 65536;

class ShmChannel {
 public:
  enum class Side { kDaemon, kProcess };

  // The daemon's side: a new file with `slots` (a power of two, 2..65536)
  // slots of room for frames of up to `max_frame` bytes, each way, and, for
  // a local link, a payload area of `stage_chunks` chunks
  // (transport::kStagedChunkBytes each, at most kMaxStageChunks) each way.
  // And, for a local link, an acknowledgement area of `ack_entries` words
  // (0, or a power of two up to kMaxAckEntries) each way.
  static StatusOr<std::unique_ptr<ShmChannel>> Create(uint32_t slots, uint32_t max_frame,
                                                      uint32_t stage_chunks = 0, uint32_t ack_entries = 0);
  // A process's side, from the descriptor the daemon sent (not taken over:
  // the caller closes it). kInvalidArgument for a file that is not one.
  // A local link between two processes (host/local_links.h) is mapped by
  // one as kDaemon (it sends on the "to process" ring) and by the other as
  // kProcess.
  static StatusOr<std::unique_ptr<ShmChannel>> Map(int fd, Side side = Side::kProcess);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // The daemon's side: the file, to hand to the process.
  int fd() const { return fd_; }
  Side side() const { return side_; }
  uint32_t slots() const { return slots_; }
  uint32_t max_frame() const { return max_frame_; }

  // Fast path, one thread per side. Receive: up to n frames the other side
  // sent, each copied into a new mbuf from `pool`. Send: copies up to n
  // frames into the ring and frees those mbufs; returns how many it took
  // (a full ring takes fewer; a frame longer than a slot is dropped and
  // counted, and counts as taken).
  uint16_t Receive(rte_mbuf** pkts, uint16_t n, rte_mempool* pool);
  uint16_t Send(rte_mbuf** pkts, uint16_t n);
  // A local link between two processes: as Send, but a connected service's
  // RoCEv2 frame is written in its link form (transport/link_frame.h), no
  // Ethernet, IP, UDP or ICRC; other frames as they are. Receive takes
  // frames in that form (and marks them, kLinkFrameMark) only once
  // TakeLinkFrames was called (control path, before the first Receive);
  // elsewhere such a slot is refused as a bad length.
  uint16_t SendLinkFrames(rte_mbuf** pkts, uint16_t n);
  void TakeLinkFrames() { link_frames_ = true; }
  // One frame's bytes as they are, in the form said: what the other
  // process can write into a slot (tests and fuzz targets play a hostile
  // one with it). False when the ring is full or the length is not one a
  // slot holds.
  bool SendBytes(const uint8_t* frame, uint32_t length, bool link_form);

  const ShmChannelCounters& counters() const { return counters_; }
  // The sending side's thread: everything we sent has been taken by the
  // other side (one shared load).
  bool SendDrained() const;

  // A local link whose process on the other end ended: the daemon marks it
  // (any thread), the survivor reads it (closed(), a relaxed load of a
  // shared line that changes once).
  void MarkClosed();
  bool closed() const;
  ShmChannelTraffic Traffic() const;

  // Cross-memory attach between a local link's two processes
  // (host/local_links.h, transport/peer_memory.h), control path.
  // OfferPullProbe publishes where a random cookie of ours is, so that the
  // other process can check it reads our memory (its pid is the daemon's
  // word, the cookie proves that pid is us in its pid namespace);
  // PeerPullProbe reads the other side's offer (false: none yet; what it
  // says is the other process's word). SetReadsPeer tells the other side
  // that we read its memory; PeerReadsUs is what it told us (its word).
  void OfferPullProbe();
  bool PeerPullProbe(uint64_t* address, uint64_t* cookie) const;
  void SetReadsPeer();
  bool PeerReadsUs() const;

  // A local link's payload areas (transport/pull_descriptor.h, staged
  // chunks), fast path. The sending side fills chunk `chunk` of its area
  // between BeginStage (returns where) and EndStage (returns the sequence
  // the descriptor names); chunk < stage_chunks(), and the caller holds
  // it (LocalLinks decides which chunks are free). The receiving side:
  // StagedData is where the other side's chunk is, null unless it holds
  // `sequence` now (and the chunk and length are in range); StagedIntact,
  // after copying, that it still does.
  //
  // A chunk nothing acknowledges (a READ response's data, which the
  // responder staged) is given back through its line's second word: the
  // receiving side, done with it, writes MarkTaken with the sequence it
  // read; the sending side refills the chunk once Taken says so. The
  // word is the other process's to write: a lie only frees the liar's own
  // data early, which its next sequence check catches. Holds: our chunk
  // still holds the fill `sequence` named (ours to know, not the shared
  // word); TookLastFill: the reader marked the chunk's latest fill taken.
  uint32_t stage_chunks() const { return stage_chunks_; }
  uint8_t* BeginStage(uint32_t chunk);
  uint64_t EndStage(uint32_t chunk);
  const uint8_t* StagedData(uint32_t chunk, uint64_t sequence, uint32_t length) const;
  bool StagedIntact(uint32_t chunk, uint64_t sequence) const;
  void MarkTaken(uint32_t chunk, uint64_t sequence) const;  // writes the shared word only
  bool Taken(uint32_t chunk, uint64_t sequence) const;
  bool Holds(uint32_t chunk, uint64_t sequence) const {
    return chunk < stage_chunks_ && stage_sequence_[chunk] == sequence;
  }
  bool TookLastFill(uint32_t chunk) const { return chunk < stage_chunks_ && Taken(chunk, stage_sequence_[chunk]); }

  // A local link's acknowledgement areas (transport/link_ack.h), fast path:
  // each side writes words into its own area only (StoreOwnAck, a release
  // store) and reads the other's (LoadPeerAck, an acquire load), which that
  // process may write at any moment: the reader checks every word. An
  // index is taken modulo ack_entries(); 0 entries: none (do not call).
  uint32_t ack_entries() const { return ack_entries_; }
  uint64_t LoadPeerAck(uint32_t index) const;
  // Receive's side: the other side's producer index now (an acquire load),
  // and how far we have read; an index is "read" once consumed() passed it.
  uint32_t PeerProduced() const;
  uint32_t consumed() const { return consumed_; }
  uint64_t LoadOwnAck(uint32_t index) const;
  void StoreOwnAck(uint32_t index, uint64_t word);

  // The file's size for this geometry (the process checks it).
  static size_t FileSize(uint32_t slots, uint32_t slot_size, uint32_t stage_chunks = 0, uint32_t ack_entries = 0);

 private:
  ShmChannel() = default;
  uint16_t SendFrames(rte_mbuf** pkts, uint16_t n, bool link_form);
  struct Ring;
  Ring* ring(bool to_process) const;
  struct Header;
  Header* header() const;
  uint8_t* StageArea(bool to_process) const;
  uint64_t* StageSequence(bool to_process, uint32_t chunk) const;
  uint8_t* StageChunk(bool to_process, uint32_t chunk) const;
  uint64_t* AckArea(bool to_process) const;

  Side side_ = Side::kDaemon;
  int fd_ = -1;
  void* base_ = nullptr;
  size_t size_ = 0;
  uint32_t slots_ = 0, slot_size_ = 0, max_frame_ = 0, stage_chunks_ = 0, ack_entries_ = 0;
  std::vector<uint64_t> stage_sequence_;  // our area's chunks' sequences (ours, not the shared words)
  // Our own copies of our side's indices: the shared ones are only told.
  uint32_t produced_ = 0, consumed_ = 0;
  // What the peer had consumed of our outgoing ring when last read: Send
  // reads the shared index again only when this leaves too little room, so
  // that a send does not fetch the line the receiver writes at every receive.
  uint32_t peer_consumed_ = 0;
  bool link_frames_ = false;  // Receive takes the link form
  ShmChannelCounters counters_;
  // What the other process of a local link reads to check it reads us.
  uint64_t pull_cookie_ = 0;
};

// A ShmChannel as a port (the engine's wire in the process, a switch port in
// the daemon). Receive buffers come from `pool`.
class ShmPortIo final : public transport::PacketIo {
 public:
  ShmPortIo(ShmChannel* channel, rte_mempool* pool) : channel_(channel), pool_(pool) {}
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override { return channel_->Receive(pkts, n, pool_); }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override { return channel_->Send(pkts, n); }

 private:
  ShmChannel* channel_;
  rte_mempool* pool_;
};

}  // namespace uroce::host
