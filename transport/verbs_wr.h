// The verbs work requests most callers post (ibv_post_send(3),
// ibv_post_recv(3)): one scatter/gather element; a send is signaled and has
// no other flag. Callers add what their opcode needs (wr.rdma, wr.atomic,
// wr.ud, imm_data) to the returned request. Header-only and verbs types
// only, so that programs on the verbs API build them the same way as callers
// of Engine::PostSend and PostRecv.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace uroce::transport {

inline ibv_send_wr SignaledSendWr(uint64_t wr_id, ibv_wr_opcode opcode, ibv_sge* sge) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = sge;
  wr.num_sge = 1;
  return wr;
}

inline ibv_recv_wr RecvWr(uint64_t wr_id, ibv_sge* sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = 1;
  return wr;
}

}  // namespace uroce::transport
