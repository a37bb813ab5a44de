// A QP's staged chunks (transport/pull_descriptor.h) not yet acknowledged:
// what the requester holds in a link's payload area, so that a chunk can
// be sent again without copying it again, and given back once the
// responder has it. The responder holds its READ responses' chunks in one
// too (ResponderState::read_staged), given back as the reader takes them.
//
// A chunk is given back (PeerMemory::Unstage) only once the oldest
// unacknowledged PSN has passed its first one (the responder will never
// read it then), or when its QP is reset or destroyed: before that, its
// descriptor may still wait in the link's ring and the receiver copy from
// it. (After a reset the receiver's sequence check catches a descriptor
// that outlived its chunk.)
//
// Threads: the engine thread, or the control path holding the engine
// (ProgressToken).
#pragma once

#include <array>
#include <cstdint>

#include "transport/peer_memory.h"
#include "transport/wire_types.h"

namespace uroce::transport {

class StagedChunks {
 public:
  static constexpr uint32_t kCapacity = 32;

  struct Entry {
    Psn first_psn;
    Psn last_psn;
    uint32_t length = 0;
    StageTicket ticket;
    uint64_t staged_ns = 0;  // when it was filled (a responder's READ chunks age out)
  };

  bool empty() const { return count_ == 0; }
  uint32_t size() const { return count_; }
  const Entry& Oldest() const { return entries_[head_]; }  // not empty()
  bool full() const { return count_ == kCapacity; }

  void Push(const Entry& entry) { entries_[(head_ + count_++) % kCapacity] = entry; }

  // The held chunk whose PSNs include `psn`; null if none.
  const Entry* Find(Psn psn) const {
    for (uint32_t i = 0; i < count_; ++i) {
      const Entry& e = entries_[(head_ + i) % kCapacity];
      if (psn.DistanceFrom(e.first_psn) >= 0 && e.last_psn.DistanceFrom(psn) >= 0) return &e;
    }
    return nullptr;
  }

  // How many PSNs from `psn` on are free of held chunks, up to `limit` (a
  // new chunk there must not overlap one held: a go-back-N resend may find
  // a chunk held after a run that went as packets).
  uint32_t FreeRunFrom(Psn psn, uint32_t limit) const {
    for (uint32_t i = 0; i < count_; ++i) {
      const int32_t ahead = entries_[(head_ + i) % kCapacity].first_psn.DistanceFrom(psn);
      if (ahead > 0 && static_cast<uint32_t>(ahead) < limit) limit = static_cast<uint32_t>(ahead);
    }
    return limit;
  }

  // Gives back every chunk whose first PSN is before `unacked`: the
  // responder's expected PSN is past it, so it takes the chunk's descriptor
  // as a duplicate (reading nothing) however late it arrives. That includes
  // a chunk acknowledged only in part, when some of its PSNs had gone as
  // packets before (a resend staged them again): it can never be taken
  // whole, and its rest goes again from `unacked`.
  void ReleaseBefore(Psn unacked, PeerMemory* peer) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < count_; ++i) {
      const Entry& e = entries_[(head_ + i) % kCapacity];
      if (e.first_psn.DistanceFrom(unacked) < 0) {
        if (peer != nullptr) peer->Unstage(e.ticket);
      } else {
        entries_[(head_ + kept++) % kCapacity] = e;
      }
    }
    count_ = kept;
  }

  // Gives back every chunk `done` says may be filled again (a READ
  // response's chunk: the reader has taken it, or waited too long).
  template <typename Done>
  void ReleaseWhere(Done done, PeerMemory* peer) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < count_; ++i) {
      const Entry& e = entries_[(head_ + i) % kCapacity];
      if (done(e)) {
        if (peer != nullptr) peer->Unstage(e.ticket);
      } else {
        entries_[(head_ + kept++) % kCapacity] = e;
      }
    }
    count_ = kept;
  }

  void ReleaseAll(PeerMemory* peer) {
    for (; count_ != 0; --count_, head_ = (head_ + 1) % kCapacity) {
      if (peer != nullptr) peer->Unstage(entries_[head_].ticket);
    }
  }

 private:
  std::array<Entry, kCapacity> entries_{};
  uint32_t head_ = 0, count_ = 0;
};

}  // namespace uroce::transport
