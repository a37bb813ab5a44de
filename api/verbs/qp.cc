// Queue pairs: ibv_create_qp(3), ibv_create_qp_ex(3), ibv_modify_qp(3),
// ibv_query_qp(3), ibv_destroy_qp(3), ibv_post_send(3) and ibv_post_recv(3)
// (context->ops), and the extended post interface of ibv_wr_post(3)
// (ibv_qp_to_qp_ex, ibv_wr_start ... ibv_wr_complete).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/registry.h"

using uroce::verbs::Context;
using uroce::verbs::Cq;
using uroce::verbs::Registry;
using uroce::verbs::Qp;
using uroce::verbs::Srq;

namespace uroce::verbs {
namespace {

// ---- ibv_wr_post(3): requests gathered between wr_start and wr_complete ----

Qp* FromEx(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }

ibv_send_wr& NewWr(ibv_qp_ex* q, ibv_wr_opcode opcode) {
  Qp* qp = FromEx(q);
  if (qp->wr_count == qp->wr_list.size()) {
    qp->wr_list.emplace_back();
    qp->wr_sge_lists.emplace_back();
    qp->wr_inline.emplace_back();
  }
  const size_t i = qp->wr_count++;
  qp->wr_sge_lists[i].clear();  // keeps its capacity
  qp->wr_inline[i].clear();
  ibv_send_wr& wr = qp->wr_list[i];
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = q->wr_id;
  wr.send_flags = q->wr_flags;
  wr.opcode = opcode;
  return wr;
}

ibv_send_wr* LastWr(ibv_qp_ex* q) {
  Qp* qp = FromEx(q);
  if (qp->wr_count == 0) {
    qp->wr_error = EINVAL;  // a setter before any operation
    return nullptr;
  }
  return &qp->wr_list[qp->wr_count - 1];
}

void WrStart(ibv_qp_ex* q) {
  Qp* qp = FromEx(q);
  qp->wr_count = 0;
  qp->wr_error = 0;
}

void WrSend(ibv_qp_ex* q) { NewWr(q, IBV_WR_SEND); }
void WrSendImm(ibv_qp_ex* q, __be32 imm) { NewWr(q, IBV_WR_SEND_WITH_IMM).imm_data = imm; }
void WrSendInv(ibv_qp_ex* q, uint32_t rkey) { NewWr(q, IBV_WR_SEND_WITH_INV).invalidate_rkey = rkey; }
void WrRdmaWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  ibv_send_wr& wr = NewWr(q, IBV_WR_RDMA_WRITE);
  wr.wr.rdma.rkey = rkey;
  wr.wr.rdma.remote_addr = addr;
}
void WrRdmaWriteImm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
  ibv_send_wr& wr = NewWr(q, IBV_WR_RDMA_WRITE_WITH_IMM);
  wr.wr.rdma.rkey = rkey;
  wr.wr.rdma.remote_addr = addr;
  wr.imm_data = imm;
}
void WrRdmaRead(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  ibv_send_wr& wr = NewWr(q, IBV_WR_RDMA_READ);
  wr.wr.rdma.rkey = rkey;
  wr.wr.rdma.remote_addr = addr;
}
void WrCmpSwp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  ibv_send_wr& wr = NewWr(q, IBV_WR_ATOMIC_CMP_AND_SWP);
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.remote_addr = addr;
  wr.wr.atomic.compare_add = compare;
  wr.wr.atomic.swap = swap;
}
void WrFetchAdd(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  ibv_send_wr& wr = NewWr(q, IBV_WR_ATOMIC_FETCH_AND_ADD);
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.remote_addr = addr;
  wr.wr.atomic.compare_add = add;
}
// ibv_wr_bind_mw(3) (type 2: the consumer picks the new rkey) and
// ibv_wr_local_inv(3): the engine carries them out in order.
void WrBindMw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (mw == nullptr || info == nullptr) {
    FromEx(q)->wr_error = EINVAL;
    return;
  }
  ibv_send_wr& wr = NewWr(q, IBV_WR_BIND_MW);
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = *info;
}
void WrLocalInv(ibv_qp_ex* q, uint32_t rkey) { NewWr(q, IBV_WR_LOCAL_INV).invalidate_rkey = rkey; }
void WrUnsupportedTso(ibv_qp_ex* q, void*, uint16_t, uint16_t) { FromEx(q)->wr_error = EOPNOTSUPP; }
// ibv_wr_set_xrc_srqn(3): the remote XRC SRQ of an XRC initiator's request.
void WrSetXrcSrqn(ibv_qp_ex* q, uint32_t remote_srqn) {
  ibv_send_wr* wr = LastWr(q);
  if (wr == nullptr) return;
  wr->qp_type.xrc.remote_srqn = remote_srqn;
}
// ibv_wr_atomic_write(3) (IBTA 1.5 ATOMIC WRITE): the 8 bytes at
// `atomic_wire` are taken now, as inline data, so no SGE follows.
void WrAtomicWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* atomic_wire) {
  if (atomic_wire == nullptr) {
    FromEx(q)->wr_error = EINVAL;
    return;
  }
  ibv_send_wr& wr = NewWr(q, IBV_WR_ATOMIC_WRITE);
  wr.wr.rdma.rkey = rkey;
  wr.wr.rdma.remote_addr = addr;
  wr.send_flags |= IBV_SEND_INLINE;
  Qp* qp = FromEx(q);
  const auto* p = static_cast<const uint8_t*>(atomic_wire);
  qp->wr_inline[qp->wr_count - 1].assign(p, p + 8);
}

void WrSetUdAddr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  ibv_send_wr* wr = LastWr(q);
  if (wr == nullptr) return;
  wr->wr.ud.ah = ah;
  wr->wr.ud.remote_qpn = remote_qpn;
  wr->wr.ud.remote_qkey = remote_qkey;
}
void WrSetSge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  if (LastWr(q) == nullptr) return;
  Qp* qp = FromEx(q);
  qp->wr_sge_lists[qp->wr_count - 1].assign(1, ibv_sge{addr, length, lkey});
}
void WrSetSgeList(ibv_qp_ex* q, size_t n, const ibv_sge* list) {
  if (LastWr(q) == nullptr) return;
  Qp* qp = FromEx(q);
  qp->wr_sge_lists[qp->wr_count - 1].assign(list, list + n);
}
void WrSetInline(ibv_qp_ex* q, void* addr, size_t length) {
  ibv_send_wr* wr = LastWr(q);
  if (wr == nullptr) return;
  wr->send_flags |= IBV_SEND_INLINE;
  const auto* p = static_cast<const uint8_t*>(addr);
  Qp* qp = FromEx(q);
  qp->wr_inline[qp->wr_count - 1].assign(p, p + length);
}
void WrSetInlineList(ibv_qp_ex* q, size_t n, const ibv_data_buf* bufs) {
  ibv_send_wr* wr = LastWr(q);
  if (wr == nullptr) return;
  wr->send_flags |= IBV_SEND_INLINE;
  Qp* qp = FromEx(q);
  auto& data = qp->wr_inline[qp->wr_count - 1];
  data.clear();
  for (size_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const uint8_t*>(bufs[i].addr);
    data.insert(data.end(), p, p + bufs[i].length);
  }
}

// Posts the gathered chain. On error nothing after the failing request is
// posted (ibv_wr_post(3): the error of the first failure).
int WrComplete(ibv_qp_ex* q) {
  Qp* qp = FromEx(q);
  if (qp->wr_error != 0) {
    WrStart(q);
    return EINVAL == qp->wr_error ? EINVAL : qp->wr_error;
  }
  const size_t n = qp->wr_count;
  if (n == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    ibv_send_wr& wr = qp->wr_list[i];
    wr.next = i + 1 < n ? &qp->wr_list[i + 1] : nullptr;
    if (wr.send_flags & IBV_SEND_INLINE) {
      auto& data = qp->wr_inline[i];
      qp->wr_sge_lists[i].assign(1, ibv_sge{reinterpret_cast<uintptr_t>(data.data()),
                                            static_cast<uint32_t>(data.size()), 0});
    }
    wr.sg_list = qp->wr_sge_lists[i].data();
    wr.num_sge = static_cast<int>(qp->wr_sge_lists[i].size());
  }
  const ibv_send_wr* bad = nullptr;
  const int rc = qp->context->engine->PostSend(qp->engine_qp, qp->wr_list.data(), &bad);
  WrStart(q);
  return rc;
}

void WrAbort(ibv_qp_ex* q) { WrStart(q); }

// The IBV_QP_EX_WITH_* operations uroce carries out.
constexpr uint64_t kSupportedSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                       IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW |
                                       IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_ATOMIC_WRITE;

void FillQpEx(ibv_qp_ex* q) {
  q->wr_atomic_cmp_swp = WrCmpSwp;
  q->wr_atomic_fetch_add = WrFetchAdd;
  q->wr_bind_mw = WrBindMw;
  q->wr_local_inv = WrLocalInv;
  q->wr_rdma_read = WrRdmaRead;
  q->wr_rdma_write = WrRdmaWrite;
  q->wr_rdma_write_imm = WrRdmaWriteImm;
  q->wr_send = WrSend;
  q->wr_send_imm = WrSendImm;
  q->wr_send_inv = WrSendInv;
  q->wr_send_tso = WrUnsupportedTso;
  q->wr_set_ud_addr = WrSetUdAddr;
  q->wr_set_xrc_srqn = WrSetXrcSrqn;
  q->wr_set_inline_data = WrSetInline;
  q->wr_set_inline_data_list = WrSetInlineList;
  q->wr_set_sge = WrSetSge;
  q->wr_set_sge_list = WrSetSgeList;
  q->wr_start = WrStart;
  q->wr_complete = WrComplete;
  q->wr_abort = WrAbort;
  q->wr_atomic_write = WrAtomicWrite;
}

// `xrcd`: an XRC target QP's domain (IBV_QPT_XRC_RECV), which has no PD,
// CQs or SRQ.
ibv_qp* CreateQp(ibv_context* context, ibv_pd* pd, const ibv_qp_init_attr& attr, bool extended,
                 ibv_xrcd* xrcd = nullptr) {
  const bool xrc_send = attr.qp_type == IBV_QPT_XRC_SEND;
  const bool xrc_recv = attr.qp_type == IBV_QPT_XRC_RECV;
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD && !xrc_send &&
      !xrc_recv) {
    errno = EOPNOTSUPP;  // raw packet, driver QPs
    return nullptr;
  }
  if (xrc_recv ? (xrcd == nullptr || xrcd->context != context)
               : (pd == nullptr || attr.send_cq == nullptr || (attr.recv_cq == nullptr && !xrc_send))) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::From(context);
  transport::QpInitAttr init;
  init.type = attr.qp_type;
  init.cap = attr.cap;
  if (init.cap.max_send_wr == 0) init.cap.max_send_wr = 1;  // a receive-only QP still has a send queue
  if (xrc_recv) {
    // IBTA annex A14, XRC: the target's receives come from the XRC SRQs of its
    // domain, complete on their CQs, and are checked in their PDs.
    init.xrcd = Xrcd::From(xrcd)->engine_xrcd;
    init.cap.max_recv_wr = 0;
    init.cap.max_send_sge = 0;
    init.cap.max_inline_data = 0;
  } else {
    init.pd = pd->handle;
    init.allocator = RingAllocatorOf(pd, kResourceTypeQp);  // a parent domain's, if it has them
    init.send_cq = Cq::From(attr.send_cq)->engine_cq;
    // An XRC initiator receives nothing: its receive CQ, if any, stays unused.
    init.recv_cq = attr.recv_cq != nullptr ? Cq::From(attr.recv_cq)->engine_cq : init.send_cq;
    init.srq = attr.srq != nullptr && !xrc_send ? Srq::From(attr.srq)->engine_srq : nullptr;
    if (init.srq != nullptr || xrc_send) init.cap.max_recv_wr = 0;
  }
  init.sq_sig_all = attr.sq_sig_all != 0;
  auto engine_qp = ctx->engine->CreateQp(init);
  if (!engine_qp.ok()) {
    errno = engine_qp.status().ToErrno();
    return nullptr;
  }
  auto* qp = new (std::nothrow) Qp();
  if (qp == nullptr) {
    (void)ctx->engine->DestroyQp(*engine_qp);
    errno = ENOMEM;
    return nullptr;
  }
  std::memset(&qp->qpx, 0, sizeof(qp->qpx));
  qp->context = ctx;
  qp->engine_qp = *engine_qp;
  qp->sq_sig_all = init.sq_sig_all;
  ibv_qp* q = qp->ibv();
  q->context = context;
  q->qp_context = attr.qp_context;
  q->pd = xrc_recv ? nullptr : pd;
  q->send_cq = xrc_recv ? nullptr : attr.send_cq;
  q->recv_cq = xrc_recv ? nullptr : attr.recv_cq;
  q->srq = xrc_recv || xrc_send ? nullptr : attr.srq;
  q->handle = (*engine_qp)->qpn;
  q->qp_num = (*engine_qp)->qpn;
  q->state = IBV_QPS_RESET;
  q->qp_type = attr.qp_type;
  pthread_mutex_init(&q->mutex, nullptr);
  pthread_cond_init(&q->cond, nullptr);
  if (extended) FillQpEx(&qp->qpx);
  Registry::Get().RegisterQp(qp);
  return q;
}

}  // namespace

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* q = Qp::From(qp);
  const ibv_send_wr* bad = nullptr;
  const int rc = q->context->engine->PostSend(q->engine_qp, wr, &bad);
  if (rc != 0 && bad_wr != nullptr) *bad_wr = const_cast<ibv_send_wr*>(bad);
  return rc;
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* q = Qp::From(qp);
  const ibv_recv_wr* bad = nullptr;
  const int rc = q->context->engine->PostRecv(q->engine_qp, wr, &bad);
  if (rc != 0 && bad_wr != nullptr) *bad_wr = const_cast<ibv_recv_wr*>(bad);
  return rc;
}

// ibv_create_qp_ex(3): a PD, for the extended post interface
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS with operations uroce carries out, and
// IBV_QP_INIT_ATTR_CREATE_FLAGS only with no flag set.
ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                         IBV_QP_INIT_ATTR_XRCD;
  // An XRC target QP is made in an XRC domain, every other one in a PD.
  const bool xrc_recv = attr->qp_type == IBV_QPT_XRC_RECV;
  const uint32_t needed = xrc_recv ? IBV_QP_INIT_ATTR_XRCD : IBV_QP_INIT_ATTR_PD;
  if ((attr->comp_mask & ~known) != 0 || !(attr->comp_mask & needed)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (xrc_recv && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
    errno = EINVAL;  // it has no send queue to post to
    return nullptr;
  }
  // IBV_QP_INIT_ATTR_CREATE_FLAGS with no flag asks for nothing (UCX sets
  // the mask with flags 0); none of the flags is offered.
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool extended = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (extended && (attr->send_ops_flags & ~kSupportedSendOps) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp_init_attr base;
  std::memset(&base, 0, sizeof(base));
  base.qp_context = attr->qp_context;
  base.send_cq = attr->send_cq;
  base.recv_cq = attr->recv_cq;
  base.srq = attr->srq;
  base.cap = attr->cap;
  base.qp_type = attr->qp_type;
  base.sq_sig_all = attr->sq_sig_all;
  ibv_qp* qp = CreateQp(context, xrc_recv ? nullptr : attr->pd, base, extended, xrc_recv ? attr->xrcd : nullptr);
  if (qp != nullptr) {
    ibv_qp_attr qattr;
    ibv_qp_init_attr qinit;
    if (ibv_query_qp(qp, &qattr, IBV_QP_CAP, &qinit) == 0) attr->cap = qinit.cap;
  }
  return qp;
}

}  // namespace uroce::verbs

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp* qp = uroce::verbs::CreateQp(pd->context, pd, *attr, false);
  if (qp != nullptr) {
    // ibv_create_qp(3): the capabilities actually granted go back in attr.
    ibv_qp_attr qattr;
    ibv_qp_init_attr qinit;
    if (ibv_query_qp(qp, &qattr, IBV_QP_CAP, &qinit) == 0) attr->cap = qinit.cap;
  }
  return qp;
}

// ibv_qp_to_qp_ex(3): only for QPs created with the extended post interface.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  Qp* q = Qp::From(qp);
  if (q->qpx.wr_start == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return &q->qpx;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  Qp* q = Qp::From(qp);
  uroce::Status s = q->context->engine->ModifyQp(q->engine_qp, *attr, attr_mask);
  if (!s.ok()) return s.ToErrno();
  if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
  // Attached to a daemon: it learns the connection (control path only).
  Registry::Get().NoteQpModified(q, *attr, attr_mask);
  return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  Qp* q = Qp::From(qp);
  uroce::Status s = q->context->engine->QueryQp(q->engine_qp, attr, init_attr);
  if (!s.ok()) return s.ToErrno();
  if (init_attr != nullptr) {
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
  }
  if (attr != nullptr) qp->state = attr->qp_state;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  Qp* q = Qp::From(qp);
  // First: the progress thread must not look at a QP the engine destroys.
  Registry::Get().ForgetQp(q);
  uroce::Status s = q->context->engine->DestroyQp(q->engine_qp);
  if (!s.ok()) return s.ToErrno();
  Registry::Get().UnregisterQp(q);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  delete q;
  return 0;
}

// Multicast is not offered (UD multicast groups need a subnet manager's or
// IGMP's view uroce does not have).
int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }

// Enhanced connection establishment: nothing to negotiate.
int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

// ibv_query_qp_data_in_order(3): 0 says "no in-order guarantee" to rely on.
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

}  // extern "C"
