// Memory windows: ibv_alloc_mw(3), ibv_dealloc_mw(3), ibv_bind_mw(3)
// (context->ops), and the bind / invalidate work requests of
// ibv_post_send(3) (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV), which the engine
// carries out in order on the send queue (transport/requester.cc). The
// engine checks a window's rkey on every remote access like a region's
// (transport/memory_region.h).
#include <infiniband/verbs.h>

#include <cerrno>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"

using uroce::verbs::Context;

namespace uroce::verbs {

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  // Types 1 and 2 (IBTA 10.6.7: type 2 here is 2B, bound to a QP); anything
  // else is EINVAL (rdma-core's tests expect an error other than
  // EOPNOTSUPP for type 3).
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mw = new (std::nothrow) ibv_mw();
  if (mw == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  auto rkey = Context::From(pd->context)->engine->AllocMw(pd->handle, static_cast<int>(type));
  if (!rkey.ok()) {
    delete mw;
    errno = rkey.status().ToErrno();
    return nullptr;
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = *rkey;
  mw->handle = *rkey >> 8;  // the window's index, fixed while it lives
  mw->type = type;
  return mw;
}

// From then on its rkey grants nothing, bound or not.
int DeallocMw(ibv_mw* mw) {
  Status s = Context::From(mw->context)->engine->DeallocMw(mw->rkey);
  if (!s.ok()) return s.ToErrno();
  delete mw;
  return 0;
}

// ibv_bind_mw(3), type 1 (the inline wrapper checked the type and the
// PD): posted as a bind work request with the next rkey, which mw->rkey
// takes once the request is posted (as mlx5 and rxe do); the completion
// (IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR) comes on the send CQ. A zero
// length or no MR unbinds the window.
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (qp == nullptr || mw == nullptr || bind == nullptr) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = static_cast<unsigned>(bind->send_flags);
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  const int rc = PostSend(qp, &wr, &bad);
  if (rc != 0) return rc;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace uroce::verbs
