// Reading another process's memory for a pull descriptor
// (transport/pull_descriptor.h): the engine's view of the local links that
// allow it (host/local_links.h implements it).
//
// Why: between two processes on one host, a large SEND or WRITE as packets
// copies its data four times (application, mbuf, link ring, mbuf,
// application) and builds, checksums and parses a packet per MTU. Read
// with cross-memory attach (process_vm_readv(2)), as libfabric's shm
// provider does for large messages, it is copied once, by the receiver,
// straight from the sender's buffer into the receiver's registered memory.
//
// Who may read whom: the implementation allows it only toward a process
// whose identity the daemon vouches for (its pid and uid from SO_PEERCRED,
// unix(7)), of our own uid, and that proved it can read ours too; so a peer
// that could stall us by naming memory whose faults it never resolves
// (userfaultfd, FUSE) is one that can already ptrace us.
//
// Threads: the engine thread, between bursts (the port's own thread rules,
// transport/packet_io.h). Each call is a table lookup, except Pull: one
// system call, made only for messages of EngineConfig::pull_min_bytes or
// more, which is the one exception to "no system call on the fast path"
// (docs/architecture.md, section 6.1). Staging copies with memcpy into
// memory both processes map: no system call.
#pragma once

#include <rte_mbuf.h>
#include <sys/uio.h>

#include <cstdint>

#include "transport/headers.h"

namespace uroce::transport {

// How a chunk is copied into a link's payload area (host/stream_copy.h):
// through our cache, or with streaming stores past it. Measured between
// two processes on the 2-core development VM (performance.md, "The local
// path"): streaming made a READ's answer twice as fast and WRITE streams
// faster, and SEND ping-pongs and streams slower; so READ answers stream
// and requests do not.
enum class StageCopy : uint8_t { kCached, kStreaming };

// A chunk staged in a link's payload area (transport/pull_descriptor.h,
// StagedChunk), as its sender holds it until the chunk is acknowledged.
struct StageTicket {
  uint32_t link = 0;      // the link's identity (opaque; 0: none)
  uint32_t chunk = 0;     // the area chunk
  uint64_t sequence = 0;  // what the chunk's sequence was made when filled
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  // Requester: whether the process owning `dest_qpn` at `dest_gid` takes
  // pull descriptors from us now, and the frame will reach it over the link
  // that allows it (a QPN alone does not say which host it is on).
  virtual bool TakesPulls(uint32_t dest_qpn, const Gid& dest_gid) = 0;
  // Responder: the process a received frame came from, when we may read its
  // memory (opaque, nonzero); 0 for any other frame.
  virtual uint32_t PullSource(const rte_mbuf* m) = 0;
  // Reads `remote` (addresses in the memory of `source`'s process) into
  // `local` (ours); true only when every byte of both arrived. Never
  // faults: bad addresses on either side only fail.
  virtual bool Pull(uint32_t source, const iovec* local, uint32_t local_count, const iovec* remote,
                    uint32_t remote_count) = 0;

  // Staged chunks: the link's shared payload area, which any linked
  // process may use (the daemon gave the file to the two alone). The
  // defaults: no area.
  //
  // Requester: copies `count` pieces of our memory, at most
  // kStagedChunkBytes in all, into a free chunk of the area toward the
  // process owning `dest_qpn` at `dest_gid`, when a frame to it goes over
  // that link. False (nothing copied) when there is no such area or no
  // chunk is free.
  virtual bool Stage(uint32_t /*dest_qpn*/, const Gid& /*dest_gid*/, const iovec* /*pieces*/, uint32_t /*count*/,
                     StageTicket* /*ticket*/, StageCopy /*copy*/) {
    return false;
  }
  // Requester: the chunk may be filled again (the responder is past its
  // first PSN, or its QP was reset or destroyed). A ticket of a link since
  // replaced is ignored.
  virtual void Unstage(const StageTicket& /*ticket*/) {}
  // Transmitter: a frame to `dest_qpn` at `dest_gid` goes over a local link
  // in its link form (transport/link_frame.h), which has no ICRC, so the
  // frame is built without one (kIcrcLeftOut). Per packet: a table lookup.
  virtual bool LinkFrameTo(uint32_t /*dest_qpn*/, const Gid& /*dest_gid*/) { return false; }
  // Acknowledgements as words in the link (transport/link_ack.h), on the
  // engine's thread, each a table lookup and one access to the shared file.
  // `peer_qpn` at `peer_gid` is the other process's QP; the entry is the
  // one of the requester's QPN `index_qpn`. Responder: stores `word` into
  // our area (WriteLinkAck) or reads what we stored there (ReadOwnLinkAck);
  // requester: reads the other process's area (ReadLinkAck), and with it
  // `*read_to`, how far the link's frames from that process went when the
  // word was read; LinkReadPast says once we have received all of those
  // (or the link is gone: nothing more will come).
  // False when the QP is not over a link that carries them: ACKs go as
  // packets.
  virtual bool WriteLinkAck(uint32_t /*peer_qpn*/, const Gid& /*peer_gid*/, uint32_t /*index_qpn*/,
                            uint64_t /*word*/) {
    return false;
  }
  virtual bool ReadOwnLinkAck(uint32_t /*peer_qpn*/, const Gid& /*peer_gid*/, uint32_t /*index_qpn*/,
                              uint64_t* /*word*/) {
    return false;
  }
  virtual bool ReadLinkAck(uint32_t /*peer_qpn*/, const Gid& /*peer_gid*/, uint32_t /*index_qpn*/,
                           uint64_t* /*word*/, uint64_t* /*read_to*/) {
    return false;
  }
  virtual bool LinkReadPast(uint32_t /*peer_qpn*/, const Gid& /*peer_gid*/, uint64_t /*read_to*/) { return false; }
  // Receiver: the frame came over a local link in its link form
  // (transport/link_frame.h, ParseLinkFrame), not as a wire frame. Only
  // the port can say so: the bytes alone cannot.
  virtual bool LinkFrame(const rte_mbuf* /*m*/) { return false; }
  // Responder: the link a received frame came by (opaque, nonzero), for a
  // staged chunk; 0 for a frame from anywhere else.
  virtual uint32_t LinkSource(const rte_mbuf* /*m*/) { return 0; }
  // Responder: where the chunk's `length` bytes are, while the sender's area
  // says that chunk holds `sequence`; null otherwise. Shared memory the
  // sender may write at any moment: copied once, and StagedIntact after.
  virtual const uint8_t* StagedData(uint32_t /*link*/, uint32_t /*chunk*/, uint64_t /*sequence*/,
                                    uint32_t /*length*/) {
    return nullptr;
  }
  // Responder, after copying: the chunk still holds `sequence` (it was not
  // refilled meanwhile, so what was copied is what was staged).
  virtual bool StagedIntact(uint32_t /*link*/, uint32_t /*chunk*/, uint64_t /*sequence*/) { return false; }

  // A chunk that no acknowledgement gives back: a READ response's data,
  // staged by the responder (transport/responder.h). The reader, done with
  // it (copied and found intact, or dropped), says so with TakeStaged; the
  // responder refills it once StageTaken says the reader did. The reader
  // is the other process: it may say so early (its own data is lost, which
  // its sequence check catches) or never (the responder keeps the chunk
  // until its QP lets go, and answers with packets meanwhile).
  virtual void TakeStaged(uint32_t /*link*/, uint32_t /*chunk*/, uint64_t /*sequence*/) {}
  virtual bool StageTaken(const StageTicket& /*ticket*/) { return false; }
};

}  // namespace uroce::transport
