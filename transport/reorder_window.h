// Selective retransmission, the responder's half: request packets that
// arrive after a gap are held, not dropped, until the missing PSN comes, and
// are then handled in PSN order as if they had just arrived. The requester
// resends only what the responder NAKs (docs/transport.md, "Selective
// retransmission"). Holding whole packets, rather than placing their data
// where it goes, keeps every check and every rule of the responder as it is
// (a SEND takes its receive in message order, a WRITE's later packets have
// no RETH, READs and atomics execute in order), and costs nothing when
// nothing is lost.
//
// Memory is bounded twice: a QP holds packets only while it has a window
// from the engine's ReorderPool (a fixed number, made with the engine), and
// the pool holds at most `max_held` packets in all, so that a peer sending
// far ahead cannot take the receive pool's buffers. A packet that cannot be
// held is dropped, as on go-back-N, and its PSN is NAKed in turn.
//
// Each held mbuf is owned by its window until Take hands it back (the
// responder handles it, then frees it) or Release frees it (the QP flushed,
// reset or destroyed; the engine destroyed).
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

  // Holds `m` (parsed as `view`), `distance` PSNs after the one expected.
  // False, and nothing taken, if the slot is taken already (a duplicate).
  bool Hold(uint32_t distance, Psn expected, rte_mbuf* m, const PacketView& view);
  // The packet held for `psn`, if any: its mbuf (the caller's now) and view.
  rte_mbuf* Take(Psn psn, PacketView* view);
  bool Holds(Psn psn) const;
  uint32_t held() const { return held_; }
  // Frees every held mbuf; returns how many.
  uint32_t Release();

 private:
  struct Slot {
    rte_mbuf* mbuf = nullptr;
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
  // the pool holds max_held packets already or the slot is taken.
  bool Hold(ReorderWindow* window, uint32_t distance, Psn expected, rte_mbuf* m, const PacketView& view);
  // ReorderWindow::Take, counted.
  rte_mbuf* Take(ReorderWindow* window, Psn psn, PacketView* view);
  uint32_t held() const { return held_; }
  uint32_t free_windows() const { return static_cast<uint32_t>(free_.size()); }

 private:
  std::vector<std::unique_ptr<ReorderWindow>> all_;
  std::vector<ReorderWindow*> free_;
  uint32_t max_held_;
  uint32_t held_ = 0;
};

}  // namespace uroce::transport
