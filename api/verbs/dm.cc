// Device memory: ibv_alloc_dm(3), ibv_free_dm(3), ibv_memcpy_to_dm(3),
// ibv_memcpy_from_dm(3), ibv_reg_dm_mr(3). A hardware NIC's device memory is
// memory on the NIC that programs copy to and from and register as a
// zero-based MR. uroce's NIC is the host, so its device memory is host
// memory: the engine reaches it like any registered region, and programs
// written for device memory (rdma-core's tests, UCX) run unchanged.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"

using uroce::verbs::Context;
using uroce::verbs::Dm;
using uroce::verbs::Mr;

namespace uroce::verbs {
namespace {

// Device memory is copied in 4-byte words: mlx5's MEMIC, which rdma-core's
// tests are written against, refuses an offset or length that is not a
// multiple of 4. Keeping the rule means a program tested over uroce does not
// fail on hardware.
constexpr uint64_t kDmWord = 4;
// ibv_alloc_dm_attr.log_align_req above a page is not offered.
constexpr uint32_t kMaxLogAlign = 12;

// 0, or the errno ibv_memcpy_to/from_dm(3) return for [offset, offset+length).
int CheckCopy(const Dm* dm, uint64_t offset, size_t length) {
  if (offset % kDmWord != 0 || length % kDmWord != 0) return EINVAL;
  if (offset > dm->length || length > dm->length - offset) return EFAULT;
  return 0;
}

int MemcpyToDm(ibv_dm* ibdm, uint64_t offset, const void* host, size_t length) {
  Dm* dm = Dm::From(ibdm);
  if (const int e = CheckCopy(dm, offset, length); e != 0) return e;
  std::memcpy(dm->mem + offset, host, length);
  return 0;
}

int MemcpyFromDm(void* host, ibv_dm* ibdm, uint64_t offset, size_t length) {
  Dm* dm = Dm::From(ibdm);
  if (const int e = CheckCopy(dm, offset, length); e != 0) return e;
  std::memcpy(host, dm->mem + offset, length);
  return 0;
}

}  // namespace

ibv_dm* AllocDm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  Context* ctx = Context::From(context);
  // No comp_mask bit is defined for ibv_alloc_dm_attr (ibv_alloc_dm(3)).
  if (attr == nullptr || attr->comp_mask != 0 || attr->length == 0 || attr->log_align_req > kMaxLogAlign) {
    errno = EINVAL;
    return nullptr;
  }
  const size_t length = (attr->length + kDmWord - 1) / kDmWord * kDmWord;
  if (length > kMaxDmSize) {
    errno = ENOMEM;
    return nullptr;
  }
  // The context's share of max_dm_size, taken before the allocation so that
  // racing allocations cannot exceed it together.
  uint64_t used = ctx->dm_bytes.load(std::memory_order_relaxed);
  do {
    if (length > kMaxDmSize - used) {
      errno = ENOMEM;
      return nullptr;
    }
  } while (!ctx->dm_bytes.compare_exchange_weak(used, used + length, std::memory_order_relaxed));
  auto* dm = new (std::nothrow) Dm();
  const size_t align = std::max<size_t>(size_t(1) << attr->log_align_req, 64);
  void* mem = nullptr;
  if (dm == nullptr || posix_memalign(&mem, align, length) != 0) {
    delete dm;
    ctx->dm_bytes.fetch_sub(length, std::memory_order_relaxed);
    errno = ENOMEM;
    return nullptr;
  }
  // Zeroed: the previous owner's bytes of this heap memory are not the
  // program's to read.
  std::memset(mem, 0, length);
  dm->context = ctx;
  dm->mem = static_cast<uint8_t*>(mem);
  dm->length = length;
  dm->dm.context = context;
  dm->dm.memcpy_to_dm = MemcpyToDm;
  dm->dm.memcpy_from_dm = MemcpyFromDm;
  dm->dm.comp_mask = 0;
  dm->dm.handle = ctx->next_dm_handle.fetch_add(1, std::memory_order_relaxed);
  return &dm->dm;
}

int FreeDm(ibv_dm* ibdm) {
  Dm* dm = Dm::From(ibdm);
  if (dm->mrs.load(std::memory_order_acquire) != 0) return EBUSY;
  dm->context->dm_bytes.fetch_sub(dm->length, std::memory_order_relaxed);
  std::free(dm->mem);
  delete dm;
  return 0;
}

// ibv_reg_dm_mr(3): [dm_offset, dm_offset + length) of the device memory as
// a zero-based MR (IBV_ACCESS_ZERO_BASED is required, as the kernel's uverbs
// requires it): byte 0 of the MR is address 0, for its SGEs and its peers.
ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* ibdm, uint64_t dm_offset, size_t length, unsigned access) {
  constexpr unsigned kAllowed = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
  if (pd == nullptr || ibdm == nullptr || ibdm->context != pd->context || (access & IBV_ACCESS_ZERO_BASED) == 0 ||
      (access & ~kAllowed) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  Dm* dm = Dm::From(ibdm);
  if (dm_offset > dm->length || length > dm->length - dm_offset) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = new (std::nothrow) Mr();
  if (mr == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  auto keys = Context::From(pd->context)->engine->RegMr(pd->handle, dm->mem + dm_offset, length, /*iova=*/0,
                                                          static_cast<int>(access));
  if (!keys.ok()) {
    delete mr;
    errno = keys.status().ToErrno();
    return nullptr;
  }
  dm->mrs.fetch_add(1, std::memory_order_acq_rel);
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  // The MR's address is its iova, 0: the program has no host address for
  // device memory (a DM MR's addr is not a pointer it may use).
  mr->mr.addr = nullptr;
  mr->mr.length = length;
  mr->mr.handle = keys->lkey;
  mr->mr.lkey = keys->lkey;
  mr->mr.rkey = keys->rkey;
  mr->access = access;
  mr->iova = 0;
  mr->dm = dm;
  return &mr->mr;
}

}  // namespace uroce::verbs
