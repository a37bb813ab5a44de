// XRC domains: ibv_open_xrcd(3) and ibv_close_xrcd(3) (verbs_context's
// open_xrcd / close_xrcd). An XRC domain groups XRC SRQs and XRC target QPs
// (IBTA annex A14, XRC): a request reaching a target QP may name any XRC SRQ of
// the target's domain. As ibv_open_xrcd(3) says, opening the file (its
// device and inode) another open already associated with a domain gives
// that same domain; the engine's domain ends with the last close.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"

namespace uroce::verbs {
namespace {

std::vector<Xrcd*>& Table();

// The domains associated with a file, by engine, device and inode.
std::mutex& TableMutex() {
  static std::mutex* const m = [] {
    // In a forked child the domains are its parent's (ibv_fork_init(3);
    // runtime::Process::ForgetParentAfterFork), and the lock may have been held by
    // another thread of the parent at the fork.
    pthread_atfork(nullptr, nullptr, [] {
      new (&TableMutex()) std::mutex();
      Table().clear();
    });
    return new std::mutex();
  }();
  return *m;
}
std::vector<Xrcd*>& Table() {
  static std::vector<Xrcd*> t;
  return t;
}

}  // namespace

ibv_xrcd* OpenXrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  // Both fields are required (ibv_open_xrcd(3); rdma-core's
  // ibv_cmd_open_xrcd refuses a mask without them), and oflags knows only
  // O_CREAT and O_EXCL.
  const uint32_t required = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if (context == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask & ~static_cast<uint32_t>(required)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((attr->comp_mask & required) != required || (attr->oflags & ~(O_CREAT | O_EXCL)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::From(context);
  struct stat st {};
  const bool has_inode = attr->fd != -1;
  if (!has_inode && !(attr->oflags & O_CREAT)) {
    errno = EINVAL;  // a domain of no file can only be created
    return nullptr;
  }
  if (has_inode && fstat(attr->fd, &st) != 0) return nullptr;  // errno from fstat (EBADF)
  std::lock_guard<std::mutex> lock(TableMutex());
  if (has_inode) {
    for (Xrcd* x : Table()) {
      if (x->has_inode && x->context->engine == ctx->engine && x->dev == st.st_dev && x->ino == st.st_ino) {
        if ((attr->oflags & O_CREAT) && (attr->oflags & O_EXCL)) {
          errno = EEXIST;
          return nullptr;
        }
        ++x->opens;
        return &x->xrcd;
      }
    }
    if (!(attr->oflags & O_CREAT)) {
      errno = ENOENT;  // no domain is associated with the file yet
      return nullptr;
    }
  }
  auto engine_xrcd = ctx->engine->CreateXrcd();
  if (!engine_xrcd.ok()) {
    errno = engine_xrcd.status().ToErrno();
    return nullptr;
  }
  auto* x = new (std::nothrow) Xrcd();
  if (x == nullptr) {
    (void)ctx->engine->DestroyXrcd(*engine_xrcd);
    errno = ENOMEM;
    return nullptr;
  }
  x->xrcd.context = context;
  x->context = ctx;
  x->engine_xrcd = *engine_xrcd;
  x->has_inode = has_inode;
  x->dev = st.st_dev;
  x->ino = st.st_ino;
  Table().push_back(x);
  return &x->xrcd;
}

int CloseXrcd(ibv_xrcd* xrcd) {
  if (xrcd == nullptr) return EINVAL;
  Xrcd* x = Xrcd::From(xrcd);
  std::lock_guard<std::mutex> lock(TableMutex());
  auto& table = Table();
  if (std::find(table.begin(), table.end(), x) == table.end()) return EINVAL;
  if (x->opens > 1) {
    --x->opens;
    return 0;
  }
  // The last close: EBUSY while XRC SRQs or XRC target QPs are in it.
  const uroce::Status st = x->context->engine->DestroyXrcd(x->engine_xrcd);
  if (!st.ok()) return st.ToErrno();
  table.erase(std::remove(table.begin(), table.end(), x), table.end());
  delete x;
  return 0;
}

}  // namespace uroce::verbs
