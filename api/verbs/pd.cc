// Protection domains: ibv_alloc_pd(3), ibv_dealloc_pd(3). pd->handle is the
// engine's PD handle.
#include <infiniband/verbs.h>

#include <cerrno>
#include <new>

#include "api/verbs/objects.h"

using uroce::verbs::Context;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto pd_or = Context::From(context)->engine->AllocPd();
  if (!pd_or.ok()) {
    errno = pd_or.status().ToErrno();
    return nullptr;
  }
  auto* pd = new (std::nothrow) ibv_pd{context, *pd_or};
  if (pd == nullptr) {
    (void)Context::From(context)->engine->DeallocPd(*pd_or);
    errno = ENOMEM;
  }
  return pd;
}

// EBUSY while MRs, QPs, SRQs or AHs use it (the engine checks).
int ibv_dealloc_pd(ibv_pd* pd) {
  uroce::Status s = Context::From(pd->context)->engine->DeallocPd(pd->handle);
  if (!s.ok()) return s.ToErrno();
  delete pd;
  return 0;
}

// Parent domains and thread domains are not offered.
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_pd(ibv_pd*) {}

}  // extern "C"
