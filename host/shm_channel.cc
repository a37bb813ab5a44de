#include "host/shm_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_cycles.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "transport/link_frame.h"
#include "transport/pull_descriptor.h"

namespace uroce::host {
namespace {

constexpr uint64_t kMagic = 0x4d485345434f5255ull;  // "UROCESHM", little-endian
constexpr uint32_t kVersion = 4;  // 4: slots in link form (transport/link_frame.h), acknowledgement areas
constexpr size_t kLine = 64;
constexpr size_t kHeader = 2 * kLine;  // the geometry, then the pull offers
constexpr size_t kSlotHeader = 4;  // the frame's length
// In the length word: the frame is in its link form (transport/link_frame.h).
constexpr uint32_t kLinkFormBit = 1u << 31;

uint32_t SlotSizeFor(uint32_t max_frame) {
  return static_cast<uint32_t>((kSlotHeader + max_frame + kLine - 1) / kLine * kLine);
}

bool PowerOfTwo(uint32_t n) { return n >= 2 && (n & (n - 1)) == 0; }

uint32_t LoadAcquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreRelease(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

}  // namespace

struct ShmChannel::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_size;
  uint32_t max_frame;
  // Set by the daemon when one of a local link's two processes ended
  // (MarkClosed): the other stops sending into it. Advice only: a process
  // that writes it harms only its own link.
  uint32_t closed;
  // Chunks of each side's payload area (0: none).
  uint32_t stage_chunks;
  // Entries of each side's acknowledgement area (0: none).
  uint32_t ack_entries;
  uint8_t unused[kLine - 36];
  // A local link's two processes, each on its side's entry (kDaemon's
  // first): where in its memory a cookie is and what it holds, so that
  // the other can check it reads that process (LocalLinks::VerifyPulls), and
  // whether it found it can read the other's. Each side writes only its own
  // entry; what the other side's says is checked, never trusted.
  struct PullOffer {
    uint64_t cookie_address;
    uint64_t cookie;
    uint32_t reads_peer;
    uint32_t unused;
  } offers[2];
};

// One ring: the producer's index, the consumer's (each on its own cache
// line), then the slots.
struct ShmChannel::Ring {
  uint32_t* produced() { return reinterpret_cast<uint32_t*>(this); }
  uint32_t* consumed() { return reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(this) + kLine); }
  uint8_t* slot(uint32_t index, uint32_t slots, uint32_t slot_size) {
    return reinterpret_cast<uint8_t*>(this) + 2 * kLine + static_cast<size_t>(index & (slots - 1)) * slot_size;
  }
};

// A payload area: each chunk's sequence on a line of its own, then the chunks.
size_t StageAreaBytes(uint32_t stage_chunks) {
  return static_cast<size_t>(stage_chunks) * (kLine + transport::kStagedChunkBytes);
}

size_t ShmChannel::FileSize(uint32_t slots, uint32_t slot_size, uint32_t stage_chunks, uint32_t ack_entries) {
  return kHeader + 2 * (2 * kLine + static_cast<size_t>(slots) * slot_size) + 2 * StageAreaBytes(stage_chunks) +
         2 * static_cast<size_t>(ack_entries) * sizeof(uint64_t);
}

uint64_t* ShmChannel::AckArea(bool to_process) const {
  const size_t rings = 2 * (2 * kLine + static_cast<size_t>(slots_) * slot_size_);
  uint8_t* area = static_cast<uint8_t*>(base_) + kHeader + rings + 2 * StageAreaBytes(stage_chunks_);
  return reinterpret_cast<uint64_t*>(area) + (to_process ? 0 : ack_entries_);
}

uint64_t ShmChannel::LoadPeerAck(uint32_t index) const {
  return __atomic_load_n(AckArea(side_ != Side::kDaemon) + (index & (ack_entries_ - 1)), __ATOMIC_ACQUIRE);
}

uint32_t ShmChannel::PeerProduced() const { return LoadAcquire(ring(side_ == Side::kProcess)->produced()); }

uint64_t ShmChannel::LoadOwnAck(uint32_t index) const {
  return __atomic_load_n(AckArea(side_ == Side::kDaemon) + (index & (ack_entries_ - 1)), __ATOMIC_RELAXED);
}

void ShmChannel::StoreOwnAck(uint32_t index, uint64_t word) {
  __atomic_store_n(AckArea(side_ == Side::kDaemon) + (index & (ack_entries_ - 1)), word, __ATOMIC_RELEASE);
}

uint8_t* ShmChannel::StageArea(bool to_process) const {
  const size_t rings = 2 * (2 * kLine + static_cast<size_t>(slots_) * slot_size_);
  return static_cast<uint8_t*>(base_) + kHeader + rings + (to_process ? 0 : StageAreaBytes(stage_chunks_));
}

ShmChannel::Ring* ShmChannel::ring(bool to_process) const {
  const size_t ring_bytes = 2 * kLine + static_cast<size_t>(slots_) * slot_size_;
  return reinterpret_cast<Ring*>(static_cast<uint8_t*>(base_) + kHeader + (to_process ? 0 : ring_bytes));
}

StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(uint32_t slots, uint32_t max_frame, uint32_t stage_chunks,
                                                        uint32_t ack_entries) {
  if (!PowerOfTwo(slots) || slots > 65536) return InvalidArgument("shm channel: slots must be a power of two, 2..65536");
  if (max_frame < 64 || max_frame > 16384) return InvalidArgument("shm channel: frames of 64..16384 bytes");
  if (stage_chunks > transport::kMaxStageChunks) return InvalidArgument("shm channel: too many payload chunks");
  if (ack_entries != 0 && (!PowerOfTwo(ack_entries) || ack_entries > kMaxAckEntries)) {
    return InvalidArgument("shm channel: acknowledgement entries must be 0 or a power of two up to 65536");
  }
  std::unique_ptr<ShmChannel> c(new ShmChannel());
  c->side_ = Side::kDaemon;
  c->slots_ = slots;
  c->max_frame_ = max_frame;
  c->slot_size_ = SlotSizeFor(max_frame);
  c->stage_chunks_ = stage_chunks;
  c->ack_entries_ = ack_entries;
  c->stage_sequence_.assign(stage_chunks, 0);
  c->size_ = FileSize(slots, c->slot_size_, stage_chunks, ack_entries);
  c->fd_ = memfd_create("uroce-port", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (c->fd_ < 0) return IoError(std::string("memfd_create: ") + std::strerror(errno));
  // Sealed at its size: a process that truncated the file would make the
  // daemon's next read of it a SIGBUS.
  if (ftruncate(c->fd_, static_cast<off_t>(c->size_)) != 0 ||
      fcntl(c->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return IoError(std::string("sizing the shared port: ") + std::strerror(errno));
  }
  c->base_ = mmap(nullptr, c->size_, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd_, 0);
  if (c->base_ == MAP_FAILED) {
    c->base_ = nullptr;
    return IoError(std::string("mmap of the shared port: ") + std::strerror(errno));
  }
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.slots = slots;
  h.slot_size = c->slot_size_;
  h.max_frame = max_frame;
  h.stage_chunks = stage_chunks;
  h.ack_entries = ack_entries;
  std::memcpy(c->base_, &h, sizeof(h));
  return c;
}

StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Map(int fd, Side side) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return InvalidArgument("shm channel: not a file");
  // Only a sealed file cannot shrink under us (SIGBUS).
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    return InvalidArgument("shm channel: the file is not sealed against resizing");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeader) return InvalidArgument("shm channel: file too small");
  Header h;
  if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) return InvalidArgument("shm channel: no header");
  if (h.magic != kMagic || h.version != kVersion) return InvalidArgument("shm channel: not a uroce port (version?)");
  if (!PowerOfTwo(h.slots) || h.slots > 65536 || h.max_frame < 64 || h.max_frame > 16384 ||
      h.slot_size != SlotSizeFor(h.max_frame) || h.stage_chunks > transport::kMaxStageChunks ||
      (h.ack_entries != 0 && (!PowerOfTwo(h.ack_entries) || h.ack_entries > kMaxAckEntries)) ||
      FileSize(h.slots, h.slot_size, h.stage_chunks, h.ack_entries) != size) {
    return InvalidArgument("shm channel: inconsistent geometry");
  }
  std::unique_ptr<ShmChannel> c(new ShmChannel());
  c->side_ = side;
  c->slots_ = h.slots;
  c->slot_size_ = h.slot_size;
  c->max_frame_ = h.max_frame;
  c->stage_chunks_ = h.stage_chunks;
  c->ack_entries_ = h.ack_entries;
  c->stage_sequence_.assign(h.stage_chunks, 0);
  c->size_ = size;
  c->base_ = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (c->base_ == MAP_FAILED) {
    c->base_ = nullptr;
    return IoError(std::string("mmap of the shared port: ") + std::strerror(errno));
  }
  // A forked child attaches on its own (runtime/process.h,
  // ForgetParentAfterFork); its parent's rings are not to be in it at all,
  // so that nothing in the child can consume or corrupt them (madvise(2)).
  (void)madvise(c->base_, size, MADV_DONTFORK);
  // Pick up where the indices are (a fresh file: 0).
  c->consumed_ = LoadAcquire(c->ring(side == Side::kProcess)->consumed());
  c->produced_ = LoadAcquire(c->ring(side != Side::kProcess)->produced());
  c->peer_consumed_ = LoadAcquire(c->ring(side != Side::kProcess)->consumed());
  return c;
}

ShmChannel::Header* ShmChannel::header() const {
  static_assert(sizeof(Header) <= kHeader, "header fits its lines");
  static_assert(offsetof(Header, offers) == kLine, "the offers on a line of their own");
  return static_cast<Header*>(base_);
}

void ShmChannel::MarkClosed() { __atomic_store_n(&header()->closed, 1u, __ATOMIC_RELEASE); }

bool ShmChannel::closed() const { return __atomic_load_n(&header()->closed, __ATOMIC_RELAXED) != 0; }

void ShmChannel::OfferPullProbe() {
  uint64_t cookie = 0;
  if (getrandom(&cookie, sizeof(cookie), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(cookie))) {
    cookie = rte_rdtsc() ^ reinterpret_cast<uintptr_t>(this);
  }
  pull_cookie_ = cookie | 1;  // never 0: 0 is "no offer yet"
  Header::PullOffer* own = &header()->offers[side_ == Side::kDaemon ? 0 : 1];
  __atomic_store_n(&own->cookie_address, reinterpret_cast<uint64_t>(&pull_cookie_), __ATOMIC_RELAXED);
  __atomic_store_n(&own->cookie, pull_cookie_, __ATOMIC_RELEASE);
}

bool ShmChannel::PeerPullProbe(uint64_t* address, uint64_t* cookie) const {
  const Header::PullOffer* peer = &header()->offers[side_ == Side::kDaemon ? 1 : 0];
  *cookie = __atomic_load_n(&peer->cookie, __ATOMIC_ACQUIRE);
  *address = __atomic_load_n(&peer->cookie_address, __ATOMIC_RELAXED);
  return *cookie != 0;
}

void ShmChannel::SetReadsPeer() {
  __atomic_store_n(&header()->offers[side_ == Side::kDaemon ? 0 : 1].reads_peer, 1u, __ATOMIC_RELEASE);
}

bool ShmChannel::PeerReadsUs() const {
  return __atomic_load_n(&header()->offers[side_ == Side::kDaemon ? 1 : 0].reads_peer, __ATOMIC_RELAXED) == 1;
}

// The payload areas: a sequence lock per chunk (with read-modify-writes
// where the usual form has fences: H.-J. Boehm, "Can seqlocks get along
// with programming language memory models?", MSPC 2012). The sender makes
// the chunk's sequence odd, fills it, and makes it even again (release);
// the descriptor names the even value. The reader checks it before copying
// (acquire) and again after: equal both times, the chunk was not refilled
// while it was copied. The sender keeps its own count: the shared word is
// only told (the other side could write it).

uint64_t* ShmChannel::StageSequence(bool to_process, uint32_t chunk) const {
  return reinterpret_cast<uint64_t*>(StageArea(to_process) + static_cast<size_t>(chunk) * kLine);
}

uint8_t* ShmChannel::StageChunk(bool to_process, uint32_t chunk) const {
  return StageArea(to_process) + static_cast<size_t>(stage_chunks_) * kLine +
         static_cast<size_t>(chunk) * transport::kStagedChunkBytes;
}

uint8_t* ShmChannel::BeginStage(uint32_t chunk) {
  const bool outgoing = side_ == Side::kDaemon;
  uint64_t& sequence = stage_sequence_[chunk];
  ++sequence;  // odd: being filled
  // An exchange, acquire and release: no write of the new contents moves
  // before it (a fence would do, but ThreadSanitizer does not take fences).
  __atomic_exchange_n(StageSequence(outgoing, chunk), sequence, __ATOMIC_ACQ_REL);
  return StageChunk(outgoing, chunk);
}

uint64_t ShmChannel::EndStage(uint32_t chunk) {
  uint64_t& sequence = stage_sequence_[chunk];
  ++sequence;  // even: filled
  __atomic_store_n(StageSequence(side_ == Side::kDaemon, chunk), sequence, __ATOMIC_RELEASE);
  return sequence;
}

const uint8_t* ShmChannel::StagedData(uint32_t chunk, uint64_t sequence, uint32_t length) const {
  const bool incoming = side_ == Side::kProcess;
  if (chunk >= stage_chunks_ || length == 0 || length > transport::kStagedChunkBytes || (sequence & 1) != 0 ||
      __atomic_load_n(StageSequence(incoming, chunk), __ATOMIC_ACQUIRE) != sequence) {
    return nullptr;
  }
  return StageChunk(incoming, chunk);
}

bool ShmChannel::StagedIntact(uint32_t chunk, uint64_t sequence) const {
  if (chunk >= stage_chunks_) return false;
  // Adding 0, with release: every read of the copy happens before this read
  // of the sequence (a plain load, even acquire, would not order them; the
  // word is shared, and adding 0 changes nothing the sender counts on).
  return __atomic_fetch_add(StageSequence(side_ == Side::kProcess, chunk), 0, __ATOMIC_ACQ_REL) == sequence;
}

void ShmChannel::MarkTaken(uint32_t chunk, uint64_t sequence) const {
  if (chunk >= stage_chunks_) return;
  // Release: the copy out of the chunk (already checked intact) is done
  // before the other side may fill it again.
  __atomic_store_n(StageSequence(side_ == Side::kProcess, chunk) + 1, sequence, __ATOMIC_RELEASE);
}

bool ShmChannel::Taken(uint32_t chunk, uint64_t sequence) const {
  return chunk < stage_chunks_ &&
         __atomic_load_n(StageSequence(side_ == Side::kDaemon, chunk) + 1, __ATOMIC_ACQUIRE) == sequence;
}

ShmChannelTraffic ShmChannel::Traffic() const {
  return {LoadAcquire(ring(true)->produced()), LoadAcquire(ring(false)->produced())};
}

ShmChannel::~ShmChannel() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

uint16_t ShmChannel::Receive(rte_mbuf** pkts, uint16_t n, rte_mempool* pool) {
  Ring* r = ring(side_ == Side::kProcess);
  const uint32_t produced = LoadAcquire(r->produced());
  const uint32_t available = produced - consumed_;
  if (available == 0) return 0;
  if (available > slots_) {
    // Nothing sane to read; wait for the peer to put it right (or go).
    counters_.rx_bad_index++;
    return 0;
  }
  const uint16_t want = static_cast<uint16_t>(std::min<uint32_t>(available, n));
  if (rte_pktmbuf_alloc_bulk(pool, pkts, want) != 0) {
    counters_.rx_no_mbuf++;
    return 0;
  }
  uint16_t got = 0;
  for (uint16_t i = 0; i < want; ++i) {
    const uint8_t* slot = r->slot(consumed_++, slots_, slot_size_);
    uint32_t word;
    std::memcpy(&word, slot, sizeof(word));  // read once
    const bool link_form = (word & kLinkFormBit) != 0;
    const uint32_t length = word & ~kLinkFormBit;
    rte_mbuf* m = pkts[got];
    // The link form only where both ends are processes (a local link).
    char* data = length == 0 || length > max_frame_ || (link_form && !link_frames_)
                     ? nullptr
                     : rte_pktmbuf_append(m, static_cast<uint16_t>(length));
    if (data == nullptr) {
      counters_.rx_bad_length++;
      continue;  // the slot is skipped; its mbuf serves the next one
    }
    std::memcpy(data, slot + kSlotHeader, length);
    m->hash.usr = link_form ? kLinkFrameMark : 0;
    counters_.rx_link_frames += link_form;
    ++got;
  }
  if (got < want) rte_pktmbuf_free_bulk(pkts + got, want - got);
  StoreRelease(r->consumed(), consumed_);
  counters_.rx_frames += got;
  return got;
}

bool ShmChannel::SendDrained() const {
  return LoadAcquire(ring(side_ == Side::kDaemon)->consumed()) == produced_;
}

uint16_t ShmChannel::Send(rte_mbuf** pkts, uint16_t n) { return SendFrames(pkts, n, false); }

uint16_t ShmChannel::SendLinkFrames(rte_mbuf** pkts, uint16_t n) { return SendFrames(pkts, n, true); }

bool ShmChannel::SendBytes(const uint8_t* frame, uint32_t length, bool link_form) {
  Ring* r = ring(side_ == Side::kDaemon);
  peer_consumed_ = LoadAcquire(r->consumed());
  const uint32_t used = produced_ - peer_consumed_;
  if (used >= slots_ || length == 0 || length > max_frame_) return false;
  uint8_t* slot = r->slot(produced_++, slots_, slot_size_);
  const uint32_t word = length | (link_form ? kLinkFormBit : 0);
  std::memcpy(slot, &word, sizeof(word));
  std::memcpy(slot + kSlotHeader, frame, length);
  StoreRelease(r->produced(), produced_);
  return true;
}

uint16_t ShmChannel::SendFrames(rte_mbuf** pkts, uint16_t n, bool link_form) {
  Ring* r = ring(side_ == Side::kDaemon);
  uint32_t used = produced_ - peer_consumed_;
  if (used > slots_ || slots_ - used < n) {
    peer_consumed_ = LoadAcquire(r->consumed());
    used = produced_ - peer_consumed_;
  }
  // A peer that claims to have read what was never written leaves no room.
  const uint32_t room = used > slots_ ? 0 : slots_ - used;
  const uint16_t take = static_cast<uint16_t>(std::min<uint32_t>(room, n));
  for (uint16_t i = 0; i < take; ++i) {
    rte_mbuf* m = pkts[i];
    const uint32_t length = rte_pktmbuf_pkt_len(m);
    if (length == 0 || length > max_frame_) {
      counters_.tx_too_long++;
      continue;
    }
    uint8_t* slot = r->slot(produced_++, slots_, slot_size_);
    // A connected service's packet crosses in its link form
    // (transport/link_frame.h), never longer than its wire form.
    const uint32_t shrunk =
        link_form && m->nb_segs == 1
            ? static_cast<uint32_t>(transport::WriteLinkFrame(rte_pktmbuf_mtod(m, const uint8_t*), length,
                                                              slot + kSlotHeader, max_frame_))
            : 0;
    if (shrunk != 0) {
      const uint32_t word = shrunk | kLinkFormBit;
      std::memcpy(slot, &word, sizeof(word));
      counters_.tx_link_frames++;
    } else {
      // Built for the link form, but not of a shape that has one: its ICRC
      // (transport::kIcrcLeftOut).
      if (link_form && m->hash.usr == transport::kIcrcLeftOut && m->nb_segs == 1) {
        transport::WriteIcrc(rte_pktmbuf_mtod(m, uint8_t*), length);
      }
      std::memcpy(slot, &length, sizeof(length));
      // Chained mbufs (large frames from a pool of small buffers) copy whole.
      const void* data = rte_pktmbuf_read(m, 0, length, slot + kSlotHeader);
      if (data != slot + kSlotHeader) std::memcpy(slot + kSlotHeader, data, length);
    }
    counters_.tx_frames++;
  }
  if (take != 0) StoreRelease(r->produced(), produced_);
  rte_pktmbuf_free_bulk(pkts, take);
  return take;
}

}  // namespace uroce::host
