#include "transport/queue_pair.h"

namespace uroce::transport {

QueuePair::QueuePair(uint32_t qpn_in, ibv_qp_type type_in, PdHandle pd_in, CompletionQueue* send_cq_in,
                     CompletionQueue* recv_cq_in, SharedReceiveQueue* srq_in, bool sq_sig_all_in,
                     const QpCaps& caps_in, RingStorage send_storage, RingStorage recv_storage)
    : qpn(qpn_in),
      type(type_in),
      pd(pd_in),
      send_cq(send_cq_in),
      recv_cq(recv_cq_in),
      srq(srq_in),
      sq_sig_all(sq_sig_all_in),
      caps(caps_in),
      send_ring(caps_in.max_send_wr, SendWqePayloadBytes(caps_in.max_send_sge, caps_in.max_inline_data),
                std::move(send_storage)),
      recv_ring(caps_in.max_recv_wr == 0 ? 1 : caps_in.max_recv_wr, RecvWqePayloadBytes(caps_in.max_recv_sge),
                std::move(recv_storage)) {
  ResetWindow();
  attr.qp_state = IBV_QPS_RESET;
  attr.path_mtu = IBV_MTU_1024;
  attr.port_num = 1;
}

size_t QueuePair::SendRingBytes(const QpCaps& c) {
  return StridedRing::StorageBytesFor(c.max_send_wr, SendWqePayloadBytes(c.max_send_sge, c.max_inline_data));
}

size_t QueuePair::RecvRingBytes(const QpCaps& c) {
  return StridedRing::StorageBytesFor(c.max_recv_wr == 0 ? 1 : c.max_recv_wr, RecvWqePayloadBytes(c.max_recv_sge));
}

void QueuePair::ResetWindow() {
  req.window.reset(new SendSlot[send_ring.capacity()]);
  req.window_mask = static_cast<uint32_t>(send_ring.capacity() - 1);
  req.head = req.tail = req.next_send = send_ring.head();
}

bool QueuePair::TakePostedSend() {
  RequesterState& r = req;
  if (r.tail - r.head > r.window_mask) return false;  // cannot happen while credits hold
  const std::byte* payload = send_ring.TryTakeSingleConsumer();
  if (payload == nullptr) return false;
  SendSlot& slot = r.window[r.tail & r.window_mask];
  slot.wqe = SendWqeView(payload);
  slot.started = false;
  slot.local_error = false;
  slot.signaled = (slot.wqe->send_flags & IBV_SEND_SIGNALED) != 0;
  ++r.tail;
  return true;
}

size_t QueuePair::WorkRequestBytes() const {
  // The window has one entry per send queue slot (ResetWindow); any thread.
  return send_ring.StorageBytes() + recv_ring.StorageBytes() + send_ring.capacity() * sizeof(SendSlot);
}

}  // namespace uroce::transport
