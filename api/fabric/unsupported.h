// Operations uroce does not have. libfabric calls through its ops tables
// without checking for NULL, so every slot is filled; these answer
// -FI_ENOSYS (fi_errno(3): "Function not implemented") for any signature:
//   fi_ops ops = { ..., Enosys<decltype(fi_ops::bind)>::Call, ... };
#pragma once

#include <rdma/fi_errno.h>

namespace uroce::fabric {

template <typename F>
struct Enosys;

template <typename R, typename... Args>
struct Enosys<R (*)(Args...)> {
  static R Call(Args...) { return static_cast<R>(-FI_ENOSYS); }
};

}  // namespace uroce::fabric
