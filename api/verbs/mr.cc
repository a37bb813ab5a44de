// Memory regions: ibv_reg_mr(3), ibv_reg_mr_iova(3), ibv_reg_mr_iova2(3),
// ibv_dereg_mr(3). The engine checks keys, bounds, access and PD before a
// byte moves; the region is the application's memory, used in place.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <new>

#include "api/verbs/objects.h"

using uroce::verbs::Context;

namespace {

// Access flags the engine understands; the optional ones (relaxed ordering,
// IBV_ACCESS_OPTIONAL_RANGE) are hints that may be ignored (ibv_reg_mr(3)).
constexpr unsigned kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC;

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const unsigned required = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((required & ~kSupportedAccess) != 0) {
    // Memory windows, on-demand paging, zero-based MRs: not offered.
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto keys = Context::From(pd->context)->engine->RegMr(pd->handle, addr, length, iova,
                                                        static_cast<int>(access & kSupportedAccess));
  if (!keys.ok()) {
    errno = keys.status().ToErrno();
    return nullptr;
  }
  auto* mr = new (std::nothrow) ibv_mr{};
  if (mr == nullptr) {
    (void)Context::From(pd->context)->engine->DeregMr(keys->lkey);
    errno = ENOMEM;
    return nullptr;
  }
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->handle = keys->lkey;
  mr->lkey = keys->lkey;
  mr->rkey = keys->rkey;
  return mr;
}

}  // namespace

// verbs.h makes ibv_reg_mr a macro (__ibv_reg_mr picks ibv_reg_mr or
// ibv_reg_mr_iova2 from the access flags).
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

extern "C" {

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return RegMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return RegMr(pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return RegMr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(ibv_mr* mr) {
  uroce::Status s = Context::From(mr->context)->engine->DeregMr(mr->lkey);
  if (!s.ok()) return s.ToErrno();
  delete mr;
  return 0;
}

// ibv_rereg_mr(3) returns IBV_REREG_MR_ERR_* codes; uroce has no re-registration.
int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, size_t, int) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_INPUT;
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_mr(ibv_mr*) {}

}  // extern "C"
