// See reorder_window.h.
#include "transport/reorder_window.h"

namespace uroce::transport {

bool ReorderWindow::Hold(uint32_t distance, Psn expected, rte_mbuf* m, const PacketView& view) {
  if (distance == 0 || distance >= kSlots) return false;
  Slot& slot = slots_[Index(expected + distance)];
  if (slot.occupied) return false;
  slot.occupied = true;
  slot.mbuf = m;
  slot.view = view;
  if (m == nullptr) {  // placed: its buffer is gone, nothing of it to read
    slot.view.payload = nullptr;
    slot.view.frame = nullptr;
  }
  ++held_;
  return true;
}

bool ReorderWindow::Holds(Psn psn) const {
  const Slot& slot = slots_[Index(psn)];
  return slot.occupied && slot.view.fields.bth.psn.value() == psn.value();
}

bool ReorderWindow::Take(Psn psn, PacketView* view, rte_mbuf** m) {
  Slot& slot = slots_[Index(psn)];
  if (!slot.occupied || slot.view.fields.bth.psn.value() != psn.value()) return false;
  *m = slot.mbuf;
  *view = slot.view;
  slot.occupied = false;
  slot.mbuf = nullptr;
  --held_;
  return true;
}

uint32_t ReorderWindow::Release() {
  uint32_t freed = 0;
  for (uint32_t i = 0; i < kSlots && held_ > 0; ++i) {
    if (!slots_[i].occupied) continue;
    if (slots_[i].mbuf != nullptr) {
      rte_pktmbuf_free(slots_[i].mbuf);
      ++freed;
    }
    slots_[i].occupied = false;
    slots_[i].mbuf = nullptr;
    --held_;
  }
  return freed;
}

ReorderPool::ReorderPool(uint32_t windows, uint32_t max_held) : max_held_(max_held) {
  all_.reserve(windows);
  free_.reserve(windows);
  for (uint32_t i = 0; i < windows; ++i) {
    all_.push_back(std::make_unique<ReorderWindow>());
    free_.push_back(all_.back().get());
  }
}

ReorderPool::~ReorderPool() {
  for (auto& w : all_) w->Release();
}

ReorderWindow* ReorderPool::Acquire() {
  if (free_.empty()) return nullptr;
  ReorderWindow* w = free_.back();
  free_.pop_back();
  return w;
}

void ReorderPool::Give(ReorderWindow* window) {
  if (window == nullptr) return;
  held_ -= window->Release();
  free_.push_back(window);
}

bool ReorderPool::Hold(ReorderWindow* window, uint32_t distance, Psn expected, rte_mbuf* m,
                       const PacketView& view) {
  if ((m != nullptr && held_ >= max_held_) || !window->Hold(distance, expected, m, view)) return false;
  if (m != nullptr) ++held_;
  return true;
}

bool ReorderPool::Take(ReorderWindow* window, Psn psn, PacketView* view, rte_mbuf** m) {
  if (!window->Take(psn, view, m)) return false;
  if (*m != nullptr) --held_;
  return true;
}

}  // namespace uroce::transport
