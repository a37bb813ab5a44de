// From struct ibv_wc (the engine's completion) to libfabric's completion
// entries, completion flags and error codes (fi_cq(3)).
//
// Any thread. Nothing here allocates or locks; the per-entry functions are
// inline because readers run them once per entry in fi_cq_read.
//
// The fields uroce's engine fills in struct ibv_wc, and what they become:
//   wr_id      -> op_context (fi_cq(3) COMPLETION FIELDS "op_context").
//   opcode     -> flags, by the table in CompletionFlags(). uroce's engine
//                 fills opcode on failed completions too (rxe does the same),
//                 so error entries carry flags as well.
//   byte_len   -> len, on receives only ("len ... only applies to completed
//                 receive operations"); an RDMA write with immediate consumes a
//                 receive and reports its length there, as libfabric's verbs
//                 provider does.
//   imm_data   -> data, converted to host byte order ("The completion data will
//                 be given in host byte order"), with FI_REMOTE_CQ_DATA, when
//                 wc_flags has IBV_WC_WITH_IMM or the opcode is
//                 IBV_WC_RECV_RDMA_WITH_IMM. imm_data is big-endian in ibv_wc.
//   status     -> err (a positive fabric errno, FabricErrnoForStatus) and
//                 prov_errno (the ibv_wc_status itself).
//   vendor_err -> olen for IBV_WC_LOC_LEN_ERR: vendor_err is ours to define,
//                 and uroce's engine puts there the number of bytes that did
//                 not fit the receive buffer and were discarded (fi_cq(3)
//                 "olen"). ibv_wc has no other field for it.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <cstddef>
#include <cstdint>

namespace uroce::cq {

// The wr_id of an operation that asked for no completion: the fi_inject
// family, and FI_SELECTIVE_COMPLETION without FI_COMPLETION. Verbs still
// completes such a request when it fails or is flushed (ibv_post_send(3)),
// and a libfabric CQ takes nothing with this wr_id (FabricCq::PushCompletions),
// as libfabric's own verbs provider does (VERBS_NO_COMP_FLAG): ofi_rxm reads
// the op_context of every error entry on its endpoints' CQ as one of its own
// buffers. fi_endpoint(3) would report it with the endpoint's context
// instead, and rxm's endpoint context is no buffer either. The failure still
// shows: the QP is in error, so every receive and every requested completion
// after it comes back flushed (FI_ECANCELED) with its own context.
constexpr uint64_t kNoCompletionWrId = ~uint64_t{0};

// True for completions of a posted receive: plain receives and RDMA writes
// with immediate (which consume a receive in RoCE).
inline bool IsReceiveCompletion(const ibv_wc& wc) {
  return wc.opcode == IBV_WC_RECV || wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM;
}

inline bool CarriesRemoteData(const ibv_wc& wc) {
  return (wc.wc_flags & IBV_WC_WITH_IMM) != 0 ||
         wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM;
}

// fi_cq(3) COMPLETION FLAGS for a completion:
//   IBV_WC_SEND               FI_SEND | FI_MSG
//   IBV_WC_RECV               FI_RECV | FI_MSG
//   IBV_WC_RDMA_WRITE         FI_RMA | FI_WRITE     (locally initiated write)
//   IBV_WC_RDMA_READ          FI_RMA | FI_READ      (locally initiated read)
//   IBV_WC_COMP_SWAP,
//   IBV_WC_FETCH_ADD          FI_ATOMIC | FI_READ   (fetching atomics bring
//                                                    data back: "a locally
//                                                    initiated ... atomic read")
//   IBV_WC_ATOMIC_WRITE       FI_ATOMIC | FI_WRITE
//   IBV_WC_RECV_RDMA_WITH_IMM FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA
//                             ("a remotely initiated RMA ... write")
//   anything else (memory windows, local invalidate, TSO, tag matching,
//   driver opcodes): no flags; libfabric has no such operations.
// Plus FI_REMOTE_CQ_DATA whenever immediate data came with the completion.
inline uint64_t CompletionFlags(const ibv_wc& wc) {
  uint64_t flags = 0;
  switch (wc.opcode) {
    case IBV_WC_SEND: flags = FI_SEND | FI_MSG; break;
    case IBV_WC_RECV: flags = FI_RECV | FI_MSG; break;
    case IBV_WC_RDMA_WRITE: flags = FI_RMA | FI_WRITE; break;
    case IBV_WC_RDMA_READ: flags = FI_RMA | FI_READ; break;
    case IBV_WC_COMP_SWAP:
    case IBV_WC_FETCH_ADD: flags = FI_ATOMIC | FI_READ; break;
    case IBV_WC_ATOMIC_WRITE: flags = FI_ATOMIC | FI_WRITE; break;
    case IBV_WC_RECV_RDMA_WITH_IMM: flags = FI_RMA | FI_REMOTE_WRITE; break;
    default: break;
  }
  if (CarriesRemoteData(wc)) flags |= FI_REMOTE_CQ_DATA;
  return flags;
}

inline void* OperationContext(const ibv_wc& wc) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(wc.wr_id));
}

inline size_t ReceivedLength(const ibv_wc& wc) {
  return IsReceiveCompletion(wc) ? wc.byte_len : 0;
}

inline uint64_t RemoteData(const ibv_wc& wc) {
  return CarriesRemoteData(wc) ? ntohl(wc.imm_data) : 0;
}

// One entry per fi_cq_format (fi_cq(3) "format"). buf and tag stay zero:
// uroce has neither multi-receive buffers nor tagged messages.
inline void ToCqEntry(const ibv_wc& wc, fi_cq_entry* entry) {
  entry->op_context = OperationContext(wc);
}

inline void ToCqEntry(const ibv_wc& wc, fi_cq_msg_entry* entry) {
  entry->op_context = OperationContext(wc);
  entry->flags = CompletionFlags(wc);
  entry->len = ReceivedLength(wc);
}

inline void ToCqEntry(const ibv_wc& wc, fi_cq_data_entry* entry) {
  entry->op_context = OperationContext(wc);
  entry->flags = CompletionFlags(wc);
  entry->len = ReceivedLength(wc);
  entry->buf = nullptr;
  entry->data = RemoteData(wc);
}

inline void ToCqEntry(const ibv_wc& wc, fi_cq_tagged_entry* entry) {
  entry->op_context = OperationContext(wc);
  entry->flags = CompletionFlags(wc);
  entry->len = ReceivedLength(wc);
  entry->buf = nullptr;
  entry->data = RemoteData(wc);
  entry->tag = 0;
}

// Size in bytes of one entry of `format`; 0 for a format uroce does not know
// (FI_CQ_FORMAT_UNSPEC must be resolved first).
size_t CqEntrySize(fi_cq_format format);

// The positive fabric errno for a failed completion (fi_cq(3) "err"); 0 for
// IBV_WC_SUCCESS. Statuses uroce does not know become FI_EIO. The table and
// the reason for each row are in wc_mapping.cc.
int FabricErrnoForStatus(int status);

// Readable text for an ibv_wc_status value, for fi_cq_strerror. Never NULL;
// an unknown value gives a text that says so. Our own words: uroce does not
// link libibverbs for ibv_wc_status_str.
const char* CompletionStatusText(int status);

// Fills `entry` for a failed completion, all fields except err_data and
// err_data_size, which the reader handles (fi_cq(3) "err_data").
void FillCqErrEntry(const ibv_wc& wc, fi_cq_err_entry* entry);

}  // namespace uroce::cq
