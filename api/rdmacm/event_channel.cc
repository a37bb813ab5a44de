// Event channels and events (rdma_create_event_channel(3),
// rdma_get_cm_event(3), rdma_ack_cm_event(3), rdma_migrate_id(3)).
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "api/rdmacm/entry_points.h"
#include "api/rdmacm/objects.h"

namespace uroce::rdmacm {
namespace {

void SignalReadable(EventChannel* channel) {
  const uint64_t one = 1;
  // An eventfd write of 1 cannot fail short of a counter overflow, and the
  // counter is never above 1 here.
  (void)!write(channel->channel.fd, &one, sizeof(one));
}

void ClearReadable(EventChannel* channel) {
  uint64_t count = 0;
  // The counter is 1 while the queue is non-empty: this read never blocks.
  (void)!read(channel->channel.fd, &count, sizeof(count));
}

Event* PopEvent(EventChannel* channel) {
  Event* event = channel->queue.front();
  channel->queue.pop_front();
  if (channel->queue.empty()) ClearReadable(channel);
  return event;
}

}  // namespace

CmId* Charged(const rdma_cm_event* event) {
  return CmId::From(event->listen_id != nullptr ? event->listen_id : event->id);
}

std::vector<Event*> TakeQueued(EventChannel* channel, const std::function<bool(const Event*)>& which) {
  std::vector<Event*> taken;
  auto& queue = channel->queue;
  const bool had_events = !queue.empty();
  for (auto it = queue.begin(); it != queue.end();) {
    if (which(*it)) {
      taken.push_back(*it);
      it = queue.erase(it);
    } else {
      ++it;
    }
  }
  if (had_events && queue.empty()) ClearReadable(channel);
  return taken;
}

void PushEvent(EventChannel* channel, Event* event) {
  const bool was_empty = channel->queue.empty();
  channel->queue.push_back(event);
  if (was_empty) SignalReadable(channel);
}

Event* NewEvent(CmId* id, rdma_cm_event_type type, int status) {
  auto* event = new Event();
  event->event.id = &id->id;
  event->event.event = type;
  event->event.status = status;
  return event;
}

EventChannel* NewEventChannel() {
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* channel = new EventChannel();
  channel->channel.fd = fd;
  return channel;
}

void DeleteEventChannel(EventChannel* channel) {
  for (Event* event : channel->queue) delete event;
  close(channel->channel.fd);
  delete channel;
}

int WaitSync(CmId* id, rdma_cm_event_type expected) {
  if (id->id.event != nullptr) {
    api::rdma_ack_cm_event(id->id.event);
    id->id.event = nullptr;
  }
  rdma_cm_event* event = nullptr;
  if (api::rdma_get_cm_event(id->id.channel, &event) != 0) return -1;
  id->id.event = event;
  if (event->event == expected && event->status == 0) return 0;
  // librdmacm's synchronous calls: a negative status is -errno; a REJ
  // reason (positive) says the peer refused.
  if (event->status < 0) return Fail(-event->status);
  switch (event->event) {
    case RDMA_CM_EVENT_REJECTED:
      return Fail(ECONNREFUSED);
    case RDMA_CM_EVENT_UNREACHABLE:
      return Fail(ETIMEDOUT);
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return Fail(EHOSTUNREACH);
    default:
      return Fail(EINVAL);
  }
}

namespace api {

rdma_event_channel* rdma_create_event_channel(void) {
  // librdmacm fails here with ENODEV when the host has no RDMA device.
  if (!OpenDevices()) {
    errno = ENODEV;
    return nullptr;
  }
  EventChannel* channel = NewEventChannel();
  return channel == nullptr ? nullptr : &channel->channel;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  EventChannel* ours = EventChannel::From(channel);
  if (ours->waiters == 0) {
    DeleteEventChannel(ours);
    return;
  }
  // rdma_destroy_event_channel(3) wants no thread in rdma_get_cm_event; a
  // program that destroys the channel under a waiting thread anyway (rping
  // at exit) must not make that thread read freed memory. With rdma-core,
  // such a thread stays blocked in read(2) until the process ends; here it
  // stays blocked too, and the channel's memory stays (only in this misuse).
  ours->destroyed = true;
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return Fail(EINVAL);
  Registry& registry = GetRegistry();
  EventChannel* ours = EventChannel::From(channel);
  const int fd = channel->fd;
  std::unique_lock<std::mutex> lock(registry.mutex);
  for (;;) {
    if (ours->destroyed) {
      // Destroyed under us: block as rdma-core's read(2) on it would.
      lock.unlock();
      for (;;) pause();
    }
    if (!ours->queue.empty()) {
      Event* next = PopEvent(ours);
      Charged(&next->event)->events_unacked++;
      *event = &next->event;
      return 0;
    }
    // The application may have made the fd non-blocking (rdma_cm(7) shows
    // it): then there is nothing to wait for.
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK) != 0) return Fail(EAGAIN);
    ours->waiters++;
    lock.unlock();
    pollfd pfd{fd, POLLIN, 0};
    const int polled = poll(&pfd, 1, -1);
    const int poll_errno = errno;
    lock.lock();
    ours->waiters--;
    if (polled < 0 && poll_errno != EINTR && !ours->destroyed) {
      errno = poll_errno;
      return -1;
    }
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return Fail(EINVAL);
  Registry& registry = GetRegistry();
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    CmId* id = Charged(event);
    if (id->events_unacked > 0) id->events_unacked--;
  }
  registry.acked.notify_all();
  delete Event::From(event);
  return 0;
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return Fail(EINVAL);
  Registry& registry = GetRegistry();
  std::unique_lock<std::mutex> lock(registry.mutex);
  CmId* ours = CmId::From(id);
  EventChannel* to = nullptr;
  if (channel == nullptr) {
    to = NewEventChannel();  // synchronous from now on (api::rdma_migrate_id(3))
    if (to == nullptr) return -1;
  } else {
    to = EventChannel::From(channel);
  }
  // Events already handed out stay valid; librdmacm waits for them to be
  // acked before the move, and so do we.
  // (A synchronous id's last event, kept in id->event, is not queued.)
  const unsigned kept = id->event != nullptr && Charged(id->event) == ours ? 1u : 0u;
  registry.acked.wait(lock, [&] { return ours->events_unacked <= kept; });
  EventChannel* from = EventChannel::From(id->channel);
  // A listener's connection requests (event.id the new id, listen_id the
  // listener) move with it, as the id's own events do.
  for (Event* moved : TakeQueued(from, [id](const Event* e) { return e->event.id == id || e->event.listen_id == id; })) {
    PushEvent(to, moved);
  }
  if (ours->sync) DeleteEventChannel(from);
  id->channel = &to->channel;
  ours->sync = channel == nullptr;
  return 0;
}

}  // namespace api
}  // namespace uroce::rdmacm
