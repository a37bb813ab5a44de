// The fi_ops every libfabric object carries (struct fid, fi_endpoint(3)),
// for a cq-layer object T (FabricCq, Counter, EventQueue):
// - fi_close deletes T once T::CheckClosable() allows it (0), else returns
//   its -FI_E* code (-FI_EBUSY while endpoints are bound);
// - fi_control goes to T::Control(command, arg);
// - bind, ops_open, tostr and ops_set are not supported: -FI_ENOSYS.
// A fid that is not T's (T::FromFid gives null) gets -FI_EINVAL. Each T has
// a table of its own, so T::FromFid tells T's fids from any other by the
// table's address. Any application thread.
//
// In an unnamed namespace: each T's table belongs to the one source file
// that defines T, and none of it is exported from the shared libraries the
// cq layer is linked into (api/uroce_cq.h's liburoce_cq.so).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstddef>
#include <cstdint>

namespace uroce::cq {
namespace {

template <typename T>
struct FidOps {
  static int Close(struct fid* fid) {
    T* self = T::FromFid(fid);
    if (self == nullptr) return -FI_EINVAL;
    const int rc = self->CheckClosable();
    if (rc != 0) return rc;
    delete self;
    return 0;
  }
  static int Bind(struct fid*, struct fid*, uint64_t) { return -FI_ENOSYS; }
  static int Control(struct fid* fid, int command, void* arg) {
    T* self = T::FromFid(fid);
    if (self == nullptr) return -FI_EINVAL;
    return self->Control(command, arg);
  }
  static int OpsOpen(struct fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
  static int ToStr(const struct fid*, char*, size_t) { return -FI_ENOSYS; }
  static int OpsSet(struct fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

  // Not const: struct fid points to a mutable fi_ops.
  static inline fi_ops table = {sizeof(fi_ops), Close, Bind, Control, OpsOpen, ToStr, OpsSet};
};

}  // namespace
}  // namespace uroce::cq
