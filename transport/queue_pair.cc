#include "transport/queue_pair.h"

namespace uroce::transport {

QueuePair::QueuePair(uint32_t qpn_in, ibv_qp_type type_in, PdHandle pd_in, CompletionQueue* send_cq_in,
                     CompletionQueue* recv_cq_in, SharedReceiveQueue* srq_in, bool sq_sig_all_in,
                     const QpCaps& caps_in)
    : qpn(qpn_in),
      type(type_in),
      pd(pd_in),
      send_cq(send_cq_in),
      recv_cq(recv_cq_in),
      srq(srq_in),
      sq_sig_all(sq_sig_all_in),
      caps(caps_in),
      send_ring(caps_in.max_send_wr),
      recv_ring(caps_in.max_recv_wr == 0 ? 1 : caps_in.max_recv_wr) {
  req.window.reset(new SendSlot[caps.max_send_wr]);
  req.window_mask = caps.max_send_wr - 1;
  attr.qp_state = IBV_QPS_RESET;
  attr.path_mtu = IBV_MTU_1024;
  attr.port_num = 1;
}

}  // namespace uroce::transport
