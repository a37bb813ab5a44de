// librdmacm's objects inside uroce's libibverbs.so.1. Each wraps rdma-core's
// public struct (applications hold pointers to rdma_event_channel,
// rdma_cm_id and rdma_cm_event and read their fields, rdma_cma.h) with the
// uroce half after it.
//
// One mutex (Registry::mutex) guards every object here: this is the control
// path, and one lock keeps the order with the connection managers' own lock
// simple (Registry::mutex, then a ConnectionManager's; never the reverse).
#pragma once

#include <infiniband/sa.h>
#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cm/connection_manager.h"

namespace uroce::rdmacm {

struct CmId;

// rdma_get_cm_event(3): owned by the channel while queued, by the
// application from rdma_get_cm_event to rdma_ack_cm_event.
struct Event {
  rdma_cm_event event{};  // first
  std::vector<uint8_t> private_data;  // event.param.conn.private_data points here
  static Event* From(rdma_cm_event* e) { return reinterpret_cast<Event*>(e); }
};

// The fd is an eventfd that is readable exactly while the queue holds an
// event (written when the queue becomes non-empty, read back to zero when it
// empties), so applications can poll(2) it as they poll librdmacm's.
struct EventChannel {
  rdma_event_channel channel{};  // first
  std::deque<Event*> queue;
  // Threads inside rdma_get_cm_event on it. A channel destroyed while one
  // waits (rping's main thread does so while its CM thread is blocked) is
  // only marked: the waiter must not wake up in freed memory.
  unsigned waiters = 0;
  bool destroyed = false;
  static EventChannel* From(rdma_event_channel* c) { return reinterpret_cast<EventChannel*>(c); }
};

// The rdma_cm state of an id (rdma_cm(7)): how far it got.
enum class IdState {
  kIdle,
  kBound,
  kAddrResolved,
  kRouteResolved,
  kListening,
  kConnectRequest,  // a passive id the application has not answered yet
  kConnecting,      // rdma_connect sent the REQ
  kAccepting,       // rdma_accept sent the REP
  kConnected,
  kDisconnecting,   // rdma_disconnect sent the DREQ
  kDisconnected,
  kRejected,
  kUnreachable,
};

struct CmId {
  rdma_cm_id id{};  // first
  uint64_t tag = 0;  // the connection managers' tag (Registry::ids key)
  IdState state = IdState::kIdle;
  // Synchronous id (rdma_create_id with no channel, rdma_create_ep): it owns
  // its channel and each call waits for the event that finishes it.
  bool sync = false;
  int device = -1;  // runtime endpoint index once an address names one
  cm::ConnectionManager* cm = nullptr;
  std::vector<std::pair<cm::ConnectionManager*, uint16_t>> listens;  // per device
  cm::CmConnectionId connection = 0;
  bool has_connection = false;
  uint8_t peer_responder_resources = 0;  // what a connect request offered
  uint8_t peer_initiator_depth = 0;
  // RDMA_OPTION_ID_ACK_TIMEOUT. By default 17.2 s per try, longer than the
  // kernel's rdma_cm gives a RoCE connection (the path's packet lifetime,
  // CMA_IBOE_PACKET_LIFETIME 16, plus one: 0.54 s): cm::kLibraryLocalAckTimeout
  // says why. 14 (67 ms) gave up on a slow peer (rxe under qemu) the kernel
  // would have waited for.
  uint8_t ack_timeout = cm::kLibraryLocalAckTimeout;
  bool af_only = false;      // RDMA_OPTION_ID_AFONLY
  ibv_sa_path_rec path{};    // route.path_rec points here once resolved
  unsigned events_unacked = 0;  // handed to the application, not acked yet
  bool owns_cqs = false;        // rdma_create_qp made send_cq/recv_cq
  // rdma_create_ep(3) on the passive side: the QP attributes (and PD) that
  // rdma_get_request gives each new connection's id.
  bool has_request_qp_attr = false;
  ibv_qp_init_attr request_qp_attr{};
  ibv_pd* request_pd = nullptr;
  static CmId* From(rdma_cm_id* i) { return reinterpret_cast<CmId*>(i); }
};

struct Registry {
  std::mutex open_mutex;  // one OpenDevices at a time; taken before mutex
  bool opened = false;    // open_mutex
  std::mutex mutex;
  std::condition_variable acked;  // events_unacked went down
  std::map<uint64_t, CmId*> ids;  // by tag
  uint64_t next_key = 1;
  uint16_t sink = 0;
  std::vector<ibv_context*> contexts;  // by device index
  std::vector<ibv_pd*> default_pds;    // by device index, made on first need
};

Registry& GetRegistry();
// Opens every uroce device once (librdmacm opens them all at first use too)
// and registers with the connection managers. False: no device. A forked
// child opens them anew: its parent's ids and contexts are not its own
// (ibv_fork_init(3)), and the registry forgets them at the fork.
bool OpenDevices();

// Registry::mutex held.
void PushEvent(EventChannel* channel, Event* event);
// The id an event counts against until it is acked (rdma_destroy_id(3) and
// rdma_migrate_id(3) wait for those): a connection request's listener, as in
// librdmacm (the new id has nothing to wait for), else the event's id.
CmId* Charged(const rdma_cm_event* event);
// Takes the queued events `which` selects out of the channel, in order.
std::vector<Event*> TakeQueued(EventChannel* channel, const std::function<bool(const Event*)>& which);
Event* NewEvent(CmId* id, rdma_cm_event_type type, int status);
EventChannel* NewEventChannel();
void DeleteEventChannel(EventChannel* channel);
// Removes the id's queued events (and answers the requests queued for a
// listener) before the id goes away.
void DropQueuedEvents(CmId* id);
void DeleteCmId(CmId* id);

// No lock held. A synchronous id: waits for its next event; 0 if it is
// `expected` with status 0 (kept in id->event until the next call), else -1
// with errno from the event.
int WaitSync(CmId* id, rdma_cm_event_type expected);

// librdmacm's convention: -1 with errno.
inline int Fail(int error) {
  errno = error;
  return -1;
}

}  // namespace uroce::rdmacm
