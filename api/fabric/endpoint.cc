// uroce's FI_EP_MSG endpoint (fi_endpoint(3), fi_cm(3), fi_msg(3), fi_rma(3),
// fi_atomic(3)): one RC QP on the domain's engine, connected by the
// connection manager (cm/connection_manager.h).
//
// Data path: every fi_send / fi_recv / fi_write / fi_read / fi_atomic call
// becomes one engine request (transport::SendWqe for sends, RDMA and atomics;
// an ibv_recv_wr for receives) posted straight to the engine's QP rings (no
// allocation, no lock, no system call). Completions flow from the engine's
// CQs to the cq layer's CQ and counter bound to the endpoint
// (Engine::AttachCompletionSinks); wr_id carries the operation context.
//
// Conventions (fi_msg(3) RETURN VALUE): 0, -FI_EAGAIN when the queue is full
// (the application drives progress by reading its CQ and tries again),
// -FI_EINVAL for bad arguments, -FI_EOPBADSTATE before the connection is up.
#include <arpa/inet.h>

#include <cstring>

#include "api/fabric/cm_data.h"
#include "api/fabric/cm_service.h"
#include "api/fabric/info.h"
#include "api/fabric/objects.h"
#include "api/fabric/provider.h"
#include "api/fabric/unsupported.h"
#include "cq/wc_mapping.h"
#include "pmd/log.h"
#include "runtime/process.h"
#include "transport/work_request.h"

namespace uroce::fabric {
namespace {

Endpoint* From(fid_ep* ep) { return reinterpret_cast<Endpoint*>(ep); }

constexpr int kQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC;

// ---- Work requests ----

ssize_t MapPostError(Endpoint* ep, int error) {
  if (error == 0) return 0;
  if (error == ENOMEM) return -FI_EAGAIN;
  if (ep->state.load(std::memory_order_acquire) != EndpointState::kConnected) return -FI_EOPBADSTATE;
  return -FI_EINVAL;
}

// Gathers a receive's buffers into SGEs. With FI_MR_LOCAL every buffer has a
// descriptor (its MemoryRegion); *needs_inline says that one has none.
bool BuildSges(const iovec* iov, void* const* desc, size_t count, ibv_sge* sges, int* num_sge, uint64_t* total,
               bool* needs_inline) {
  if (count > kIovLimit || (count != 0 && iov == nullptr)) return false;
  *num_sge = 0;
  *total = 0;
  *needs_inline = false;
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len == 0) continue;
    const MemoryRegion* mr = desc != nullptr ? static_cast<const MemoryRegion*>(desc[i]) : nullptr;
    if (mr == nullptr) *needs_inline = true;
    ibv_sge& sge = sges[(*num_sge)++];
    sge.addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
    sge.length = static_cast<uint32_t>(iov[i].iov_len);
    sge.lkey = mr != nullptr ? mr->lkey : 0;
    *total += iov[i].iov_len;
  }
  return true;
}

// fi_cq(3) / fi_endpoint(3) "FI_SELECTIVE_COMPLETION": without it every
// operation completes; with it only those flagged FI_COMPLETION. The
// fi_inject family never completes (fi_msg(3): "the operation will not
// generate a completion"): those calls pass kInjectCall.
constexpr uint64_t kInjectCall = FI_INJECT | FI_INJECT_COMPLETE;

bool Signaled(const Endpoint* ep, uint64_t flags) {
  if (ep->tx_cq == nullptr && ep->tx_cntr == nullptr) return false;
  if ((flags & kInjectCall) == kInjectCall) return false;
  return !ep->tx_selective || (flags & FI_COMPLETION) != 0;
}

// An operation that asked for no completion is not reported when it fails
// either (cq::kNoCompletionWrId says why).
uint64_t SendWrId(bool signaled, void* context) {
  return signaled ? reinterpret_cast<uintptr_t>(context) : cq::kNoCompletionWrId;
}

// One fi_send / fi_write / fi_read family call as the engine's own request
// (transport::SendWqe), built from the iovecs with no ibv_send_wr between;
// the engine checks it against the QP as it checks a verbs request
// (Engine::PostSendWqe). With FI_MR_LOCAL every buffer has a descriptor (its
// MemoryRegion); a small send without one goes inline.
ssize_t PostSend(Endpoint* ep, ibv_wr_opcode opcode, const iovec* iov, void* const* desc, size_t count,
                 uint64_t flags, void* context, uint64_t data, uint64_t remote_addr, uint64_t rkey) {
  if (ep->qp == nullptr) return -FI_EOPBADSTATE;
  if (count > kIovLimit || (count != 0 && iov == nullptr)) return -FI_EINVAL;
  uint64_t total = 0;
  bool needs_inline = false;
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len == 0) continue;
    if (desc == nullptr || desc[i] == nullptr) needs_inline = true;
    total += iov[i].iov_len;
  }
  const bool is_read = opcode == IBV_WR_RDMA_READ;
  bool inject = (flags & FI_INJECT) != 0;
  if (needs_inline) {
    // FI_MR_LOCAL: no descriptor is the application's error, except for data
    // small enough to copy at post time.
    if (is_read || total > kInjectSize) return -FI_EINVAL;
    inject = true;
  }
  if (inject && (is_read || total > kInjectSize)) return -FI_EINVAL;
  const bool signaled = Signaled(ep, flags);
  transport::SendWqe wqe;
  wqe.wr_id = SendWrId(signaled, context);
  wqe.opcode = opcode;
  wqe.total_length = total;
  wqe.send_flags = 0;
  if (inject) wqe.send_flags |= IBV_SEND_INLINE;
  if (signaled) wqe.send_flags |= IBV_SEND_SIGNALED;
  if (flags & FI_FENCE) wqe.send_flags |= IBV_SEND_FENCE;
  if (inject) {
    // The bytes are taken now (fi_inject: the buffer may be reused on
    // return); total <= kInjectSize, the size of inline_data.
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
      if (iov[i].iov_len == 0) continue;
      std::memcpy(wqe.inline_data + at, iov[i].iov_base, iov[i].iov_len);
      at += iov[i].iov_len;
    }
    wqe.num_sge = 0;
  } else {
    uint32_t n = 0;
    for (size_t i = 0; i < count; ++i) {
      if (iov[i].iov_len == 0) continue;
      const auto* mr = static_cast<const MemoryRegion*>(desc[i]);
      wqe.sge[n++] =
          transport::Sge{reinterpret_cast<uintptr_t>(iov[i].iov_base), static_cast<uint32_t>(iov[i].iov_len), mr->lkey};
    }
    wqe.num_sge = n;
  }
  if (opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wqe.imm_data_be = htonl(static_cast<uint32_t>(data));
  }
  if (opcode != IBV_WR_SEND && opcode != IBV_WR_SEND_WITH_IMM) {
    wqe.remote_addr = remote_addr;
    wqe.rkey = static_cast<uint32_t>(rkey);
  }
  return MapPostError(ep, ep->domain->engine->PostSendWqe(ep->qp, &wqe));
}

ssize_t PostRecv(Endpoint* ep, const iovec* iov, void* const* desc, size_t count, void* context) {
  if (ep->qp == nullptr) return -FI_EOPBADSTATE;
  ibv_sge sges[kIovLimit];
  ibv_recv_wr wr{};
  uint64_t total = 0;
  bool needs_inline = false;
  if (!BuildSges(iov, desc, count, sges, &wr.num_sge, &total, &needs_inline)) return -FI_EINVAL;
  if (needs_inline) return -FI_EINVAL;  // a receive buffer must be registered (FI_MR_LOCAL)
  wr.wr_id = reinterpret_cast<uintptr_t>(context);
  wr.sg_list = wr.num_sge != 0 ? sges : nullptr;
  const ibv_recv_wr* bad = nullptr;
  const int e = ep->domain->engine->PostRecv(ep->qp, &wr, &bad);
  if (e == ENOMEM) return -FI_EAGAIN;
  return e == 0 ? 0 : -FI_EINVAL;
}

iovec Iov(const void* buf, size_t len) { return iovec{const_cast<void*>(buf), len}; }

// ---- fi_msg(3) ----

ssize_t Recv(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
  const iovec iov = Iov(buf, len);
  return PostRecv(From(e), &iov, &desc, 1, context);
}
ssize_t Recvv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t, void* context) {
  return PostRecv(From(e), iov, desc, count, context);
}
ssize_t Recvmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  if (msg == nullptr) return -FI_EINVAL;
  if (flags & FI_MULTI_RECV) return -FI_EBADFLAGS;
  return PostRecv(From(e), msg->msg_iov, msg->desc, msg->iov_count, msg->context);
}
ssize_t Send(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t, void* context) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_SEND, &iov, &desc, 1, From(e)->tx_op_flags, context, 0, 0, 0);
}
ssize_t Sendv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t, void* context) {
  return PostSend(From(e), IBV_WR_SEND, iov, desc, count, From(e)->tx_op_flags, context, 0, 0, 0);
}
ssize_t Sendmsg(fid_ep* e, const fi_msg* msg, uint64_t flags) {
  if (msg == nullptr) return -FI_EINVAL;
  const ibv_wr_opcode opcode = (flags & FI_REMOTE_CQ_DATA) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  return PostSend(From(e), opcode, msg->msg_iov, msg->desc, msg->iov_count, flags, msg->context, msg->data, 0, 0);
}
ssize_t Inject(fid_ep* e, const void* buf, size_t len, fi_addr_t) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_SEND, &iov, nullptr, 1, kInjectCall, nullptr, 0, 0, 0);
}
ssize_t Senddata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t, void* context) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_SEND_WITH_IMM, &iov, &desc, 1, From(e)->tx_op_flags, context, data, 0, 0);
}
ssize_t Injectdata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_SEND_WITH_IMM, &iov, nullptr, 1, kInjectCall, nullptr, data, 0, 0);
}

fi_ops_msg kMsgOps = {sizeof(fi_ops_msg), Recv, Recvv, Recvmsg, Send, Sendv, Sendmsg, Inject, Senddata, Injectdata};

// ---- fi_rma(3) ----

ssize_t Read(fid_ep* e, void* buf, size_t len, void* desc, fi_addr_t, uint64_t addr, uint64_t key, void* context) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_RDMA_READ, &iov, &desc, 1, From(e)->tx_op_flags, context, 0, addr, key);
}
ssize_t Readv(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t, uint64_t addr, uint64_t key,
              void* context) {
  return PostSend(From(e), IBV_WR_RDMA_READ, iov, desc, count, From(e)->tx_op_flags, context, 0, addr, key);
}
ssize_t Readmsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return -FI_EINVAL;
  return PostSend(From(e), IBV_WR_RDMA_READ, msg->msg_iov, msg->desc, msg->iov_count, flags, msg->context, 0,
                  msg->rma_iov[0].addr, msg->rma_iov[0].key);
}
ssize_t Write(fid_ep* e, const void* buf, size_t len, void* desc, fi_addr_t, uint64_t addr, uint64_t key,
              void* context) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_RDMA_WRITE, &iov, &desc, 1, From(e)->tx_op_flags, context, 0, addr, key);
}
ssize_t Writev(fid_ep* e, const iovec* iov, void** desc, size_t count, fi_addr_t, uint64_t addr, uint64_t key,
               void* context) {
  return PostSend(From(e), IBV_WR_RDMA_WRITE, iov, desc, count, From(e)->tx_op_flags, context, 0, addr, key);
}
ssize_t Writemsg(fid_ep* e, const fi_msg_rma* msg, uint64_t flags) {
  if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return -FI_EINVAL;
  const ibv_wr_opcode opcode = (flags & FI_REMOTE_CQ_DATA) ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  return PostSend(From(e), opcode, msg->msg_iov, msg->desc, msg->iov_count, flags, msg->context, msg->data,
                  msg->rma_iov[0].addr, msg->rma_iov[0].key);
}
ssize_t InjectWrite(fid_ep* e, const void* buf, size_t len, fi_addr_t, uint64_t addr, uint64_t key) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_RDMA_WRITE, &iov, nullptr, 1, kInjectCall, nullptr, 0, addr, key);
}
ssize_t Writedata(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t, uint64_t addr,
                  uint64_t key, void* context) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_RDMA_WRITE_WITH_IMM, &iov, &desc, 1, From(e)->tx_op_flags, context, data, addr,
                  key);
}
ssize_t InjectWritedata(fid_ep* e, const void* buf, size_t len, uint64_t data, fi_addr_t, uint64_t addr,
                        uint64_t key) {
  const iovec iov = Iov(buf, len);
  return PostSend(From(e), IBV_WR_RDMA_WRITE_WITH_IMM, &iov, nullptr, 1, kInjectCall, nullptr, data, addr, key);
}

fi_ops_rma kRmaOps = {sizeof(fi_ops_rma), Read,   Readv,       Readmsg,   Write,
                      Writev,             Writemsg, InjectWrite, Writedata, InjectWritedata};

// ---- fi_atomic(3): what RoCE has (IBTA 9.4.5): 64-bit fetch-and-add and
// compare-and-swap, one element, fetching. ----

bool Is64(fi_datatype datatype) { return datatype == FI_UINT64 || datatype == FI_INT64; }

ssize_t PostAtomic(Endpoint* ep, ibv_wr_opcode opcode, uint64_t operand, uint64_t swap, void* result,
                   void* result_desc, uint64_t addr, uint64_t key, uint64_t flags, void* context) {
  if (ep->qp == nullptr) return -FI_EOPBADSTATE;
  const auto* mr = static_cast<const MemoryRegion*>(result_desc);
  if (result == nullptr || mr == nullptr) return -FI_EINVAL;
  const bool signaled = Signaled(ep, flags);
  transport::SendWqe wqe;
  wqe.wr_id = SendWrId(signaled, context);
  wqe.opcode = opcode;
  wqe.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wqe.sge[0] = transport::Sge{reinterpret_cast<uintptr_t>(result), sizeof(uint64_t), mr->lkey};
  wqe.num_sge = 1;
  wqe.total_length = sizeof(uint64_t);
  wqe.remote_addr = addr;
  wqe.rkey = static_cast<uint32_t>(key);
  wqe.atomic.compare_add = operand;
  wqe.atomic.swap = swap;
  return MapPostError(ep, ep->domain->engine->PostSendWqe(ep->qp, &wqe));
}

ssize_t FetchAtomic(Endpoint* ep, const void* buf, size_t count, void* result, void* result_desc, uint64_t addr,
                    uint64_t key, fi_datatype datatype, fi_op op, uint64_t flags, void* context) {
  if (count != 1 || !Is64(datatype)) return -FI_EOPNOTSUPP;
  if (op == FI_ATOMIC_READ) {
    return PostAtomic(ep, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 0, result, result_desc, addr, key, flags, context);
  }
  if (op != FI_SUM || buf == nullptr) return op == FI_SUM ? -FI_EINVAL : -FI_EOPNOTSUPP;
  uint64_t operand = 0;
  std::memcpy(&operand, buf, sizeof(operand));
  return PostAtomic(ep, IBV_WR_ATOMIC_FETCH_AND_ADD, operand, 0, result, result_desc, addr, key, flags, context);
}

ssize_t CompareAtomic(Endpoint* ep, const void* buf, const void* compare, void* result, void* result_desc,
                      size_t count, uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op, uint64_t flags,
                      void* context) {
  if (count != 1 || !Is64(datatype) || op != FI_CSWAP) return -FI_EOPNOTSUPP;
  if (buf == nullptr || compare == nullptr) return -FI_EINVAL;
  uint64_t swap = 0, expected = 0;
  std::memcpy(&swap, buf, sizeof(swap));
  std::memcpy(&expected, compare, sizeof(expected));
  return PostAtomic(ep, IBV_WR_ATOMIC_CMP_AND_SWP, expected, swap, result, result_desc, addr, key, flags, context);
}

ssize_t AtomicReadwrite(fid_ep* e, const void* buf, size_t count, void*, void* result, void* result_desc, fi_addr_t,
                        uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op, void* context) {
  return FetchAtomic(From(e), buf, count, result, result_desc, addr, key, datatype, op, From(e)->tx_op_flags,
                     context);
}
ssize_t AtomicReadwritev(fid_ep* e, const fi_ioc* iov, void**, size_t count, fi_ioc* resultv, void** result_desc,
                         size_t result_count, fi_addr_t, uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op,
                         void* context) {
  if (count != 1 || result_count != 1 || iov == nullptr || resultv == nullptr || result_desc == nullptr) {
    return -FI_EINVAL;
  }
  return FetchAtomic(From(e), iov[0].addr, iov[0].count, resultv[0].addr, result_desc[0], addr, key, datatype, op,
                     From(e)->tx_op_flags, context);
}
ssize_t AtomicReadwritemsg(fid_ep* e, const fi_msg_atomic* msg, fi_ioc* resultv, void** result_desc,
                           size_t result_count, uint64_t flags) {
  if (msg == nullptr || msg->iov_count != 1 || msg->rma_iov_count != 1 || result_count != 1 || resultv == nullptr ||
      result_desc == nullptr) {
    return -FI_EINVAL;
  }
  return FetchAtomic(From(e), msg->msg_iov[0].addr, msg->msg_iov[0].count, resultv[0].addr, result_desc[0],
                     msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op, flags, msg->context);
}
ssize_t AtomicCompwrite(fid_ep* e, const void* buf, size_t count, void*, const void* compare, void*, void* result,
                        void* result_desc, fi_addr_t, uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op,
                        void* context) {
  return CompareAtomic(From(e), buf, compare, result, result_desc, count, addr, key, datatype, op,
                       From(e)->tx_op_flags, context);
}
ssize_t AtomicCompwritev(fid_ep* e, const fi_ioc* iov, void**, size_t count, const fi_ioc* comparev, void**,
                         size_t compare_count, fi_ioc* resultv, void** result_desc, size_t result_count, fi_addr_t,
                         uint64_t addr, uint64_t key, fi_datatype datatype, fi_op op, void* context) {
  if (count != 1 || compare_count != 1 || result_count != 1 || iov == nullptr || comparev == nullptr ||
      resultv == nullptr || result_desc == nullptr) {
    return -FI_EINVAL;
  }
  return CompareAtomic(From(e), iov[0].addr, comparev[0].addr, resultv[0].addr, result_desc[0], iov[0].count, addr,
                       key, datatype, op, From(e)->tx_op_flags, context);
}
ssize_t AtomicCompwritemsg(fid_ep* e, const fi_msg_atomic* msg, const fi_ioc* comparev, void**,
                           size_t compare_count, fi_ioc* resultv, void** result_desc, size_t result_count,
                           uint64_t flags) {
  if (msg == nullptr || msg->iov_count != 1 || msg->rma_iov_count != 1 || compare_count != 1 ||
      result_count != 1 || comparev == nullptr || resultv == nullptr || result_desc == nullptr) {
    return -FI_EINVAL;
  }
  return CompareAtomic(From(e), msg->msg_iov[0].addr, comparev[0].addr, resultv[0].addr, result_desc[0],
                       msg->msg_iov[0].count, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op,
                       flags, msg->context);
}
int AtomicWritevalid(fid_ep*, fi_datatype, fi_op, size_t*) {
  return -FI_EOPNOTSUPP;  // RoCE has no non-fetching atomics
}
int AtomicReadwritevalid(fid_ep*, fi_datatype datatype, fi_op op, size_t* count) {
  if (!Is64(datatype) || (op != FI_SUM && op != FI_ATOMIC_READ)) return -FI_EOPNOTSUPP;
  if (count != nullptr) *count = 1;
  return 0;
}
int AtomicCompwritevalid(fid_ep*, fi_datatype datatype, fi_op op, size_t* count) {
  if (!Is64(datatype) || op != FI_CSWAP) return -FI_EOPNOTSUPP;
  if (count != nullptr) *count = 1;
  return 0;
}

fi_ops_atomic kAtomicOps = {sizeof(fi_ops_atomic),
                            Enosys<decltype(fi_ops_atomic::write)>::Call,
                            Enosys<decltype(fi_ops_atomic::writev)>::Call,
                            Enosys<decltype(fi_ops_atomic::writemsg)>::Call,
                            Enosys<decltype(fi_ops_atomic::inject)>::Call,
                            AtomicReadwrite,
                            AtomicReadwritev,
                            AtomicReadwritemsg,
                            AtomicCompwrite,
                            AtomicCompwritev,
                            AtomicCompwritemsg,
                            AtomicWritevalid,
                            AtomicReadwritevalid,
                            AtomicCompwritevalid};

fi_ops_tagged kTaggedOps = {sizeof(fi_ops_tagged),
                            Enosys<decltype(fi_ops_tagged::recv)>::Call,
                            Enosys<decltype(fi_ops_tagged::recvv)>::Call,
                            Enosys<decltype(fi_ops_tagged::recvmsg)>::Call,
                            Enosys<decltype(fi_ops_tagged::send)>::Call,
                            Enosys<decltype(fi_ops_tagged::sendv)>::Call,
                            Enosys<decltype(fi_ops_tagged::sendmsg)>::Call,
                            Enosys<decltype(fi_ops_tagged::inject)>::Call,
                            Enosys<decltype(fi_ops_tagged::senddata)>::Call,
                            Enosys<decltype(fi_ops_tagged::injectdata)>::Call};

// ---- Control: bind, enable, close ----

int Enable(Endpoint* ep) {
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (ep->qp != nullptr) return 0;  // enabled already
  if (ep->eq == nullptr) return -FI_ENOEQ;  // FI_EP_MSG needs its EQ for connection events
  transport::Engine* engine = ep->domain->engine;
  auto send_cq = engine->CreateCq(ep->max_send_wr);
  if (!send_cq.ok()) return -FI_ENOMEM;
  auto recv_cq = engine->CreateCq(ep->max_recv_wr);
  if (!recv_cq.ok()) {
    (void)engine->DestroyCq(*send_cq);
    return -FI_ENOMEM;
  }
  transport::QpInitAttr init;
  init.type = IBV_QPT_RC;
  init.pd = ep->domain->pd;
  init.send_cq = *send_cq;
  init.recv_cq = *recv_cq;
  init.cap.max_send_wr = ep->max_send_wr;
  init.cap.max_recv_wr = ep->max_recv_wr;
  init.cap.max_send_sge = kIovLimit;
  init.cap.max_recv_sge = kIovLimit;
  init.cap.max_inline_data = kInjectSize;
  init.sq_sig_all = false;
  auto qp = engine->CreateQp(init);
  Status attached = engine->AttachCompletionSinks(*send_cq, ep->tx_cq, ep->tx_cntr);
  if (attached.ok()) attached = engine->AttachCompletionSinks(*recv_cq, ep->rx_cq, ep->rx_cntr);
  if (!qp.ok() || !attached.ok()) {
    UROCE_LOG(ERR, kApi, "fi_enable: %s\n", (qp.ok() ? attached : qp.status()).ToString().c_str());
    if (qp.ok()) (void)engine->DestroyQp(*qp);
    (void)engine->AttachCompletionSinks(*send_cq, nullptr, nullptr);
    (void)engine->AttachCompletionSinks(*recv_cq, nullptr, nullptr);
    (void)engine->DestroyCq(*send_cq);
    (void)engine->DestroyCq(*recv_cq);
    return -FI_ENOMEM;
  }
  // INIT now, so that receives may be posted before the connection is up
  // (IBTA 10.2.4.1: receives are accepted from INIT on). The connection
  // manager moves the QP on to RTR and RTS.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = kQpAccess;
  Status s = engine->ModifyQp(*qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (!s.ok()) {
    (void)engine->DestroyQp(*qp);
    (void)engine->AttachCompletionSinks(*send_cq, nullptr, nullptr);
    (void)engine->AttachCompletionSinks(*recv_cq, nullptr, nullptr);
    (void)engine->DestroyCq(*send_cq);
    (void)engine->DestroyCq(*recv_cq);
    return -FI_EINVAL;
  }
  ep->send_cq = *send_cq;
  ep->recv_cq = *recv_cq;
  ep->qp = *qp;
  // Attached to a daemon: once the connection manager connects it to a QP
  // of another process on the host, the daemon learns of it (PEER), and if
  // that process ends, the QP goes to the error state and the connection
  // ends with FI_SHUTDOWN at once (runtime/peer_watch.h).
  runtime::Process::Get().peers().Watch(runtime::WatchedQp{engine, *qp, ep->domain->endpoint_index});
  ep->state.store(EndpointState::kEnabled, std::memory_order_release);
  return 0;
}

int EndpointClose(fid* f) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  // No CM event reaches the endpoint after this (the service's lock).
  CmService::Get().Unregister(ep->registry_key);
  cm::ConnectionManager* cm = ep->domain->cm;
  {
    std::lock_guard<std::mutex> lock(ep->mutex);
    if (ep->has_connection) {
      const EndpointState state = ep->state.load();
      if (state != EndpointState::kShutdown) (void)cm->Disconnect(ep->connection);
      cm->Release(ep->connection);
      ep->has_connection = false;
    }
    if (ep->request != nullptr) {
      if (MarkAnswered(ep->request)) {
        (void)cm->Reject(ep->request->id, nullptr, 0);
        cm->Release(ep->request->id);
      }
      delete ep->request;
      ep->request = nullptr;
    }
  }
  transport::Engine* engine = ep->domain->engine;
  if (ep->qp != nullptr) {
    runtime::Process::Get().peers().Unwatch(ep->qp);
    (void)engine->DestroyQp(ep->qp);
  }
  for (transport::CompletionQueue* cq : {ep->send_cq, ep->recv_cq}) {
    if (cq == nullptr) continue;
    (void)engine->AttachCompletionSinks(cq, nullptr, nullptr);
    (void)engine->DestroyCq(cq);
  }
  // The engine pushes to the cq layer's objects no more: unbind them.
  if (ep->tx_cq != nullptr) ep->tx_cq->bindings().Remove();
  if (ep->rx_cq != nullptr) ep->rx_cq->bindings().Remove();
  if (ep->tx_cntr != nullptr) ep->tx_cntr->bindings().Remove();
  if (ep->rx_cntr != nullptr) ep->rx_cntr->bindings().Remove();
  if (ep->eq != nullptr) {
    // Events still queued for this endpoint name it; the application may
    // free what its context points to once fi_close returns.
    ep->eq->DropEventsFor(&ep->ep.fid);
    ep->eq->bindings().Remove();
  }
  ep->domain->open_objects.fetch_sub(1);
  FreeInfo(ep->info);
  delete ep;
  return 0;
}

int EndpointBind(fid* f, fid* bfid, uint64_t flags) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  if (bfid == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (ep->qp != nullptr) return -FI_EOPBADSTATE;  // bind before fi_enable
  switch (bfid->fclass) {
    case FI_CLASS_CQ: {
      cq::FabricCq* cq = cq::FabricCq::FromFid(bfid);
      if (cq == nullptr) return -FI_EINVAL;
      if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EBADFLAGS;
      if ((flags & FI_TRANSMIT) && ep->tx_cq != nullptr) return -FI_EINVAL;
      if ((flags & FI_RECV) && ep->rx_cq != nullptr) return -FI_EINVAL;
      if (flags & FI_TRANSMIT) {
        ep->tx_cq = cq;
        ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        cq->bindings().Add();
      }
      if (flags & FI_RECV) {
        ep->rx_cq = cq;
        ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        cq->bindings().Add();
      }
      return 0;
    }
    case FI_CLASS_CNTR: {
      // One counter per direction: the engine's send CQ feeds the transmit
      // counter (sends, writes, reads, atomics), its receive CQ the receive
      // counter. Remote writes without immediate data complete nothing in
      // RoCE, so FI_REMOTE_WRITE / FI_REMOTE_READ cannot be counted.
      cq::Counter* cntr = cq::Counter::FromFid(bfid);
      if (cntr == nullptr) return -FI_EINVAL;
      if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) return -FI_EOPNOTSUPP;
      const bool tx = (flags & (FI_SEND | FI_WRITE | FI_READ | FI_TRANSMIT)) != 0;
      const bool rx = (flags & FI_RECV) != 0;
      if (!tx && !rx) return -FI_EBADFLAGS;
      if ((tx && ep->tx_cntr != nullptr) || (rx && ep->rx_cntr != nullptr)) return -FI_EINVAL;
      if (tx) {
        ep->tx_cntr = cntr;
        cntr->bindings().Add();
      }
      if (rx) {
        ep->rx_cntr = cntr;
        cntr->bindings().Add();
      }
      return 0;
    }
    case FI_CLASS_EQ: {
      cq::EventQueue* eq = cq::EventQueue::FromFid(bfid);
      if (eq == nullptr || ep->eq != nullptr) return -FI_EINVAL;
      ep->eq = eq;
      eq->bindings().Add();
      return 0;
    }
    default:
      return -FI_EINVAL;
  }
}

int EndpointControl(fid* f, int command, void* arg) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  switch (command) {
    case FI_ENABLE:
      return Enable(ep);
    case FI_GETOPSFLAG: {
      if (arg == nullptr) return -FI_EINVAL;
      auto* flags = static_cast<uint64_t*>(arg);
      *flags = (*flags & FI_RECV) ? ep->rx_op_flags : ep->tx_op_flags;
      return 0;
    }
    case FI_SETOPSFLAG: {
      if (arg == nullptr) return -FI_EINVAL;
      const uint64_t flags = *static_cast<uint64_t*>(arg);
      if (flags & FI_RECV) {
        ep->rx_op_flags = flags & ~(FI_RECV | FI_TRANSMIT);
      } else {
        ep->tx_op_flags = flags & ~(FI_RECV | FI_TRANSMIT);
      }
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

fi_ops kEndpointOps = {sizeof(fi_ops),
                       EndpointClose,
                       EndpointBind,
                       EndpointControl,
                       Enosys<decltype(fi_ops::ops_open)>::Call,
                       Enosys<decltype(fi_ops::tostr)>::Call,
                       Enosys<decltype(fi_ops::ops_set)>::Call};

// No option can be set (FI_OPT_MIN_MULTI_RECV, FI_OPT_CM_DATA_SIZE, ... are
// fixed or not offered).
int EndpointSetopt(fid*, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }

fi_ops_ep kEndpointEpOps = {sizeof(fi_ops_ep),
                            Enosys<decltype(fi_ops_ep::cancel)>::Call,
                            EndpointGetopt,
                            EndpointSetopt,
                            Enosys<decltype(fi_ops_ep::tx_ctx)>::Call,
                            Enosys<decltype(fi_ops_ep::rx_ctx)>::Call,
                            Enosys<decltype(fi_ops_ep::rx_size_left)>::Call,
                            Enosys<decltype(fi_ops_ep::tx_size_left)>::Call};

// ---- fi_cm(3) ----

int Setname(fid* f, void* addr, size_t addrlen) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  const size_t len = SockaddrLength(static_cast<sockaddr*>(addr));
  if (addr == nullptr || len == 0 || addrlen < len) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (ep->has_connection) return -FI_EOPBADSTATE;
  std::memcpy(&ep->local, addr, len);
  return 0;
}

int Getname(fid* f, void* addr, size_t* addrlen) {
  Endpoint* ep = reinterpret_cast<Endpoint*>(f);
  std::lock_guard<std::mutex> lock(ep->mutex);
  return CopySockaddr(ep->local, addr, addrlen);
}

int Getpeer(fid_ep* e, void* addr, size_t* addrlen) {
  Endpoint* ep = From(e);
  std::lock_guard<std::mutex> lock(ep->mutex);
  return CopySockaddr(ep->peer, addr, addrlen);
}

cm::CmQpParams QpParams(Endpoint* ep) {
  cm::CmQpParams p;
  p.qp = ep->qp;
  p.access_flags = kQpAccess;
  // Longer than the 17 libfabric's verbs provider gets from the kernel's
  // rdma_cm on RoCE: cm::kLibraryLocalAckTimeout says why.
  p.local_ack_timeout = cm::kLibraryLocalAckTimeout;
  return p;
}

int Connect(fid_ep* e, const void* addr, const void* param, size_t paramlen) {
  Endpoint* ep = From(e);
  if (paramlen > kCmConnectDataSize || (paramlen != 0 && param == nullptr)) return -FI_EINVAL;
  if (int r = Enable(ep); r != 0) return r;
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (ep->has_connection || ep->request != nullptr || ep->resolving) return -FI_EOPBADSTATE;
  const sockaddr* dest = static_cast<const sockaddr*>(addr);
  if (dest == nullptr) dest = static_cast<const sockaddr*>(ep->info->dest_addr);
  cm::CmConnectParams params;
  static_cast<cm::CmQpParams&>(params) = QpParams(ep);
  if (dest == nullptr || !SockaddrToGid(dest, &params.remote.gid, &params.remote.port)) return -FI_EINVAL;
  transport::Gid local_gid{};
  // The endpoint's own address (its info's src_addr) when it is one of the
  // port's of the peer's IP version; else the connection manager picks.
  if (SockaddrToGid(reinterpret_cast<const sockaddr*>(&ep->local), &local_gid, &params.local_port) &&
      !cm::IsWildcardSockaddr(reinterpret_cast<const sockaddr*>(&ep->local)) &&
      transport::IsIpv4MappedGid(local_gid) == transport::IsIpv4MappedGid(params.remote.gid)) {
    params.local_gid = local_gid;
  }
  // With its length in front (cm_data.h): the listener's FI_CONNREQ carries
  // exactly these bytes.
  params.private_data = PackCmData(param, paramlen);
  size_t len = 0;
  // fi_connect(3) is asynchronous: its result comes as an EQ event. A peer
  // the neighbour table lacks is resolved (ARP/ND, seconds if nobody
  // answers) on the CM service's thread, never in the caller's progress.
  transport::MacAddress mac;
  if (!ep->domain->engine->LookupNeighbor(params.remote.gid, &mac)) {
    GidToSockaddr(params.remote.gid, params.remote.port, &ep->peer, &len);
    ep->resolving = true;
    ep->state.store(EndpointState::kConnecting, std::memory_order_release);
    CmService::Get().ResolveThenConnect(ep->registry_key, ep->domain->engine, ep->domain->pd, ep->domain->cm,
                                        params);
    return 0;
  }
  params.has_remote_mac = true;
  params.remote_mac = mac;
  auto id = ep->domain->cm->Connect(params, ep->registry_key);
  if (!id.ok()) return id.status().code() == StatusCode::kNotFound ? -FI_EADDRNOTAVAIL : -FI_EINVAL;
  GidToSockaddr(params.remote.gid, params.remote.port, &ep->peer, &len);
  ep->connection = *id;
  ep->has_connection = true;
  ep->state.store(EndpointState::kConnecting, std::memory_order_release);
  return 0;
}

int Accept(fid_ep* e, const void* param, size_t paramlen) {
  Endpoint* ep = From(e);
  if (paramlen > kCmAcceptDataSize || (paramlen != 0 && param == nullptr)) return -FI_EINVAL;
  if (int r = Enable(ep); r != 0) return r;
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (ep->request == nullptr || ep->has_connection) return -FI_EOPBADSTATE;
  if (!MarkAnswered(ep->request)) return -FI_EOPBADSTATE;
  cm::CmAcceptParams params;
  static_cast<cm::CmQpParams&>(params) = QpParams(ep);
  // The caller's FI_CONNECTED carries exactly these bytes (cm_data.h).
  params.private_data = PackCmData(param, paramlen);
  Status s = ep->domain->cm->Accept(ep->request->id, params, ep->registry_key);
  if (!s.ok()) return -FI_ECONNABORTED;
  ep->connection = ep->request->id;
  ep->has_connection = true;
  ep->state.store(EndpointState::kAccepting, std::memory_order_release);
  return 0;
}

int Shutdown(fid_ep* e, uint64_t) {
  Endpoint* ep = From(e);
  std::lock_guard<std::mutex> lock(ep->mutex);
  if (!ep->has_connection) return -FI_ENOTCONN;
  if (ep->state.load() == EndpointState::kShutdown) return 0;
  Status s = ep->domain->cm->Disconnect(ep->connection);
  return s.ok() ? 0 : -FI_EINVAL;
}

fi_ops_cm kCmOps = {sizeof(fi_ops_cm),
                    Setname,
                    Getname,
                    Getpeer,
                    Connect,
                    Enosys<decltype(fi_ops_cm::listen)>::Call,
                    Accept,
                    Enosys<decltype(fi_ops_cm::reject)>::Call,
                    Shutdown,
                    Enosys<decltype(fi_ops_cm::join)>::Call};

}  // namespace

int EndpointGetopt(fid*, int level, int optname, void* optval, size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_CM_DATA_SIZE) {
    // The most connection data fi_connect carries: a REQ's private data less
    // the IP CM header (cm::kCmReqUserDataSize) and our length byte
    // (cm_data.h). fi_accept and fi_reject may carry more; this is the
    // bound every call meets.
    if (optval == nullptr || optlen == nullptr || *optlen < sizeof(size_t)) return -FI_ETOOSMALL;
    *static_cast<size_t*>(optval) = kCmConnectDataSize;
    *optlen = sizeof(size_t);
    return 0;
  }
  return -FI_ENOPROTOOPT;
}

int EndpointOpen(fid_domain* d, fi_info* info, fid_ep** out, void* context) {
  if (info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG && info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  // info->handle (fi_endpoint(3)): an FI_CONNREQ's request, for the passive
  // side; or a passive endpoint whose address this endpoint takes over, for
  // a server that connects out from the address it listened on (fabtests'
  // fi_msg_sockets-style servers). A listening one keeps its address.
  PassiveEndpoint* taken_over = nullptr;
  if (info->handle != nullptr) {
    if (info->handle->fclass == FI_CLASS_PEP) {
      taken_over = reinterpret_cast<PassiveEndpoint*>(info->handle);
      if (taken_over->listening) return -FI_EBUSY;
    } else if (info->handle->fclass != FI_CLASS_CONNREQ) {
      return -FI_EINVAL;
    }
  }
  Domain* domain = reinterpret_cast<Domain*>(d);
  auto* ep = new Endpoint();
  ep->ep.fid.fclass = FI_CLASS_EP;
  ep->ep.fid.context = context;
  ep->ep.fid.ops = &kEndpointOps;
  ep->ep.ops = &kEndpointEpOps;
  ep->ep.cm = &kCmOps;
  ep->ep.msg = &kMsgOps;
  ep->ep.rma = &kRmaOps;
  ep->ep.tagged = &kTaggedOps;
  ep->ep.atomic = &kAtomicOps;
  ep->ep.collective = nullptr;
  ep->domain = domain;
  ep->info = DupInfo(info);
  if (ep->info == nullptr) {
    delete ep;
    return -FI_ENOMEM;
  }
  ep->info->handle = nullptr;
  ep->max_send_wr = static_cast<uint32_t>(
      std::min<size_t>(info->tx_attr != nullptr && info->tx_attr->size != 0 ? info->tx_attr->size : kQueueSize,
                       kMaxQueueSize));
  ep->max_recv_wr = static_cast<uint32_t>(
      std::min<size_t>(info->rx_attr != nullptr && info->rx_attr->size != 0 ? info->rx_attr->size : kQueueSize,
                       kMaxQueueSize));
  ep->tx_op_flags = info->tx_attr != nullptr ? info->tx_attr->op_flags : 0;
  ep->rx_op_flags = info->rx_attr != nullptr ? info->rx_attr->op_flags : 0;
  if (info->src_addr != nullptr && SockaddrLength(static_cast<sockaddr*>(info->src_addr)) != 0) {
    std::memcpy(&ep->local, info->src_addr, SockaddrLength(static_cast<sockaddr*>(info->src_addr)));
  }
  if (info->dest_addr != nullptr && SockaddrLength(static_cast<sockaddr*>(info->dest_addr)) != 0) {
    std::memcpy(&ep->peer, info->dest_addr, SockaddrLength(static_cast<sockaddr*>(info->dest_addr)));
  }
  if (taken_over != nullptr) {
    const size_t len = SockaddrLength(reinterpret_cast<const sockaddr*>(&taken_over->local));
    if (len != 0) std::memcpy(&ep->local, &taken_over->local, len);
  } else if (info->handle != nullptr) {
    ep->request = reinterpret_cast<ConnectionRequest*>(info->handle);
  }
  ep->registry_key = CmService::Get().Register(ep);
  domain->open_objects.fetch_add(1);
  *out = &ep->ep;
  return 0;
}

}  // namespace uroce::fabric
