// The pull descriptor: a whole SEND or RDMA WRITE carried as the addresses of
// its data in the sender's memory, for the receiver to copy itself with one
// cross-memory read (process_vm_readv(2)), instead of as one packet per MTU.
//
// Only between two uroce processes on one host joined by a local link
// (host/local_links.h), which is where the receiver can read the sender's
// memory (transport/peer_memory.h says when). Never on a wire: a frame with
// the flag that did not come over such a link is counted and dropped.
//
// On the wire form it is an ordinary RoCEv2 request packet (so that the
// checks every request passes stay the same): the message's ONLY opcode
// (IBTA 9.4: SEND Only, SEND Only with Immediate / with Invalidate, RDMA
// WRITE Only, with Immediate), the message's first PSN, its RETH for a WRITE
// (the whole DMA length), AckReq set, and kBthPullDescriptor in the BTH's
// reserved bits (IBTA 9.2 leaves them 0; only uroce sets them, and only over
// a local link). Its payload is this descriptor instead of the data.
//
// The message keeps every PSN it would have had as packets: the descriptor
// says how many (`packets`), the responder takes the message whole and
// expects the PSN after them, and acknowledges the last. So a message can be
// resent either way (as packets after a link went away, or as a descriptor)
// and the PSN sequence of the connection is the same.
//
// Layout (little-endian, as both ends are processes of one host):
//   u32 packets      the PSNs the message spans (1 .. kMaxPullPackets)
//   u32 count        segments that follow (1 .. kMaxPullSegments)
//   u64 total        bytes in all (1 .. 2^31)
//   count x { u64 address; u64 length }   in the sender's address space
//
// The payload comes from another process: ParsePullDescriptor checks every
// field (counts, lengths that add up, no wrap-around) and refuses anything
// else. The addresses are the sender's own, and read only from the sender's
// process: what they name is the sender's business, never ours.
//
// The staged chunk (kBthStagedChunk): a run of a SEND's, WRITE's or READ
// response's packets whose data the sender copied into the link's shared payload area
// (host/shm_channel.h), for the receiver to copy out. Both processes copy,
// but each on its own core and chunk after chunk, so a large message moves
// at about the speed of one memcpy, where one process_vm_readv(2) of it is
// a single copy made by one core plus the kernel's page walk. It needs no
// permission beyond the link itself: the area is the link's file, which
// the daemon gave to exactly these two processes.
//
// It is a request packet like the pull descriptor, but for one part of a
// message: the opcode of that part (First, Middle, Last or Only: a chunk
// is what its packets would have been, taken together), the PSN of its
// first packet, the RETH when it starts a WRITE, AckReq set. It spans
// ceil(length / MTU) PSNs; every chunk but a message's last carries whole
// MTUs. A READ's answer goes the same way from the responder: a READ
// response (First, Middle, Last or Only, the AETH where those carry one)
// naming a chunk of the responder's area, which the requester marks taken
// in the area once handled (nothing acknowledges a response). Payload
// (little-endian):
//   u32 chunk        which of the sender's area chunks (0 .. kMaxStageChunks - 1)
//   u32 length       bytes in it (1 .. kStagedChunkBytes)
//   u64 sequence     the chunk's sequence when the sender filled it (even,
//                    nonzero): the receiver copies only while the area says
//                    the same, before and after (a sequence lock)
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::transport {

// A bit of the BTH's 7 reserved bits (PacketFields::bth.reserved7), beside
// kBthSelectiveRetransmission.
inline constexpr uint8_t kBthPullDescriptor = 0x02;
inline constexpr uint8_t kBthStagedChunk = 0x04;

inline constexpr uint32_t kMaxPullSegments = 16;           // = kMaxSendSge
inline constexpr uint32_t kMaxPullPackets = 1u << 22;      // half the PSN space
inline constexpr uint64_t kMaxPullBytes = 1ull << 31;      // IBTA's message size bound
inline constexpr size_t kPullDescriptorHeader = 16;
inline constexpr size_t kPullSegmentBytes = 16;

struct PullSegment {
  uint64_t address = 0;
  uint64_t length = 0;
};

struct PullDescriptor {
  uint32_t packets = 0;
  uint32_t count = 0;
  uint64_t total = 0;
  PullSegment segments[kMaxPullSegments];
};

inline constexpr size_t PullDescriptorBytes(uint32_t count) {
  return kPullDescriptorHeader + size_t{count} * kPullSegmentBytes;
}

inline constexpr uint32_t kStagedChunkBytes = 65536;  // a multiple of every path MTU
inline constexpr uint32_t kMaxStageChunks = 64;
inline constexpr size_t kStagedChunkDescriptorBytes = 16;

struct StagedChunk {
  uint32_t chunk = 0;
  uint32_t length = 0;
  uint64_t sequence = 0;
};

// Writes `c` into `out` (kStagedChunkDescriptorBytes); returns them.
size_t WriteStagedChunk(const StagedChunk& c, uint8_t* out);

// False for anything but one well-formed staged chunk descriptor.
bool ParseStagedChunk(const uint8_t* data, size_t length, StagedChunk* out);

// Writes `d` into `out` (PullDescriptorBytes(d.count) bytes); returns them.
size_t WritePullDescriptor(const PullDescriptor& d, uint8_t* out);

// False for anything that is not exactly one well-formed descriptor: a
// length that is not the segments', counts out of range, a segment of 0
// bytes or one whose address range wraps, lengths that do not add up.
bool ParsePullDescriptor(const uint8_t* data, size_t length, PullDescriptor* out);

}  // namespace uroce::transport
