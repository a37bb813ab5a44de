// Memory regions: ibv_reg_mr(3), ibv_reg_mr_iova(3), ibv_reg_mr_iova2(3),
// ibv_rereg_mr(3), ibv_dereg_mr(3). The engine checks keys, bounds, access and PD before a
// byte moves; the region is the application's memory, used in place.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"

using uroce::verbs::Context;
using uroce::verbs::Mr;

namespace {

// Access flags the engine understands; the optional ones (relaxed ordering,
// IBV_ACCESS_OPTIONAL_RANGE) are hints that may be ignored (ibv_reg_mr(3)).
// IBV_ACCESS_ON_DEMAND (ODP, ibv_reg_mr(3)): the region's pages need not be
// resident or pinned, and may change behind it. uroce's engine reads and
// writes the process's memory in place and never pins it, so every
// explicit region already behaves so: the engine's fast memcpy stays. The
// engine sees the flag for the implicit region (addr NULL, length
// SIZE_MAX: the whole address space), which it reaches only through the
// kernel's fault-free copies (transport/on_demand_memory.h), so that a
// peer's access to an unmapped or read-only page is NAKed, never a fault.
constexpr unsigned kEngineAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND;
// IBV_ACCESS_HUGETLB says an ODP region is backed by huge pages, so that a
// kernel driver maps it in huge pages: a hint with nothing to map here.
constexpr unsigned kSupportedAccess = kEngineAccess | IBV_ACCESS_HUGETLB;

// The engine's registration of [addr, addr + length) at `iova` in `pd`.
uroce::StatusOr<uroce::transport::MrKeys> Register(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                                   unsigned access) {
  const unsigned required = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((required & ~kSupportedAccess) != 0) {
    // Zero-based MRs outside device memory: not offered.
    return uroce::NotSupported("access flags not offered");
  }
  // Implicit ODP (IBV_ACCESS_ON_DEMAND, addr NULL, length SIZE_MAX) goes to
  // the engine as it is; its iova is 0 (the whole address space, addressed
  // as it is).
  if ((access & IBV_ACCESS_ON_DEMAND) != 0 && addr == nullptr && length == SIZE_MAX) iova = 0;
  return Context::From(pd->context)->engine->RegMr(pd->handle, addr, length, iova,
                                                   static_cast<int>(access & kEngineAccess));
}

void Fill(Mr* mr, ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access,
          const uroce::transport::MrKeys& keys) {
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = keys.lkey;
  mr->mr.lkey = keys.lkey;
  mr->mr.rkey = keys.rkey;
  mr->access = access;
  mr->iova = iova;
}

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto keys = Register(pd, addr, length, iova, access);
  if (!keys.ok()) {
    errno = keys.status().ToErrno();
    return nullptr;
  }
  auto* mr = new (std::nothrow) Mr();
  if (mr == nullptr) {
    (void)Context::From(pd->context)->engine->DeregMr(keys->lkey);
    errno = ENOMEM;
    return nullptr;
  }
  Fill(mr, pd, addr, length, iova, access, *keys);
  return &mr->mr;
}

}  // namespace

namespace uroce::verbs {

// ibv_advise_mr(3): prefetching pages the engine will touch in place anyway
// has nothing to do; the arguments are checked as the man page says: an
// advice not known is EOPNOTSUPP, unknown flags or no SGE EINVAL, an SGE
// outside a region of `pd` (or without local write for PREFETCH_WRITE)
// EFAULT.
int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
    return EOPNOTSUPP;
  }
  if ((flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0 || sg_list == nullptr || num_sge == 0) {
    return EINVAL;
  }
  const int needed = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? IBV_ACCESS_LOCAL_WRITE : 0;
  uroce::transport::Engine* engine = Context::From(pd->context)->engine;
  // An implicit on-demand region's range passes: its pages are found when
  // the engine touches them (through the kernel, which maps them then), so
  // a prefetch, even with IBV_ADVISE_MR_FLAG_FLUSH, has nothing to wait for.
  for (uint32_t i = 0; i < num_sge; ++i) {
    if (!uroce::transport::MrGranted(
            engine->CheckLocalMr(sg_list[i].lkey, pd->handle, sg_list[i].addr, sg_list[i].length, needed))) {
      return EFAULT;
    }
  }
  return 0;
}

}  // namespace uroce::verbs

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
  if (uroce::verbs::Dm* dm = Mr::From(mr)->dm; dm != nullptr) dm->mrs.fetch_sub(1, std::memory_order_acq_rel);
  delete Mr::From(mr);
  return 0;
}

// ibv_rereg_mr(3): 0, or an IBV_REREG_MR_ERR_* code with errno set. The
// region keeps its keys (as rxe's and mlx5's re-registration do); work
// requests already posted see the new registration when they run, so a
// receive posted for the old range fails, as the man page warns.
int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (ibmr == nullptr || flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) ||
      ((flags & IBV_REREG_MR_CHANGE_PD) != 0 && (pd == nullptr || pd->context != ibmr->context))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Mr* mr = Mr::From(ibmr);
  if (mr->dm != nullptr) {
    // A device memory MR is re-registered by registering the device memory
    // again (ibv_reg_dm_mr); rxe and mlx5 do not re-register it either.
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0 ? pd : ibmr->pd;
  const bool translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  void* new_addr = translation ? addr : ibmr->addr;
  const size_t new_length = translation ? length : ibmr->length;
  const uint64_t new_iova = translation ? reinterpret_cast<uintptr_t>(addr) : mr->iova;
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) != 0 ? static_cast<unsigned>(access) : mr->access;
  if ((new_access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE) & ~kSupportedAccess) != 0) {
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
  }
  uroce::Status s = Context::From(ibmr->context)
                        ->engine->ReregMr(ibmr->lkey, new_pd->handle, new_addr, new_length, new_iova,
                                          static_cast<int>(new_access & kEngineAccess));
  if (!s.ok()) {
    errno = s.ToErrno();
    return IBV_REREG_MR_ERR_CMD;
  }
  uroce::transport::MrKeys keys{ibmr->lkey, ibmr->rkey};
  Fill(mr, new_pd, new_addr, new_length, new_iova, new_access, keys);
  return 0;
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
