// Posting to a work queue: the one way a request enters a send queue, a
// receive queue or an SRQ (Engine::PostSend, PostRecv, PostSrqRecv).
//
// A queue has two bounds. Credits count the requests posted and not yet
// completed, against the queue's max_send_wr / max_recv_wr (ibv_create_qp(3):
// a post beyond it fails with ENOMEM). The ring holds the requests the engine
// has not taken yet. A poster takes a credit first, so that a full queue is
// refused before anything is written; the engine returns the credit when the
// request completes (Completions). Both are lock-free: any number of
// application threads may post at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/ring.h"

namespace uroce::transport {

// Takes one of `limit` credits from `credits_used`, then writes a request
// into a slot of `ring` with `fill(std::byte* slot)`. False (ENOMEM for the
// caller) when no credit or no slot is left; the credit is then given back.
template <class Fill>
bool PushWithCredit(std::atomic<uint32_t>& credits_used, uint32_t limit, StridedRing& ring, Fill&& fill) {
  uint32_t used = credits_used.load(std::memory_order_relaxed);
  do {
    if (used >= limit) return false;
  } while (!credits_used.compare_exchange_weak(used, used + 1, std::memory_order_acquire));
  if (!ring.TryPushWith(std::forward<Fill>(fill))) {
    credits_used.fetch_sub(1, std::memory_order_release);
    return false;
  }
  return true;
}

}  // namespace uroce::transport
