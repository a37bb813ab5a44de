// Work queue entries: the engine's own copies of ibv_send_wr / ibv_recv_wr.
// Posting copies a work request (and any inline data) into a fixed-size entry,
// so the application may reuse its structures as soon as ibv_post_send
// returns, as verbs requires (ibv_post_send(3)).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::transport {

inline constexpr uint32_t kMaxSendSge = 16;
inline constexpr uint32_t kMaxRecvSge = 16;
inline constexpr uint32_t kMaxInlineData = 256;

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint32_t send_flags = 0;  // IBV_SEND_SIGNALED (resolved with sq_sig_all), FENCE, SOLICITED, INLINE
  uint32_t imm_data_be = 0; // network order, as ibv_send_wr keeps it
  uint32_t invalidate_rkey = 0;
  uint64_t total_length = 0;  // sum of the SGE lengths, or the inline bytes
  // RDMA: remote address and rkey. Atomics: the same, plus compare/swap/add.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // UD: the address handle and the destination QP and Q_Key.
  uint32_t ah_handle = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t num_sge = 0;
  // A request carries either SGEs or inline bytes (IBV_SEND_INLINE: the
  // bytes are copied at post time and num_sge is 0), never both: they share
  // their storage, which makes every send queue slot and window entry 256 B
  // smaller (issue 16: memory per QP).
  union {
    Sge sge[kMaxSendSge] = {};
    uint8_t inline_data[kMaxInlineData];
  };
};
static_assert(sizeof(SendWqe) <= 336, "a send work request grew: every slot of every send queue grows with it");

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t total_length = 0;
  Sge sge[kMaxRecvSge];
};

// Copies what a work request uses: its fixed fields, its num_sge SGEs and
// its inline bytes, not the whole entry (a 64 B send is 592 B of SendWqe, of
// which it uses about 100: copying the rest was the largest memmove in a
// 64 B message-rate profile, issue 16). Entries are read only up to
// num_sge SGEs and total_length inline bytes.
inline void CopyUsedSendWqe(const SendWqe& from, SendWqe* to) {
  std::memcpy(static_cast<void*>(to), &from, offsetof(SendWqe, sge));
  std::memcpy(to->sge, from.sge, from.num_sge * sizeof(Sge));
  if (from.num_sge == 0 && from.total_length != 0) {
    std::memcpy(to->inline_data, from.inline_data, static_cast<size_t>(from.total_length));
  }
}

inline void CopyUsedRecvWqe(const RecvWqe& from, RecvWqe* to) {
  std::memcpy(static_cast<void*>(to), &from, offsetof(RecvWqe, sge));
  std::memcpy(to->sge, from.sge, from.num_sge * sizeof(Sge));
}

// The ibv_wc opcode that completes a send work request of `opcode`.
inline ibv_wc_opcode SendCompletionOpcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
  }
}

}  // namespace uroce::transport
