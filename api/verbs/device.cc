// The device list and device handles: ibv_get_device_list(3),
// ibv_get_device_name(3), ibv_get_device_guid(3), ibv_get_device_index(3),
// ibv_open_device(3), ibv_close_device(3), and the sysfs helpers.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/registry.h"

using uroce::verbs::Context;
using uroce::verbs::Device;
using uroce::verbs::Registry;

// verbs.h routes ibv_get_device_list through an inline for static builds.
#undef ibv_get_device_list

extern "C" {

// ibv_get_device_list(3): a NULL-terminated array; with no devices an empty
// array (not NULL: rdma-core returns NULL only when it cannot allocate).
ibv_device** ibv_get_device_list(int* num_devices) {
  const auto& devices = Registry::Get().Devices();
  auto** list = static_cast<ibv_device**>(calloc(devices.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devices.size(); ++i) list[i] = &devices[i]->device;
  if (num_devices != nullptr) *num_devices = static_cast<int>(devices.size());
  return list;
}

// The devices live as long as the process (rdma-core keeps them while a
// context is open; uroce's never go away).
void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device == nullptr ? nullptr : device->name; }

__be64 ibv_get_device_guid(ibv_device* device) {
  return static_cast<__be64>(uroce::verbs::DeviceGuid(reinterpret_cast<Device*>(device)));
}

int ibv_get_device_index(ibv_device* device) {
  return static_cast<int>(reinterpret_cast<Device*>(device)->index);
}

// ibv_open_device(3): starts DPDK and the uroce runtime on the first call.
ibv_context* ibv_open_device(ibv_device* device) {
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ctx = new (std::nothrow) Context();
  if (ctx == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  const int err = Registry::Get().Open(reinterpret_cast<Device*>(device), ctx);
  if (err != 0) {
    delete ctx;
    errno = err;
    return nullptr;
  }
  verbs_context& v = ctx->vctx;
  std::memset(&v, 0, sizeof(v));
  v.sz = sizeof(verbs_context);
  v.query_port = uroce::verbs::QueryPort;
  v.query_device_ex = uroce::verbs::QueryDeviceEx;
  v.create_qp_ex = uroce::verbs::CreateQpEx;
  v.create_cq_ex = uroce::verbs::CreateCqEx;
  v.create_srq_ex = uroce::verbs::CreateSrqEx;
  v.get_srq_num = uroce::verbs::GetSrqNum;
  v.open_xrcd = uroce::verbs::OpenXrcd;
  v.close_xrcd = uroce::verbs::CloseXrcd;
  v.alloc_parent_domain = uroce::verbs::AllocParentDomain;
  v.alloc_td = uroce::verbs::AllocTd;
  v.dealloc_td = uroce::verbs::DeallocTd;
  v.alloc_dm = uroce::verbs::AllocDm;
  v.free_dm = uroce::verbs::FreeDm;
  v.reg_dm_mr = uroce::verbs::RegDmMr;
  v.advise_mr = uroce::verbs::AdviseMr;
  ibv_context* c = ctx->ibv();
  c->device = device;
  c->abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->ops.poll_cq = uroce::verbs::PollCq;
  c->ops.req_notify_cq = uroce::verbs::ReqNotifyCq;
  c->ops.post_send = uroce::verbs::PostSend;
  c->ops.post_recv = uroce::verbs::PostRecv;
  c->ops.post_srq_recv = uroce::verbs::PostSrqRecv;
  c->ops.alloc_mw = uroce::verbs::AllocMw;
  c->ops.dealloc_mw = uroce::verbs::DeallocMw;
  c->ops.bind_mw = uroce::verbs::BindMw;
  // No kernel device is behind uroce, but programs treat cmd_fd as an open
  // file (rdma-core's tests dup it to share the context with
  // ibv_import_device(3), which then says EOPNOTSUPP): /dev/null, open.
  c->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  c->async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  c->num_comp_vectors = 1;
  pthread_mutex_init(&c->mutex, nullptr);
  if (c->async_fd < 0 || c->cmd_fd < 0) {
    const int e = errno;
    if (c->async_fd >= 0) close(c->async_fd);
    if (c->cmd_fd >= 0) close(c->cmd_fd);
    delete ctx;
    errno = e;
    return nullptr;
  }
  Registry::Get().RegisterContext(ctx);
  return c;
}

int ibv_close_device(ibv_context* context) {
  Context* ctx = Context::From(context);
  Registry::Get().Close(ctx);
  close(context->async_fd);
  close(context->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  delete ctx;
  return 0;
}

// ibv_read_sysfs_file: reads DIR/FILE, strips the newline; -1 if missing.
// uroce devices have no sysfs directory, so their attributes read as absent.
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[512];
  std::snprintf(path, sizeof(path), "%s/%s", dir, file);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t len = read(fd, buf, size);
  close(fd);
  if (len <= 0) return -1;
  if (static_cast<size_t>(len) < size) buf[len] = '\0';
  if (len > 0 && buf[len - 1] == '\n') buf[--len] = '\0';
  return static_cast<int>(len);
}

// rdma-core reads SYSFS_PATH with secure_getenv too: a set-user-ID program
// must not take a path from its caller's environment.
const char* ibv_get_sysfs_path(void) {
  const char* env = secure_getenv("SYSFS_PATH");
  return env != nullptr ? env : "/sys";
}

// ibv_fork_init(3): uroce's memory is the application's own; nothing to do.
int ibv_fork_init(void) { return 0; }
enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }

// ibv_import_device(3) needs a kernel command fd: not offered.
ibv_context* ibv_import_device(int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // extern "C"
