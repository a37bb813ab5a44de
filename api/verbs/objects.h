// The verbs objects of uroce's libibverbs.so.1. Each wraps rdma-core's public
// struct (the application holds a pointer to that struct, as verbs(7)
// programs do) and finds its uroce half with container_of.
//
// Layout rules taken from rdma-core 44's <infiniband/verbs.h>:
// - struct ibv_context must be the last member of struct verbs_context, and
//   context.abi_compat == __VERBS_ABI_IS_EXTENDED with verbs_context.sz set,
//   or the inline verbs (ibv_query_port, ibv_query_device_ex,
//   ibv_create_qp_ex, ...) take the legacy path (verbs_get_ctx_op).
// - The inline fast-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq,
//   ibv_req_notify_cq, ibv_post_srq_recv) call context->ops.* directly.
// - ibv_qp_to_qp_ex(3) hands out a struct ibv_qp_ex whose first member is the
//   struct ibv_qp, so a QP is allocated as an ibv_qp_ex.
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "transport/engine.h"

namespace uroce::verbs {

template <typename Outer, typename Inner>
Outer* ContainerOf(Inner* inner, size_t offset) {
  return reinterpret_cast<Outer*>(reinterpret_cast<char*>(inner) - offset);
}

// One uroce device: one [endpoint.NAME] of the configuration.
struct Device {
  ibv_device device;  // first: ibv_device* <-> Device*
  size_t index = 0;   // endpoint index in the configuration
  std::string endpoint_name;
};

struct Context {
  verbs_context vctx;  // ends with struct ibv_context (see above)
  Device* device = nullptr;
  transport::Engine* engine = nullptr;
  const transport::EngineConfig* engine_config = nullptr;
  uint32_t port_mtu = 1500;
  transport::MacAddress mac{};
  // Asynchronous events (ibv_get_async_event(3)): queued by the progress
  // thread, async_fd (an eventfd in semaphore mode) counts them.
  std::mutex async_mutex;
  std::deque<ibv_async_event> async_events;
  // Device memory allocated on this context (ibv_alloc_dm(3)), bounded by
  // max_dm_size.
  std::atomic<uint64_t> dm_bytes{0};
  std::atomic<uint32_t> next_dm_handle{1};

  ibv_context* ibv() { return &vctx.context; }
  static Context* From(ibv_context* c) { return ContainerOf<Context>(c, offsetof(Context, vctx) + offsetof(verbs_context, context)); }
};

struct CompChannel {
  ibv_comp_channel channel;  // first
  std::mutex mutex;
  std::deque<ibv_cq*> fired;  // CQs whose event read() has not consumed yet
  static CompChannel* From(ibv_comp_channel* c) { return reinterpret_cast<CompChannel*>(c); }
};

struct Cq {
  ibv_cq_ex cq;  // first; ibv_cq_ex begins with the members of struct ibv_cq
  Context* context = nullptr;
  transport::CompletionQueue* engine_cq = nullptr;
  CompChannel* channel = nullptr;
  // ibv_req_notify_cq(3): armed until the progress side signals the channel.
  std::atomic<bool> armed{false};
  std::atomic<bool> solicited_only{false};
  std::atomic<uint32_t> events_delivered{0};
  std::atomic<uint32_t> events_acked{0};
  // ibv_create_cq_ex(3)'s poll interface: the completion start_poll or
  // next_poll took last, which the read_* calls read.
  ibv_wc current{};
  ibv_cq* ibv() { return ibv_cq_ex_to_cq(&cq); }
  static Cq* From(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
};

// A protection domain, or a parent domain (ibv_alloc_parent_domain(3)): a
// PD that stands for its protection domain (same engine PD handle, so MRs,
// AHs and QPs in either are in one domain) and carries a thread domain and
// the application's allocators for the memory of the queues made in it.
struct Pd {
  ibv_pd pd;  // first
  Pd* protection = nullptr;  // parent domain: its protection domain; else null
  ibv_td* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
  std::atomic<uint32_t> parents{0};  // protection domain: parent domains over it
  bool is_parent() const { return protection != nullptr; }
  static Pd* From(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
};

// A thread domain (ibv_alloc_td(3)): a hint that one thread uses the objects
// of its parent domains; uroce's queues are lock-free whoever uses them.
struct Td {
  ibv_td td;  // first
  std::atomic<uint32_t> parents{0};
  static Td* From(ibv_td* t) { return reinterpret_cast<Td*>(t); }
};

// The resource_type a parent domain's allocator is called with (verbs.h
// leaves them to the provider; rdma-core's put the provider in the high 32
// bits, as here: 0x7572, "ur").
constexpr uint64_t kResourceTypeQp = (uint64_t{0x7572} << 32) | 1;   // a QP's send and receive rings
constexpr uint64_t kResourceTypeSrq = (uint64_t{0x7572} << 32) | 2;  // an SRQ's ring
constexpr uint64_t kResourceTypeCq = (uint64_t{0x7572} << 32) | 3;   // a CQ's ring
struct Dm;

// A memory region: what ibv_rereg_mr(3) keeps of the registration that it
// does not change.
struct Mr {
  ibv_mr mr;  // first
  unsigned access = 0;
  uint64_t iova = 0;
  Dm* dm = nullptr;  // the device memory it registers (ibv_reg_dm_mr), if any
  static Mr* From(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
};

// Device memory (ibv_alloc_dm(3)): uroce's "device" is the host, so it is
// host memory the engine reaches like any registered memory.
struct Dm {
  ibv_dm dm;  // first
  Context* context = nullptr;
  uint8_t* mem = nullptr;
  size_t length = 0;
  // MRs registered on it: ibv_free_dm(3) refuses (EBUSY) while any is, as
  // the kernel's uverbs does, so the engine never reaches freed memory.
  std::atomic<uint32_t> mrs{0};
  static Dm* From(ibv_dm* d) { return reinterpret_cast<Dm*>(d); }
};

// An XRC domain (ibv_open_xrcd(3)). Opens of the same file (device and
// inode) on one engine share one domain, counted in `opens`; an XRC domain
// opened with fd -1 is the opener's alone.
struct Xrcd {
  ibv_xrcd xrcd;  // first
  Context* context = nullptr;
  uint32_t engine_xrcd = 0;
  bool has_inode = false;
  dev_t dev = 0;
  ino_t ino = 0;
  uint32_t opens = 1;  // under xrcd.cc's table lock
  static Xrcd* From(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }
};
struct Srq {
  ibv_srq srq;  // first
  Context* context = nullptr;
  transport::SharedReceiveQueue* engine_srq = nullptr;
  uint32_t max_wr = 0, max_sge = 0;  // as created; engine_srq->max_wr is the size after a resize
  static Srq* From(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
};

struct Qp {
  ibv_qp_ex qpx;  // first; qpx.qp_base is the ibv_qp the application sees
  Context* context = nullptr;
  transport::QueuePair* engine_qp = nullptr;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  // ibv_wr_start .. ibv_wr_complete (ibv_wr_post(3)): the requests built so
  // far (the first wr_count of these), posted together by wr_complete. The
  // vectors only grow: once they are as long as a program's longest chain,
  // building a request allocates nothing.
  size_t wr_count = 0;
  std::vector<ibv_send_wr> wr_list;
  std::vector<ibv_sge> wr_sges;  // one per request (wr_set_sge)
  std::vector<std::vector<ibv_sge>> wr_sge_lists;
  std::vector<std::vector<uint8_t>> wr_inline;
  int wr_error = 0;
  ibv_qp* ibv() { return &qpx.qp_base; }
  static Qp* From(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
};

// Positive errno -> the verbs convention of the calling function.
inline int SetErrno(int e) {
  errno = e;
  return e;
}

}  // namespace uroce::verbs
