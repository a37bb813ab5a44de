// uroce's librdmacm.so.1: rdma-core 44's exported names with their symbol
// versions (librdmacm.map), so that programs linked against Debian's
// librdmacm (rping, ucmatose, rdma_server, ...) run unmodified over uroce
// under `uroce exec`.
//
// The calls that need devices and connections are implemented in uroce's
// libibverbs.so.1 (api/rdmacm/*.cc, beside the verbs devices and the
// process's one runtime) and reached through the table it exports as
// uroce_rdmacm_v1@UROCE_PRIVATE_1. What needs neither is here:
// rdma_event_str, rdma_getaddrinfo, and the parts uroce does not offer
// (multicast, ECE, rsockets), which fail with a clear errno.
#include <dlfcn.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "api/rdmacm/entry_points.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using uroce::rdmacm::RdmacmOps;

const RdmacmOps* LoadOps() {
  void* symbol = dlvsym(RTLD_DEFAULT, "uroce_rdmacm_v1", "UROCE_PRIVATE_1");
  if (symbol == nullptr) {
    std::fprintf(stderr,
                 "uroce: librdmacm.so.1 needs uroce's libibverbs.so.1 in the process; run the program with "
                 "`uroce exec --config FILE -- PROGRAM`\n");
    return nullptr;
  }
  const RdmacmOps* ops = reinterpret_cast<const RdmacmOps* (*)()>(symbol)();
  if (ops == nullptr || ops->size < sizeof(RdmacmOps)) {
    std::fprintf(stderr, "uroce: librdmacm.so.1 and libibverbs.so.1 come from different uroce builds\n");
    return nullptr;
  }
  return ops;
}

const RdmacmOps* Ops() {
  static const RdmacmOps* ops = LoadOps();
  return ops;
}

// What a call returns when uroce's libibverbs.so.1 is not there: librdmacm's
// failure value for its type, with errno ENODEV ("no RDMA device").
template <typename T>
T Unavailable() {
  errno = ENODEV;
  if constexpr (std::is_same_v<T, int>) {
    return -1;
  } else {
    return T();
  }
}

int NotSupported(const char* what) {
  std::fprintf(stderr, "uroce: %s is not supported\n", what);
  errno = ENOSYS;
  return -1;
}

}  // namespace

#define UROCE_RDMACM_FORWARD(ret, name, params, args) \
  UROCE_EXPORT ret name params {                      \
    const RdmacmOps* ops = Ops();                     \
    if (ops == nullptr) return Unavailable<ret>();    \
    return ops->name args;                            \
  }
UROCE_RDMACM_ENTRY_POINTS(UROCE_RDMACM_FORWARD)
#undef UROCE_RDMACM_FORWARD

UROCE_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

namespace {

// An EAI_* code of getaddrinfo(3) as errno. rdma_getaddrinfo(3) says errno
// tells why it failed; librdmacm's examples print gai_strerror of the return
// value: both hold, so the EAI_* code is returned and errno is set too.
int EaiAsErrno(int eai) {
  switch (eai) {
    case EAI_SYSTEM: return errno;
    case EAI_MEMORY: return ENOMEM;
    case EAI_AGAIN: return EAGAIN;
    case EAI_FAMILY: return EAFNOSUPPORT;
    case EAI_SOCKTYPE: return EPROTONOSUPPORT;
    case EAI_SERVICE: return ESOCKTNOSUPPORT;
    case EAI_BADFLAGS: return EINVAL;
    default: return EADDRNOTAVAIL;  // EAI_NONAME, EAI_NODATA, EAI_ADDRFAMILY, EAI_FAIL: no such address
  }
}

int GaiFail(int eai) {
  errno = EaiAsErrno(eai);
  return eai;
}

}  // namespace

// rdma_getaddrinfo(3) for IP names: getaddrinfo(3) does the resolving; the
// result is the first address, as the source (RAI_PASSIVE) or destination
// of an RC connection in RDMA_PS_TCP. Returns getaddrinfo's EAI_* codes (as
// librdmacm does) with errno set, or -1 with errno EINVAL for a call without
// node and service.
UROCE_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                  rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr)) {
    errno = EINVAL;
    return -1;
  }
  addrinfo ai_hints{};
  ai_hints.ai_socktype = SOCK_STREAM;
  int flags = 0;
  if (hints != nullptr) {
    flags = hints->ai_flags;
    if (hints->ai_family == AF_INET || hints->ai_family == AF_INET6) ai_hints.ai_family = hints->ai_family;
    if (hints->ai_family == AF_IB) return GaiFail(EAI_FAMILY);
    if (hints->ai_qp_type != 0 && hints->ai_qp_type != IBV_QPT_RC) return GaiFail(EAI_SOCKTYPE);
    if (hints->ai_port_space != 0 && hints->ai_port_space != RDMA_PS_TCP) return GaiFail(EAI_SERVICE);
  }
  if (flags & RAI_PASSIVE) ai_hints.ai_flags |= AI_PASSIVE;
  if (flags & RAI_NUMERICHOST) ai_hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(node, service, &ai_hints, &found);
  if (error != 0) return GaiFail(error);
  auto* out = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  auto* address = static_cast<sockaddr*>(std::calloc(1, found->ai_addrlen));
  if (out == nullptr || address == nullptr) {
    std::free(out);
    std::free(address);
    freeaddrinfo(found);
    return GaiFail(EAI_MEMORY);
  }
  std::memcpy(address, found->ai_addr, found->ai_addrlen);
  out->ai_flags = flags;
  out->ai_family = found->ai_family;
  out->ai_qp_type = IBV_QPT_RC;
  out->ai_port_space = RDMA_PS_TCP;
  if (flags & RAI_PASSIVE) {
    out->ai_src_addr = address;
    out->ai_src_len = found->ai_addrlen;
  } else {
    out->ai_dst_addr = address;
    out->ai_dst_len = found->ai_addrlen;
    if (hints != nullptr && hints->ai_src_addr != nullptr && hints->ai_src_len > 0) {
      out->ai_src_addr = static_cast<sockaddr*>(std::malloc(hints->ai_src_len));
      if (out->ai_src_addr == nullptr) {
        std::free(address);
        std::free(out);
        freeaddrinfo(found);
        return GaiFail(EAI_MEMORY);
      }
      std::memcpy(out->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
      out->ai_src_len = hints->ai_src_len;
    }
  }
  freeaddrinfo(found);
  *res = out;
  return 0;
}

UROCE_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

// --- Not offered: multicast (UD), ECE, rsockets ---------------------------

UROCE_EXPORT int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) { return NotSupported("rdma_join_multicast"); }
UROCE_EXPORT int rdma_leave_multicast(rdma_cm_id*, sockaddr*) { return NotSupported("rdma_leave_multicast"); }
UROCE_EXPORT int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
  return NotSupported("rdma_join_multicast_ex");
}
// Enhanced connection establishment (IBTA 12.13 "ECE" options): uroce has
// no vendor options to offer, so it sends none; a reject is a plain one.
UROCE_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return NotSupported("rdma_set_local_ece"); }
UROCE_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return NotSupported("rdma_get_remote_ece"); }
UROCE_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

// rsockets(7) are not provided: no rsocket can be made, so every other
// call is given an fd that is not one (EBADF). rpoll and rselect on
// ordinary fds behave as poll(2) and select(2), which is what they do for
// non-rsocket fds in librdmacm.
UROCE_EXPORT int rsocket(int, int, int) { return NotSupported("rsocket"); }
UROCE_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }
UROCE_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  return select(nfds, readfds, writefds, exceptfds, timeout);
}

namespace {
int NotAnRsocket() {
  errno = EBADF;
  return -1;
}
}  // namespace

UROCE_EXPORT int rbind(int, const sockaddr*, socklen_t) { return NotAnRsocket(); }
UROCE_EXPORT int rlisten(int, int) { return NotAnRsocket(); }
UROCE_EXPORT int raccept(int, sockaddr*, socklen_t*) { return NotAnRsocket(); }
UROCE_EXPORT int rconnect(int, const sockaddr*, socklen_t) { return NotAnRsocket(); }
UROCE_EXPORT int rshutdown(int, int) { return NotAnRsocket(); }
UROCE_EXPORT int rclose(int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rrecv(int, void*, size_t, int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rrecvmsg(int, msghdr*, int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rsend(int, const void*, size_t, int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rsendmsg(int, const msghdr*, int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rread(int, void*, size_t) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rreadv(int, const iovec*, int) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rwrite(int, const void*, size_t) { return NotAnRsocket(); }
UROCE_EXPORT ssize_t rwritev(int, const iovec*, int) { return NotAnRsocket(); }
UROCE_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) { return NotAnRsocket(); }
UROCE_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) { return NotAnRsocket(); }
UROCE_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return NotAnRsocket(); }
UROCE_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return NotAnRsocket(); }
UROCE_EXPORT int rfcntl(int, int, ...) { return NotAnRsocket(); }
UROCE_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return NotAnRsocket(); }
UROCE_EXPORT int riounmap(int, void*, size_t) { return NotAnRsocket(); }
UROCE_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = EBADF;
  return 0;
}
