// Protection domains, parent domains and thread domains: ibv_alloc_pd(3),
// ibv_dealloc_pd(3), ibv_alloc_parent_domain(3), ibv_alloc_td(3),
// ibv_dealloc_td(3). pd->handle is the engine's PD handle; a parent domain
// has its protection domain's.
#include <infiniband/verbs.h>

#include <cerrno>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"

using uroce::verbs::Context;
using uroce::verbs::Pd;
using uroce::verbs::Td;

namespace uroce::verbs {

// ibv_alloc_parent_domain(3): NULL with EINVAL for a missing or foreign
// protection domain, a parent domain as protection domain, allocators given
// by halves or an unknown mask bit.
ibv_pd* AllocParentDomain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (attr == nullptr || attr->pd == nullptr || attr->pd->context != context || (attr->comp_mask & ~kKnown) != 0 ||
      Pd::From(attr->pd)->is_parent() || (attr->td != nullptr && attr->td->context != context)) {
    errno = EINVAL;
    return nullptr;
  }
  const bool allocators = (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0;
  if (allocators && (attr->alloc == nullptr || attr->free == nullptr)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* parent = new (std::nothrow) Pd();
  if (parent == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Pd* protection = Pd::From(attr->pd);
  parent->pd.context = context;
  parent->pd.handle = protection->pd.handle;
  parent->protection = protection;
  parent->td = attr->td;
  if (allocators) {
    parent->alloc = attr->alloc;
    parent->free = attr->free;
  }
  if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) != 0) parent->pd_context = attr->pd_context;
  protection->parents.fetch_add(1, std::memory_order_relaxed);
  if (attr->td != nullptr) Td::From(attr->td)->parents.fetch_add(1, std::memory_order_relaxed);
  return &parent->pd;
}

ibv_td* AllocTd(ibv_context* context, ibv_td_init_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* td = new (std::nothrow) Td();
  if (td == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  td->td.context = context;
  return &td->td;
}

// EBUSY while a parent domain uses it.
int DeallocTd(ibv_td* td) {
  if (Td::From(td)->parents.load(std::memory_order_relaxed) != 0) return EBUSY;
  delete Td::From(td);
  return 0;
}

RingAllocator RingAllocatorOf(ibv_pd* ibpd, uint64_t resource_type) {
  Pd* pd = Pd::From(ibpd);
  if (!pd->is_parent() || pd->alloc == nullptr) return {};
  return [pd, resource_type](size_t bytes, size_t alignment) {
    RingStorage storage;
    void* p = pd->alloc(&pd->pd, pd->pd_context, bytes, alignment, resource_type);
    if (p == IBV_ALLOCATOR_USE_DEFAULT) {
      // The application lets the provider allocate this one (and will not
      // be asked to free it).
      storage.bytes = ::operator new(bytes, std::align_val_t{alignment}, std::nothrow);
      storage.release = [alignment](void* q) { ::operator delete(q, std::align_val_t{alignment}); };
      return storage;
    }
    storage.bytes = p;
    storage.release = [pd, resource_type](void* q) { pd->free(&pd->pd, pd->pd_context, q, resource_type); };
    return storage;
  };
}

}  // namespace uroce::verbs

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto pd_or = Context::From(context)->engine->AllocPd();
  if (!pd_or.ok()) {
    errno = pd_or.status().ToErrno();
    return nullptr;
  }
  auto* pd = new (std::nothrow) Pd();
  if (pd == nullptr) {
    (void)Context::From(context)->engine->DeallocPd(*pd_or);
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = context;
  pd->pd.handle = *pd_or;
  return &pd->pd;
}

// EBUSY while MRs, QPs, SRQs or AHs use it (the engine checks), or parent
// domains stand on it. A parent domain goes by itself: the objects made in
// it are its protection domain's, which the engine checks when that goes.
int ibv_dealloc_pd(ibv_pd* ibpd) {
  Pd* pd = Pd::From(ibpd);
  if (pd->is_parent()) {
    pd->protection->parents.fetch_sub(1, std::memory_order_relaxed);
    if (pd->td != nullptr) Td::From(pd->td)->parents.fetch_sub(1, std::memory_order_relaxed);
    delete pd;
    return 0;
  }
  if (pd->parents.load(std::memory_order_relaxed) != 0) return EBUSY;
  uroce::Status s = Context::From(ibpd->context)->engine->DeallocPd(ibpd->handle);
  if (!s.ok()) return s.ToErrno();
  delete pd;
  return 0;
}

// Importing a PD needs a kernel (ibv_import_device): not offered.
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_pd(ibv_pd*) {}

}  // extern "C"
