// Shared receive queues: ibv_create_srq(3), ibv_modify_srq(3),
// ibv_query_srq(3), ibv_destroy_srq(3), ibv_post_srq_recv(3)
// (context->ops.post_srq_recv). The limit event (IBV_EVENT_SRQ_LIMIT_REACHED)
// arrives through ibv_get_async_event(3).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/registry.h"

using uroce::verbs::Context;
using uroce::verbs::Registry;
using uroce::verbs::Srq;

namespace uroce::verbs {

// ibv_device_attr.max_srq_wr (context.cc), Engine::CreateSrq's bound.
constexpr uint32_t kMaxSrqWr = 16384;

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* s = Srq::From(srq);
  const ibv_recv_wr* bad = nullptr;
  const int rc = s->context->engine->PostSrqRecv(s->engine_srq, wr, &bad);
  if (rc != 0 && bad_wr != nullptr) *bad_wr = const_cast<ibv_recv_wr*>(bad);
  return rc;
}

// `xrcd` and `cq`: an XRC SRQ (IBV_SRQT_XRC) of that domain, completing on
// that CQ; both null for a basic SRQ.
ibv_srq* CreateSrq(ibv_pd* pd, void* srq_context, ibv_srq_attr* attr, ibv_xrcd* xrcd = nullptr,
                   ibv_cq* cq = nullptr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::From(pd->context);
  auto engine_srq =
      xrcd != nullptr
          ? ctx->engine->CreateXrcSrq(pd->handle, Xrcd::From(xrcd)->engine_xrcd, Cq::From(cq)->engine_cq,
                                      attr->max_wr, attr->max_sge, attr->srq_limit,
                                      RingAllocatorOf(pd, kResourceTypeSrq))
          : ctx->engine->CreateSrq(pd->handle, attr->max_wr, attr->max_sge, attr->srq_limit,
                                   RingAllocatorOf(pd, kResourceTypeSrq));
  if (!engine_srq.ok()) {
    errno = engine_srq.status().ToErrno();
    return nullptr;
  }
  auto* s = new (std::nothrow) Srq();
  if (s == nullptr) {
    (void)ctx->engine->DestroySrq(*engine_srq);
    errno = ENOMEM;
    return nullptr;
  }
  s->context = ctx;
  s->engine_srq = *engine_srq;
  s->max_wr = (*engine_srq)->max_wr;
  s->max_sge = (*engine_srq)->max_sge;
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  ibv_srq* out = &s->srq;
  out->context = pd->context;
  out->srq_context = srq_context;
  out->pd = pd;
  out->handle = 0;
  pthread_mutex_init(&out->mutex, nullptr);
  pthread_cond_init(&out->cond, nullptr);
  Registry::Get().RegisterSrq(s);
  return out;
}

// ibv_create_srq_ex(3): basic SRQs, and XRC SRQs (IBV_SRQT_XRC: a PD, an
// XRC domain and the CQ their receives complete on); no tag matching.
ibv_srq* CreateSrqEx(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t known = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  const bool typed = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0;
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  if ((attr->comp_mask & ~known) != 0 || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
      (typed && attr->srq_type != IBV_SRQT_BASIC && !xrc)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!xrc) return CreateSrq(attr->pd, attr->srq_context, &attr->attr);
  const uint32_t xrc_needs = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  if ((attr->comp_mask & xrc_needs) != xrc_needs || attr->xrcd == nullptr || attr->cq == nullptr ||
      attr->pd == nullptr || attr->xrcd->context != context || attr->cq->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq* srq = CreateSrq(attr->pd, attr->srq_context, &attr->attr, attr->xrcd, attr->cq);
  return srq;
}

// ibv_get_srq_num(3): the number XRC initiators name an XRC SRQ by (in
// wr.qp_type.xrc.remote_srqn); a basic SRQ has none.
int GetSrqNum(ibv_srq* srq, uint32_t* srq_num) {
  if (srq == nullptr || srq_num == nullptr) return EINVAL;
  const Srq* s = Srq::From(srq);
  if (s->engine_srq->srqn == 0) return EINVAL;
  *srq_num = s->engine_srq->srqn;
  return 0;
}

}  // namespace uroce::verbs

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  if (init == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return uroce::verbs::CreateSrq(pd, init->srq_context, &init->attr);
}

// ibv_modify_srq(3): IBV_SRQ_MAX_WR resizes the SRQ (the receives posted
// stay, in order; EINVAL above the device's max_srq_wr or below the receives
// posted, IBTA 11.2.3.3), IBV_SRQ_LIMIT arms the limit (EINVAL above the
// SRQ's size, the new one if both are asked). All or nothing: a refused
// resize leaves the limit alone too.
int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  Srq* s = Srq::From(srq);
  if (mask & ~(IBV_SRQ_LIMIT | IBV_SRQ_MAX_WR)) return EINVAL;
  if (attr == nullptr) return EINVAL;
  // The engine's size, not s->max_wr: another thread may resize meanwhile.
  uint32_t max_wr = s->engine_srq->max_wr.load(std::memory_order_relaxed);
  if (mask & IBV_SRQ_MAX_WR) {
    if (attr->max_wr == 0 || attr->max_wr > uroce::verbs::kMaxSrqWr) return EINVAL;
    max_wr = attr->max_wr;
  }
  const uint32_t limit =
      (mask & IBV_SRQ_LIMIT) ? attr->srq_limit : s->engine_srq->limit.load(std::memory_order_acquire);
  // An armed limit must stay within the SRQ (as rxe: rxe_srq_chk_attr).
  if (limit > max_wr) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) {
    uroce::Status st = s->context->engine->ResizeSrq(s->engine_srq, max_wr);
    if (!st.ok()) return st.ToErrno();
  }
  if (mask & IBV_SRQ_LIMIT) s->engine_srq->limit.store(attr->srq_limit, std::memory_order_release);
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  Srq* s = Srq::From(srq);
  attr->max_wr = s->engine_srq->max_wr.load(std::memory_order_relaxed);  // as resized
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->engine_srq->limit.load(std::memory_order_acquire);
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  Srq* s = Srq::From(srq);
  uroce::Status st = s->context->engine->DestroySrq(s->engine_srq);
  if (!st.ok()) return st.ToErrno();  // EBUSY while QPs use it
  Registry::Get().UnregisterSrq(s);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  delete s;
  return 0;
}

}  // extern "C"
