// A shared receive queue (IBTA 10.2.9): receive work requests that any QP
// attached to it may consume. When the number of posted requests falls below
// the armed limit the engine raises IBV_EVENT_SRQ_LIMIT_REACHED once and
// disarms the limit (ibv_modify_srq(3)). ibv_modify_srq(3) with
// IBV_SRQ_MAX_WR resizes it (Engine::ResizeSrq): a new ring takes the posted
// requests over, in order.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

#include "common/ring.h"
#include "transport/memory_region.h"
#include "transport/work_request.h"

namespace uroce::transport {

class CompletionQueue;

class SharedReceiveQueue {
 public:
  // The ring's slots from `allocator` when given (a verbs parent domain's),
  // else from the heap; Resize takes the new ring's from it too.
  SharedReceiveQueue(PdHandle pd_handle, uint32_t max_wr_in, uint32_t max_sge_in, uint32_t limit_in,
                     RingAllocator allocator = {})
      : pd(pd_handle),
        max_wr(max_wr_in),
        max_sge(max_sge_in),
        limit(limit_in),
        allocator_(std::move(allocator)),
        ring_(MakeRing(max_wr_in)) {}
  static size_t RingBytes(uint32_t max_wr, uint32_t max_sge) {
    return StridedRing::StorageBytesFor(max_wr, RecvWqePayloadBytes(max_sge));
  }

  // False when the allocator gave no memory for the ring (the SRQ is unusable).
  bool has_ring() const { return ring_ != nullptr; }
  // Posters push, the engine (or a control call holding the progress token)
  // pops. The ring is replaced only by Resize, while neither can touch it.
  StridedRing& ring() { return *ring_; }

  // ibv_modify_srq(3) IBV_SRQ_MAX_WR: room for `new_max_wr` requests from
  // now on, those posted kept in order. False, nothing changed, when more
  // are posted than that or the allocator gives no memory. Control path,
  // only while nothing posts (PostGate closed) and the engine is held
  // between polls (ProgressToken); allocates.
  bool Resize(uint32_t new_max_wr) {
    if (new_max_wr < ring_->ApproxSize()) return false;  // exact: nobody pushes or pops
    std::unique_ptr<StridedRing> resized = MakeRing(new_max_wr);
    if (resized == nullptr) return false;
    RecvWqe wqe;
    while (ring_->TryPopSingleConsumer([&wqe](const std::byte* w) { ReadRecvWqe(w, &wqe); })) {
      (void)resized->TryPushWith([&wqe](std::byte* slot) { WriteRecvWqe(wqe, slot); });  // room: checked above
    }
    ring_ = std::move(resized);
    max_wr.store(new_max_wr, std::memory_order_relaxed);
    return true;
  }

  // Posters pass this gate (PostSrqRecv, any thread); a resize closes it
  // and waits until the posters inside have left, so that no poster holds
  // the ring being replaced. Two atomics per ibv_post_srq_recv call, on the
  // application's side; the engine's fast path does not pass it.
  class PostGate {
   public:
    explicit PostGate(SharedReceiveQueue& srq) : srq_(srq) {
      for (;;) {
        srq_.posters_.fetch_add(1, std::memory_order_seq_cst);
        if (!srq_.resizing_.load(std::memory_order_seq_cst)) return;
        srq_.posters_.fetch_sub(1, std::memory_order_release);
        while (srq_.resizing_.load(std::memory_order_acquire)) std::this_thread::yield();
      }
    }
    ~PostGate() { srq_.posters_.fetch_sub(1, std::memory_order_release); }
    PostGate(const PostGate&) = delete;
    PostGate& operator=(const PostGate&) = delete;

   private:
    SharedReceiveQueue& srq_;
  };
  // Control path: closes the gate and waits for the posters inside.
  void ClosePostGate() {
    resizing_.store(true, std::memory_order_seq_cst);
    while (posters_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  void OpenPostGate() { resizing_.store(false, std::memory_order_release); }

  const PdHandle pd;
  std::atomic<uint32_t> max_wr;  // changed only by Resize, with the gate closed
  const uint32_t max_sge;
  std::atomic<uint32_t> posted{0};  // requests in the ring
  std::atomic<uint32_t> limit;      // 0: disarmed
  std::atomic<uint64_t> limit_events{0};
  // XRC SRQs (IBTA annex A14, XRC, ibv_create_srq_ex(3) IBV_SRQT_XRC): their XRC
  // domain (0: a basic SRQ), the number an XRCETH names them by, and the CQ
  // their receives complete on (XRC target QPs have none). Set before the SRQ
  // is published to the engine thread, never changed after.
  uint32_t xrcd = 0;
  uint32_t srqn = 0;
  CompletionQueue* cq = nullptr;

 private:
  // A ring for `max_wr_in` requests of max_sge SGEs (slots sized
  // from max_sge), its slots from allocator_ if any; null when the
  // allocator gives nothing.
  std::unique_ptr<StridedRing> MakeRing(uint32_t max_wr_in) {
    RingStorage storage;
    if (allocator_) {
      storage = allocator_(RingBytes(max_wr_in, max_sge), kCacheLine);
      if (storage.bytes == nullptr) return nullptr;
    }
    return std::make_unique<StridedRing>(max_wr_in, RecvWqePayloadBytes(max_sge), std::move(storage));
  }

  RingAllocator allocator_;
  std::unique_ptr<StridedRing> ring_;  // behind a pointer only so that Resize can replace it
  std::atomic<uint32_t> posters_{0};
  std::atomic<bool> resizing_{false};
};

}  // namespace uroce::transport
