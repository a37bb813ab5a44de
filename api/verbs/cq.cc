// Completion queues and completion channels: ibv_create_cq(3),
// ibv_create_cq_ex(3) with its start_poll / next_poll / read_* interface,
// ibv_resize_cq(3), ibv_destroy_cq(3), ibv_poll_cq(3) (context->ops.poll_cq),
// ibv_req_notify_cq(3) (context->ops.req_notify_cq),
// ibv_create_comp_channel(3), ibv_get_cq_event(3), ibv_ack_cq_events(3).
//
// A channel's fd is an eventfd in semaphore mode: the side that drives
// progress (registry.cc, SignalArmedCqs) writes 1 for every CQ it finds armed
// with completions waiting, so the fd polls readable exactly while events
// are pending, and a blocking ibv_get_cq_event reads one of them. Nothing
// touches the fd on the fast path unless the CQ was armed.
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/registry.h"

using uroce::verbs::CompChannel;
using uroce::verbs::Context;
using uroce::verbs::Cq;
using uroce::verbs::Registry;

namespace uroce::verbs {

// Inline progress: one bounded burst of the CQ's engine, then the ring.
int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0) return -1;
  Cq* cq = Cq::From(ibcq);
  uroce::runtime::Process::Get().ProgressFromPoll(cq->context->engine);
  return cq->engine_cq->Poll(num_entries, wc);
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = Cq::From(ibcq);
  if (cq->channel == nullptr) return EINVAL;  // no channel to deliver to
  cq->solicited_only.store(solicited_only != 0, std::memory_order_relaxed);
  if (!cq->armed.exchange(true, std::memory_order_acq_rel)) uroce::runtime::Process::Get().NoteArmed();
  return 0;
}

namespace {

// ibv_create_cq_ex(3)'s poll interface over the same engine ring: start_poll
// takes one completion (ENOENT when there is none, and then no end_poll
// follows), next_poll the next one, and the read_* calls read the one taken.
// One at a time, so a program may mix it with ibv_poll_cq and never loses a
// completion between end_poll and the next start_poll.
Cq* FromEx(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }

int TakeOne(ibv_cq_ex* c) {
  Cq* cq = FromEx(c);
  if (cq->engine_cq->Poll(1, &cq->current) != 1) return ENOENT;
  c->status = cq->current.status;
  c->wr_id = cq->current.wr_id;
  return 0;
}

int StartPoll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  uroce::runtime::Process::Get().ProgressFromPoll(FromEx(c)->context->engine);
  return TakeOne(c);
}
int NextPoll(ibv_cq_ex* c) { return TakeOne(c); }
void EndPoll(ibv_cq_ex*) {}
ibv_wc_opcode ReadOpcode(ibv_cq_ex* c) { return FromEx(c)->current.opcode; }
uint32_t ReadVendorErr(ibv_cq_ex* c) { return FromEx(c)->current.vendor_err; }
uint32_t ReadByteLen(ibv_cq_ex* c) { return FromEx(c)->current.byte_len; }
__be32 ReadImmData(ibv_cq_ex* c) { return FromEx(c)->current.imm_data; }
uint32_t ReadQpNum(ibv_cq_ex* c) { return FromEx(c)->current.qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* c) { return FromEx(c)->current.src_qp; }
unsigned int ReadWcFlags(ibv_cq_ex* c) { return FromEx(c)->current.wc_flags; }
uint32_t ReadSlid(ibv_cq_ex* c) { return FromEx(c)->current.slid; }
uint8_t ReadSl(ibv_cq_ex* c) { return FromEx(c)->current.sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex* c) { return FromEx(c)->current.dlid_path_bits; }

// What struct ibv_wc holds; completion timestamps, VLANs, flow tags and tag
// matching are not offered.
constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;
constexpr uint32_t kSupportedCreateFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;  // a hint uroce may ignore

// Both ibv_create_cq and ibv_create_cq_ex: the CQ with its engine ring.
Cq* MakeCq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector,
           RingAllocator allocator = {}) {
  if (context == nullptr || cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::From(context);
  auto engine_cq = ctx->engine->CreateCq(static_cast<uint32_t>(cqe), std::move(allocator));
  if (!engine_cq.ok()) {
    errno = engine_cq.status().ToErrno();
    return nullptr;
  }
  auto* cq = new (std::nothrow) Cq();
  if (cq == nullptr) {
    (void)ctx->engine->DestroyCq(*engine_cq);
    errno = ENOMEM;
    return nullptr;
  }
  cq->context = ctx;
  cq->engine_cq = *engine_cq;
  cq->channel = channel != nullptr ? CompChannel::From(channel) : nullptr;
  ibv_cq* c = cq->ibv();
  c->context = context;
  c->channel = channel;
  c->cq_context = cq_context;
  c->handle = 0;
  c->cqe = static_cast<int>((*engine_cq)->capacity());
  pthread_mutex_init(&c->mutex, nullptr);
  pthread_cond_init(&c->cond, nullptr);
  if (channel != nullptr) {
    pthread_mutex_lock(&context->mutex);
    channel->refcnt++;
    pthread_mutex_unlock(&context->mutex);
  }
  Registry::Get().RegisterCq(cq);
  return cq;
}

}  // namespace

// ibv_create_cq_ex(3): NULL with errno, EINVAL for a bad size, vector,
// mask bit or parent domain, EOPNOTSUPP for what verbs defines and uroce
// does not offer (timestamps and the other non-standard wc_flags). With
// IBV_CQ_INIT_ATTR_MASK_PD the ring's memory comes from the parent
// domain's allocators.
ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr || (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  RingAllocator allocator;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0) {
    // Only a parent domain of this device (ibv_create_cq_ex(3)).
    if (attr->parent_domain == nullptr || attr->parent_domain->context != context ||
        !Pd::From(attr->parent_domain)->is_parent()) {
      errno = EINVAL;
      return nullptr;
    }
    allocator = RingAllocatorOf(attr->parent_domain, kResourceTypeCq);
  }
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0 ||
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 && (attr->flags & ~kSupportedCreateFlags) != 0)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* cq = MakeCq(context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                  static_cast<int>(attr->comp_vector), std::move(allocator));
  if (cq == nullptr) return nullptr;
  ibv_cq_ex& x = cq->cq;
  x.start_poll = StartPoll;
  x.next_poll = NextPoll;
  x.end_poll = EndPoll;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImmData;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  return &x;
}

}  // namespace uroce::verbs

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto* ch = new (std::nothrow) CompChannel();
  if (ch == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  ch->channel.context = context;
  ch->channel.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  ch->channel.refcnt = 0;
  if (ch->channel.fd < 0) {
    const int e = errno;
    delete ch;
    errno = e;
    return nullptr;
  }
  return &ch->channel;
}

// EBUSY while a CQ still uses it (ibv_create_comp_channel(3)).
int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel->refcnt != 0) return EBUSY;
  close(channel->fd);
  delete CompChannel::From(channel);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = uroce::verbs::MakeCq(context, cqe, cq_context, channel, comp_vector);
  return cq != nullptr ? cq->ibv() : nullptr;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  Cq* cq = Cq::From(ibcq);
  Registry::Get().UnregisterCq(cq);
  uroce::Status s = cq->context->engine->DestroyCq(cq->engine_cq);
  if (!s.ok()) {
    Registry::Get().RegisterCq(cq);
    return s.ToErrno();  // EBUSY while QPs use it
  }
  if (cq->channel != nullptr) {
    std::lock_guard<std::mutex> lock(cq->channel->mutex);
    auto& f = cq->channel->fired;
    f.erase(std::remove(f.begin(), f.end(), ibcq), f.end());
    pthread_mutex_lock(&ibcq->context->mutex);
    cq->channel->channel.refcnt--;
    pthread_mutex_unlock(&ibcq->context->mutex);
  }
  pthread_mutex_destroy(&ibcq->mutex);
  pthread_cond_destroy(&ibcq->cond);
  delete cq;
  return 0;
}

// ibv_resize_cq(3): 0 or an errno; EINVAL also when more completions wait
// than `cqe` holds (the CQ is unchanged then). The program does not poll the
// CQ while it resizes it. cq->cqe says the size it got (at least `cqe`).
int ibv_resize_cq(ibv_cq* ibcq, int cqe) {
  if (ibcq == nullptr || cqe <= 0) return EINVAL;
  Cq* cq = Cq::From(ibcq);
  // What the engine has for this CQ is in it before it is measured, as a
  // NIC's completions are by the time the call reaches it.
  uroce::runtime::Process::Get().ProgressFromPoll(cq->context->engine);
  uroce::Status s = cq->context->engine->ResizeCq(cq->engine_cq, static_cast<uint32_t>(cqe));
  if (!s.ok()) return s.ToErrno();
  ibcq->cqe = static_cast<int>(cq->engine_cq->capacity());
  return 0;
}

// ibv_get_cq_event(3): 0, or -1 (EAGAIN on a non-blocking fd with nothing
// pending). Blocks in read() on the eventfd while the progress thread drives
// the engine (inline mode) and signals the channel.
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  CompChannel* ch = CompChannel::From(channel);
  for (;;) {
    uint64_t n = 0;
    if (read(channel->fd, &n, sizeof(n)) != static_cast<ssize_t>(sizeof(n))) return -1;
    std::lock_guard<std::mutex> lock(ch->mutex);
    if (ch->fired.empty()) continue;  // its CQ was destroyed meanwhile
    ibv_cq* c = ch->fired.front();
    ch->fired.pop_front();
    Cq::From(c)->events_delivered.fetch_add(1, std::memory_order_relaxed);
    *cq = c;
    *cq_context = c->cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
  Cq::From(cq)->events_acked.fetch_add(nevents, std::memory_order_relaxed);
}

}  // extern "C"
