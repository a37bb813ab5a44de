// Selective retransmission, the responder's half: request packets that
// arrive after a gap are held, not dropped, until the missing PSN comes, and
// are then handled in PSN order as if they had just arrived. The requester
// resends only what the responder NAKs (docs/transport.md, "Selective
// retransmission"). Holding whole packets keeps every check and every rule
// of the responder as it is (a SEND takes its receive in message order, a
// WRITE's later packets have no RETH, READs and atomics execute in order),
// and costs nothing when nothing is lost.
//
// A WRITE packet after a gap inside the message in progress is the one
// exception: its place is known (the message's RETH came already), so the
// responder places its data on arrival, while it is in the cache and
// without keeping its buffer, and the window keeps only its parsed view,
// marked placed (payload null). When the gap fills, the view goes through
// every step in order like a held packet, less the copy: the drain is then
// bookkeeping, and the ACK that reopens the requester's window leaves at
// once.
//
// Memory is bounded twice: a QP holds packets only while it has a window
// from the engine's ReorderPool (a fixed number, made with the engine), and
// the pool holds at most `max_held` packets in all, so that a peer sending
// far ahead cannot take the receive pool's buffers. A packet that cannot be
// held is dropped, as on go-back-N, and its PSN is NAKed in turn.
//
// Each held mbuf is owned by its window until Take hands it back (the
// responder handles it, then frees it) or Release frees it (the QP flushed,
// reset or destroyed; the engine destroyed). Placed entries own no mbuf and
// do not count against the pool's bound.
//
// Engine thread only.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/packet_parser.h"
#include "transport/wire_types.h"

namespace uroce::transport {

class ReorderWindow {
 public:
  // PSNs up to this far after the expected one are held; beyond, dropped.
  static constexpr uint32_t kSlots = 256;

  // Holds `m` (parsed as `view`), `distance` PSNs after the one expected;
  // `m` null: a placed packet, its view only (payload null). False, and
  // nothing taken, if the slot is taken already (a duplicate).
  bool Hold(uint32_t distance, Psn expected, rte_mbuf* m, const PacketView& view);
  // Whether anything is held for `psn`, or `distance` after `expected`.
  bool Holds(Psn psn) const;
  // The packet held for `psn`, if any: its view, and its mbuf (the caller's
  // now; null for a placed packet). False when nothing is held for it.
  bool Take(Psn psn, PacketView* view, rte_mbuf** m);
  // Entries held, placed ones included.
  uint32_t held() const { return held_; }
  // Empties the window, freeing every held mbuf; returns how many mbufs.
  uint32_t Release();

 private:
  struct Slot {
    bool occupied = false;
    rte_mbuf* mbuf = nullptr;  // null: placed
    PacketView view;
  };
  static uint32_t Index(Psn psn) { return psn.value() & (kSlots - 1); }
  std::unique_ptr<Slot[]> slots_ = std::make_unique<Slot[]>(kSlots);
  uint32_t held_ = 0;
};

class ReorderPool {
 public:
  // `windows` windows (made now: the receive path allocates nothing), at
  // most `max_held` packets held in all.
  ReorderPool(uint32_t windows, uint32_t max_held);
  ~ReorderPool();
  ReorderPool(const ReorderPool&) = delete;
  ReorderPool& operator=(const ReorderPool&) = delete;

  // A window for a QP that met a gap; null when none is free.
  ReorderWindow* Acquire();
  // Back to the pool, every packet still held in it freed.
  void Give(ReorderWindow* window);
  // ReorderWindow::Hold within the pool's bound: false (nothing taken) when
  // the pool holds max_held mbufs already (for an mbuf) or the slot is taken.
  bool Hold(ReorderWindow* window, uint32_t distance, Psn expected, rte_mbuf* m, const PacketView& view);
  // ReorderWindow::Take, counted.
  bool Take(ReorderWindow* window, Psn psn, PacketView* view, rte_mbuf** m);
  uint32_t held() const { return held_; }
  uint32_t free_windows() const { return static_cast<uint32_t>(free_.size()); }

 private:
  std::vector<std::unique_ptr<ReorderWindow>> all_;
  std::vector<ReorderWindow*> free_;
  uint32_t max_held_;
  uint32_t held_ = 0;
};

}  // namespace uroce::transport
