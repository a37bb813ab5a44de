// Work queue entries: the engine's own copies of ibv_send_wr / ibv_recv_wr.
// Posting copies a work request (and any inline data) into a slot of the
// QP's send or receive queue, so the application may reuse its structures as
// soon as ibv_post_send returns, as verbs requires (ibv_post_send(3)). A slot
// is as large as the QP's capabilities need, so the queues hold
// bytes and these helpers write and read the used part of a request.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace uroce::transport {

inline constexpr uint32_t kMaxSendSge = 16;
inline constexpr uint32_t kMaxRecvSge = 16;
inline constexpr uint32_t kMaxInlineData = 256;

// No default member initializers: a request's SGE array is left unset
// beyond its num_sge entries (SendWqe, RecvWqe), which are all that is ever
// read. Zeroing the device's 16 on every post took 3 % of a 64 B sender's
// samples. Sge{} is still all zeros.
struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

// The operands of an atomic (IBTA 9.4.5): compare and swap, or the addend
// of a fetch and add in compare_add. These and WindowBind are members of
// SendWqeHeader's union, so they have no default member initializers; the
// union starts zeroed.
struct AtomicOperands {
  uint64_t compare_add;
  uint64_t swap;
};

// IBV_WR_BIND_MW (ibv_bind_mw(3)): the window is named by the request's rkey
// and its range starts at remote_addr; the rest is here.
struct WindowBind {
  uint64_t length;
  uint32_t mr_lkey;       // the region the window lies in (0: none, an unbind)
  uint32_t new_rkey;      // the rkey the window has once bound
  uint32_t access_flags;  // IBV_ACCESS_*, host order
};

// The fixed fields of a send work request. In a send queue slot the
// request's SGEs or inline bytes follow it (SendWqeView).
struct SendWqeHeader {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint32_t send_flags = 0;  // IBV_SEND_SIGNALED (resolved with sq_sig_all), FENCE, SOLICITED, INLINE
  uint32_t invalidate_rkey = 0;  // SEND_WITH_INV, LOCAL_INV
  // RDMA, atomics and ATOMIC WRITE: the remote address and rkey. A window
  // bind: the window's start and its current rkey.
  uint32_t rkey = 0;
  uint64_t remote_addr = 0;
  uint64_t total_length = 0;  // sum of the SGE lengths, or the inline bytes
  // What only some opcodes carry; `opcode` says which member is set.
  union {
    uint32_t imm_data_be;         // SEND/WRITE_WITH_IMM: network order, as ibv_send_wr keeps it
    AtomicOperands atomic;        // CMP_AND_SWP, FETCH_AND_ADD
    uint8_t atomic_write_value[8];  // an inline ATOMIC WRITE (num_sge 0): its bytes as they lay in memory
    WindowBind bind = {};         // BIND_MW; initialized as the largest member, so all bytes start zero
  };
  // UD: the address handle and the destination QP and Q_Key. XRC initiator:
  // remote_qpn holds the remote XRC SRQ number for the XRCETH
  // (wr.qp_type.xrc.remote_srqn).
  uint32_t ah_handle = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t num_sge = 0;  // 0: the request carries total_length inline bytes (or nothing)
};
static_assert(sizeof(SendWqeHeader) == 80 && alignof(SendWqeHeader) == 8,
              "the fixed part of every send queue slot");

// A whole send work request as PostSend builds it on its stack, with room
// for the device's largest request. Only its used part is written into the
// send queue (WriteSendWqe).
struct SendWqe : SendWqeHeader {
  // A request carries either SGEs or inline bytes (IBV_SEND_INLINE: the
  // bytes are copied at post time and num_sge is 0), never both: they share
  // their storage.
  union {
    Sge sge[kMaxSendSge];  // the first num_sge are set
    uint8_t inline_data[kMaxInlineData];
  };
};
static_assert(sizeof(SendWqe) <= 336, "a send work request grew");

// Memory per QP: a send queue slot holds a SendWqeHeader and then
// max(max_send_sge SGEs, max_inline_data bytes), as the QP's capabilities
// allow, not a whole SendWqe. These are the bytes a slot's payload needs.
inline size_t SendWqePayloadBytes(uint32_t max_sge, uint32_t max_inline) {
  const size_t tail = std::max<size_t>(size_t{max_sge} * sizeof(Sge), max_inline);
  return sizeof(SendWqeHeader) + tail;
}

// Writes the used part of `wqe` into a send queue slot's payload, which has
// SendWqePayloadBytes(caps) bytes, 8-byte aligned: the header as an object
// of its own (placement new begins its lifetime there, so that a view may
// read it in place), then num_sge SGEs or total_length inline bytes. The
// poster checked those against the QP's capabilities.
inline void WriteSendWqe(const SendWqe& wqe, std::byte* payload) {
  new (payload) SendWqeHeader(static_cast<const SendWqeHeader&>(wqe));
  std::byte* tail = payload + sizeof(SendWqeHeader);
  if (wqe.num_sge != 0) {
    std::memcpy(tail, wqe.sge, wqe.num_sge * sizeof(Sge));
  } else if (wqe.total_length != 0 && wqe.opcode != IBV_WR_ATOMIC_WRITE) {
    std::memcpy(tail, wqe.inline_data, static_cast<size_t>(wqe.total_length));
  }
}

// A send work request read in place in its send queue slot (written by
// WriteSendWqe). SGEs are copied out one at a time (memcpy: the tail is raw
// bytes, which hold SGEs or inline data), only up to num_sge, and inline
// bytes only up to total_length: nothing past the slot is ever read.
class SendWqeView {
 public:
  SendWqeView() = default;
  explicit SendWqeView(const std::byte* payload) : payload_(payload) {}

  const SendWqeHeader& header() const { return *std::launder(reinterpret_cast<const SendWqeHeader*>(payload_)); }
  const SendWqeHeader* operator->() const { return &header(); }
  // i < num_sge.
  Sge sge(uint32_t i) const {
    Sge s;
    std::memcpy(&s, payload_ + sizeof(SendWqeHeader) + size_t{i} * sizeof(Sge), sizeof(Sge));
    return s;
  }
  // num_sge == 0: total_length bytes.
  const uint8_t* inline_data() const { return reinterpret_cast<const uint8_t*>(payload_ + sizeof(SendWqeHeader)); }

 private:
  const std::byte* payload_ = nullptr;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t total_length = 0;
  Sge sge[kMaxRecvSge];
};

// A receive queue slot (of a QP or an SRQ) holds RecvWqe's fixed
// fields and max_sge SGEs, not kMaxRecvSge.
inline size_t RecvWqePayloadBytes(uint32_t max_sge) { return offsetof(RecvWqe, sge) + size_t{max_sge} * sizeof(Sge); }

// Copies the used part of `wqe` (fixed fields, num_sge SGEs) into a receive
// queue slot's payload of RecvWqePayloadBytes(max_sge >= num_sge) bytes.
inline void WriteRecvWqe(const RecvWqe& wqe, std::byte* payload) {
  std::memcpy(payload, &wqe, offsetof(RecvWqe, sge) + wqe.num_sge * sizeof(Sge));
}

// The reverse: fills `out`'s fixed fields and its first num_sge SGEs.
inline void ReadRecvWqe(const std::byte* payload, RecvWqe* out) {
  std::memcpy(static_cast<void*>(out), payload, offsetof(RecvWqe, sge));
  std::memcpy(out->sge, payload + offsetof(RecvWqe, sge), out->num_sge * sizeof(Sge));
}

// The ibv_wc opcode that completes a send work request of `opcode`.
inline ibv_wc_opcode SendCompletionOpcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;
  }
}

}  // namespace uroce::transport
