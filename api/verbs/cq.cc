// Completion queues and completion channels: ibv_create_cq(3),
// ibv_destroy_cq(3), ibv_poll_cq(3) (context->ops.poll_cq),
// ibv_req_notify_cq(3) (context->ops.req_notify_cq),
// ibv_create_comp_channel(3), ibv_get_cq_event(3), ibv_ack_cq_events(3).
//
// A channel's fd is an eventfd in semaphore mode: the side that drives
// progress (provider.cc, SignalArmedCqs) writes 1 for every CQ it finds armed
// with completions waiting, so the fd polls readable exactly while events
// are pending, and a blocking ibv_get_cq_event reads one of them. Nothing
// touches the fd on the fast path unless the CQ was armed.
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/provider.h"

using uroce::verbs::CompChannel;
using uroce::verbs::Context;
using uroce::verbs::Cq;
using uroce::verbs::Provider;

namespace uroce::verbs {

// Inline progress: one bounded burst of the CQ's engine, then the ring.
int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0) return -1;
  Cq* cq = Cq::From(ibcq);
  Provider::Get().ProgressFromPoll(cq->context->engine);
  return cq->engine_cq->Poll(num_entries, wc);
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = Cq::From(ibcq);
  if (cq->channel == nullptr) return EINVAL;  // no channel to deliver to
  cq->solicited_only.store(solicited_only != 0, std::memory_order_relaxed);
  if (!cq->armed.exchange(true, std::memory_order_acq_rel)) Provider::Get().NoteArmed();
  return 0;
}

// ibv_create_cq_ex(3): the extended poll interface (start_poll / next_poll /
// read_*) is not offered yet.
ibv_cq_ex* CreateCqEx(ibv_context*, ibv_cq_init_attr_ex*) {
  errno = EOPNOTSUPP;
  return nullptr;
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
  if (context == nullptr || cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = Context::From(context);
  auto engine_cq = ctx->engine->CreateCq(static_cast<uint32_t>(cqe));
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
  Provider::Get().RegisterCq(cq);
  return c;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  Cq* cq = Cq::From(ibcq);
  Provider::Get().UnregisterCq(cq);
  uroce::Status s = cq->context->engine->DestroyCq(cq->engine_cq);
  if (!s.ok()) {
    Provider::Get().RegisterCq(cq);
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

int ibv_resize_cq(ibv_cq*, int) { return EOPNOTSUPP; }

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
