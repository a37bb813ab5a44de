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
// (docs/architecture.md, section 6.1).
#pragma once

#include <rte_mbuf.h>
#include <sys/uio.h>

#include <cstdint>

#include "transport/headers.h"

namespace uroce::transport {

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
};

}  // namespace uroce::transport
