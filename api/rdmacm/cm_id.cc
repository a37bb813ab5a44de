// rdma_cm ids (rdma_cm(7)): addresses, listening, connecting, accepting and
// disconnecting, over the process's connection managers (IB CM over QP1
// with the RDMA IP CM service of IBTA Annex A11, as the kernel's rdma_cm
// speaks it over RoCE, cm/connection_manager.h).
//
// Events, as librdmacm reports them (rdma_get_cm_event(3)):
//   rdma_resolve_addr -> ADDR_RESOLVED once the peer's MAC is known (ARP /
//     neighbour discovery, waited for in the call up to its timeout_ms), or
//     ADDR_ERROR with status -ETIMEDOUT when nobody answered
//   rdma_resolve_route -> ROUTE_RESOLVED at once (RoCE has no path query)
//   a peer that stops answering later shows as UNREACHABLE after rdma_connect
//   kConnectRequest -> CONNECT_REQUEST on the listener's channel, event->id a
//     new id, private data the caller's 56 bytes after the IP CM header
//   kEstablished    -> ESTABLISHED (active side: the REP's private data)
//   kRejected       -> REJECTED, status the IB CM reject reason (IBTA table
//     112: 28 consumer reject, 8 nobody listening), the REJ's private data
//   kUnreachable    -> UNREACHABLE, status -ETIMEDOUT
//   kDisconnected   -> DISCONNECTED
#include <arpa/inet.h>
#include <pthread.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "api/rdmacm/entry_points.h"
#include "api/rdmacm/objects.h"
#include "api/verbs/objects.h"
#include "cm/socket_address.h"
#include "pmd/log.h"
#include "runtime/connection_managers.h"
#include "runtime/neighbor_resolver.h"
#include "runtime/process.h"

namespace uroce::rdmacm {
namespace {

using cm::CmEvent;
using cm::CmEventType;
using cm::ConnectionManager;
using transport::Gid;

const std::vector<Gid>& GidsOf(int device) {
  return verbs::Context::From(GetRegistry().contexts[static_cast<size_t>(device)])->engine->config().gids;
}

// The first device that has `gid`, or -1.
int DeviceWithGid(const Gid& gid) {
  const auto& contexts = GetRegistry().contexts;
  for (size_t d = 0; d < contexts.size(); ++d) {
    const auto& gids = GidsOf(static_cast<int>(d));
    if (std::find(gids.begin(), gids.end(), gid) != gids.end()) return static_cast<int>(d);
  }
  return -1;
}

// `device`'s first GID of the IP version of `peer`; false if it has none.
bool LocalGidFor(int device, const Gid& peer, Gid* local) {
  const auto& gids = GidsOf(device);
  const std::optional<size_t> index = transport::SourceGidFor(gids, peer);
  if (!index) return false;
  *local = gids[*index];
  return true;
}

// The address the host's routes would send to `peer` from, as a GID (false
// if there is no route): a connected UDP socket asks the routing table and
// sends nothing (ip(7), udp(7)).
bool RouteSourceFor(const Gid& peer, Gid* source) {
  sockaddr_storage to{};
  socklen_t length;
  const bool v4 = transport::IsIpv4MappedGid(peer);
  if (v4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&to);
    in->sin_family = AF_INET;
    in->sin_port = htons(4791);
    std::memcpy(&in->sin_addr, peer.data() + 12, 4);
    length = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&to);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(4791);
    std::memcpy(&in6->sin6_addr, peer.data(), 16);
    length = sizeof(sockaddr_in6);
  }
  const int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage from{};
  socklen_t from_length = sizeof(from);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), length) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_length) == 0;
  close(fd);
  if (!ok) return false;
  if (v4) {
    *source = transport::Ipv4MappedGid(
        reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&from)->sin_addr));
  } else {
    std::memcpy(source->data(), &reinterpret_cast<const sockaddr_in6*>(&from)->sin6_addr, 16);
  }
  return true;
}

// The device the host's routes lead to `peer` through, when one of ours has
// the source address the kernel would use (a uroce daemon's devices have the
// kernel's addresses: with several uplinks, as the kernel's rdma_cm picks the
// route's netdev); otherwise the first device with a GID of `peer`'s IP
// version; -1 if none.
int DeviceForPeer(const Gid& peer) {
  Gid source;
  if (RouteSourceFor(peer, &source)) {
    const int routed = DeviceWithGid(source);
    if (routed >= 0) return routed;
  }
  Gid unused;
  for (size_t d = 0; d < GetRegistry().contexts.size(); ++d) {
    if (LocalGidFor(static_cast<int>(d), peer, &unused)) return static_cast<int>(d);
  }
  return -1;
}

// No Registry::mutex held (ConnectionManagers' rule).
// The peer's MAC on `device`'s port, asked for if not known yet (ARP / ND),
// waiting up to timeout_ms (the port's resolve timeout when not positive).
Status ResolveNeighbor(int device, const Gid& peer, int timeout_ms) {
  runtime::Runtime* runtime = runtime::Process::Get().runtime();
  if (runtime == nullptr || static_cast<size_t>(device) >= runtime->device_count()) {
    return FailedPrecondition("the runtime is not running");
  }
  runtime::NeighborResolver* neighbors = runtime->device(static_cast<size_t>(device)).neighbors.get();
  if (neighbors == nullptr) return FailedPrecondition("the port has no neighbour resolver");
  return neighbors->Resolve(peer, timeout_ms > 0 ? static_cast<unsigned>(timeout_ms) : 0);
}

// No Registry::mutex held. What the connection manager queued on `device`'s
// QP 1 (a REJ) leaves before the call returns: a program may end right
// after it (pyverbs' test processes end with _exit, so no exit handler
// runs), and the kernel's ib_cm sends a REJ whatever its caller does next.
// One inline poll of the device's engine sends it; with engine lcores, or
// while another thread polls, that thread does.
void TransmitNow(int device) {
  runtime::Runtime* runtime = runtime::Process::Get().runtime();
  if (runtime == nullptr || device < 0 || static_cast<size_t>(device) >= runtime->device_count()) return;
  runtime::Process::Get().PollOnce(runtime->device(static_cast<size_t>(device)).side.engine.get());
}

ConnectionManager* CmForDevice(int device) {
  auto cm = runtime::ConnectionManagers::Get().ForDevice(static_cast<size_t>(device));
  if (!cm.ok()) {
    UROCE_LOG(ERR, kApi, "rdma_cm: %s\n", cm.status().ToString().c_str());
    return nullptr;
  }
  return *cm;
}

void SetAddress(sockaddr_storage* out, const Gid& gid, uint16_t port) {
  size_t length = 0;
  cm::GidToSockaddr(gid, port, out, &length);
}

// route.addr and the path record from the two ends (rdma_cm_id's route is
// what rdma_get_local_addr(3) and rdma_get_peer_addr(3) read).
void SetRoute(CmId* id, const cm::CmAddress& local, const cm::CmAddress& peer) {
  rdma_addr& addr = id->id.route.addr;
  SetAddress(&addr.src_storage, local.gid, local.port);
  SetAddress(&addr.dst_storage, peer.gid, peer.port);
  std::memcpy(addr.addr.ibaddr.sgid.raw, local.gid.data(), 16);
  std::memcpy(addr.addr.ibaddr.dgid.raw, peer.gid.data(), 16);
  addr.addr.ibaddr.pkey = htons(0xFFFF);
  ibv_sa_path_rec& path = id->path;
  std::memcpy(path.sgid.raw, local.gid.data(), 16);
  std::memcpy(path.dgid.raw, peer.gid.data(), 16);
  path.pkey = htons(0xFFFF);
  path.hop_limit = 64;
  path.reversible = 1;
  path.numb_path = 1;
  const auto* context = verbs::Context::From(id->id.verbs);
  const uint32_t mtu = context->engine->limits().max_mtu;
  path.mtu = static_cast<uint8_t>(mtu);
  id->id.route.path_rec = &id->path;
  id->id.route.num_paths = 1;
}

void AttachDevice(CmId* id, int device, ConnectionManager* cm) {
  id->device = device;
  id->cm = cm;
  id->id.verbs = GetRegistry().contexts[static_cast<size_t>(device)];
  id->id.port_num = 1;
}

bool LocalAddress(const CmId* id, Gid* gid, uint16_t* port) {
  return cm::SockaddrToGid(&id->id.route.addr.src_addr, gid, port);
}

CmId* NewCmId(rdma_event_channel* channel, void* context, rdma_port_space ps) {
  Registry& registry = GetRegistry();
  auto* id = new CmId();
  id->id.channel = channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = IBV_QPT_RC;
  id->tag = runtime::ConnectionManagers::MakeTag(registry.sink, registry.next_key++);
  registry.ids[id->tag] = id;
  return id;
}

void CopyPrivateData(Event* event, const std::vector<uint8_t>& data) {
  if (data.empty()) return;
  event->private_data = data;
  event->event.param.conn.private_data = event->private_data.data();
  event->event.param.conn.private_data_len = static_cast<uint8_t>(std::min<size_t>(data.size(), 255));
}

// Whether a listener bound to a specific address or family takes a request
// that arrived for local address `local` (rdma_bind_addr(3): a listener
// bound to one address only hears that address; AF_INET wildcards hear IPv4
// only; AF_INET6 wildcards both, unless RDMA_OPTION_ID_AFONLY).
bool ListenerTakes(const CmId* listener, const Gid& local) {
  const sockaddr* bound = &listener->id.route.addr.src_addr;
  const bool v4 = transport::IsIpv4MappedGid(local);
  if (!cm::IsWildcardSockaddr(bound)) {
    Gid gid;
    uint16_t port;
    return cm::SockaddrToGid(bound, &gid, &port) && gid == local;
  }
  if (bound->sa_family == AF_INET) return v4;
  return !(listener->af_only && v4);
}

// The connection managers' events for our ids (the polling thread).
void OnCmEvent(size_t device, ConnectionManager* cm, CmEvent& event) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  if (event.type == CmEventType::kConnectRequest) {
    auto it = registry.ids.find(event.listen_tag);
    CmId* listener = it == registry.ids.end() ? nullptr : it->second;
    if (listener == nullptr || listener->state != IdState::kListening || !ListenerTakes(listener, event.local.gid)) {
      (void)cm->Reject(event.id, nullptr, 0);
      cm->Release(event.id);
      return;
    }
    rdma_event_channel* channel = listener->id.channel;
    bool sync = false;
    if (listener->sync) {
      // A synchronous listener's new ids are synchronous too (librdmacm
      // gives each its own channel; rdma_get_request(3) hands them out).
      EventChannel* own = NewEventChannel();
      if (own == nullptr) {
        (void)cm->Reject(event.id, nullptr, 0);
        cm->Release(event.id);
        return;
      }
      channel = &own->channel;
      sync = true;
    }
    CmId* child = NewCmId(channel, listener->id.context, listener->id.ps);
    child->sync = sync;
    AttachDevice(child, static_cast<int>(device), cm);
    SetRoute(child, event.local, event.peer);
    child->state = IdState::kConnectRequest;
    child->connection = event.id;
    child->has_connection = true;
    child->peer_responder_resources = event.peer_responder_resources;
    child->peer_initiator_depth = event.peer_initiator_depth;
    child->ack_timeout = listener->ack_timeout;
    Event* out = NewEvent(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    out->event.listen_id = &listener->id;
    CopyPrivateData(out, event.private_data);
    // From this side's point of view: what we may accept of the caller's
    // reads is its initiator depth, and the other way round.
    out->event.param.conn.responder_resources = event.peer_initiator_depth;
    out->event.param.conn.initiator_depth = event.peer_responder_resources;
    PushEvent(EventChannel::From(listener->id.channel), out);
    return;
  }
  auto it = registry.ids.find(event.tag);
  if (it == registry.ids.end()) return;  // the id was destroyed: it released the connection
  CmId* id = it->second;
  Event* out = nullptr;
  switch (event.type) {
    case CmEventType::kEstablished:
      id->state = IdState::kConnected;
      SetRoute(id, event.local, event.peer);
      out = NewEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      CopyPrivateData(out, event.private_data);
      break;
    case CmEventType::kRejected:
      id->state = IdState::kRejected;
      out = NewEvent(id, RDMA_CM_EVENT_REJECTED, event.reject_reason);
      CopyPrivateData(out, event.private_data);
      break;
    case CmEventType::kUnreachable:
      id->state = IdState::kUnreachable;
      out = NewEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      break;
    case CmEventType::kDisconnected:
      id->state = IdState::kDisconnected;
      out = NewEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      break;
    case CmEventType::kConnectRequest:
      return;
  }
  PushEvent(EventChannel::From(id->id.channel), out);
}

}  // namespace

namespace {

// pthread_atfork(3)'s child handler: the ids, channels' events and contexts
// are the parent's (its runtime, which the child lets go of:
// runtime::Process); the child opens its own at its first use. The objects
// are let go of, never destroyed, and every lock is made anew (only the
// forking thread exists in the child). The sink number stays: the
// connection managers keep their consumers across the fork.
void ForgetParentAfterFork() {
  Registry& registry = GetRegistry();
  new (&registry.open_mutex) std::mutex();
  new (&registry.mutex) std::mutex();
  new (&registry.acked) std::condition_variable();
  registry.opened = false;
  registry.ids.clear();
  registry.contexts.clear();
  registry.default_pds.clear();
}

}  // namespace

Registry& GetRegistry() {
  // Never destroyed: the connection managers' thread may call in until the
  // process ends.
  static Registry* registry = [] {
    auto* r = new Registry();
    pthread_atfork(nullptr, nullptr, ForgetParentAfterFork);
    return r;
  }();
  return *registry;
}

bool OpenDevices() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> open_lock(registry.open_mutex);
  if (!registry.opened) {
    int count = 0;
    ibv_device** devices = ibv_get_device_list(&count);
    std::vector<ibv_context*> contexts;
    for (int i = 0; devices != nullptr && i < count; ++i) {
      ibv_context* context = ibv_open_device(devices[i]);
      if (context == nullptr) continue;
      const size_t index = verbs::Context::From(context)->device->index;
      if (contexts.size() <= index) contexts.resize(index + 1, nullptr);
      contexts[index] = context;
    }
    if (devices != nullptr) ibv_free_device_list(devices);
    // Device indexes are the configuration's endpoints: all of them open, or
    // the runtime did not start.
    if (std::find(contexts.begin(), contexts.end(), nullptr) != contexts.end()) contexts.clear();
    uint16_t sink = 0;
    {
      std::lock_guard<std::mutex> lock(registry.mutex);
      sink = registry.sink;
    }
    if (sink == 0) sink = runtime::ConnectionManagers::Get().AddSink(OnCmEvent);
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.contexts = std::move(contexts);
    registry.default_pds.assign(registry.contexts.size(), nullptr);
    registry.sink = sink;
    registry.opened = true;
  }
  std::lock_guard<std::mutex> lock(registry.mutex);
  return !registry.contexts.empty();
}

void DropQueuedEvents(CmId* id) {
  EventChannel* channel = EventChannel::From(id->id.channel);
  // Requests queued for a listener that goes away: their ids were never
  // handed out; refuse the callers (as the kernel's rdma_cm does).
  for (Event* event : TakeQueued(channel, [id](const Event* e) {
         return e->event.id == &id->id || e->event.listen_id == &id->id;
       })) {
    if (event->event.listen_id == &id->id) {
      CmId* child = CmId::From(event->event.id);
      (void)child->cm->Reject(child->connection, nullptr, 0);
      child->cm->Release(child->connection);
      GetRegistry().ids.erase(child->tag);
      if (child->sync) DeleteEventChannel(EventChannel::From(child->id.channel));
      delete child;
    }
    delete event;
  }
}

void DeleteCmId(CmId* id) {
  GetRegistry().ids.erase(id->tag);
  if (id->sync) DeleteEventChannel(EventChannel::From(id->id.channel));
  delete id;
}

namespace api {

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  if (id == nullptr) return Fail(EINVAL);
  if (ps != RDMA_PS_TCP) {
    // The connection manager speaks the RDMA IP CM service for TCP-like
    // ports (service IDs 0x106xxxx) with RC QPs; UD (RDMA_PS_UDP's SIDR),
    // IPoIB and native IB port spaces are not there.
    UROCE_LOG(ERR, kApi, "rdma_create_id: only RDMA_PS_TCP is supported (port space 0x%x asked)\n",
                 static_cast<unsigned>(ps));
    return Fail(EPROTONOSUPPORT);
  }
  if (!OpenDevices()) return Fail(ENODEV);
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  bool sync = false;
  if (channel == nullptr) {
    EventChannel* own = NewEventChannel();
    if (own == nullptr) return -1;
    channel = &own->channel;
    sync = true;
  }
  CmId* ours = NewCmId(channel, context, ps);
  ours->sync = sync;
  *id = &ours->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  if (id->event != nullptr) {  // a synchronous id's last event
    api::rdma_ack_cm_event(id->event);
    id->event = nullptr;
  }
  Registry& registry = GetRegistry();
  std::unique_lock<std::mutex> lock(registry.mutex);
  // rdma_destroy_id(3): waits until every event reported for the id is acked.
  registry.acked.wait(lock, [&] { return ours->events_unacked == 0; });
  DropQueuedEvents(ours);
  for (const auto& [cm, port] : ours->listens) (void)cm->StopListening(port);
  if (ours->has_connection) {
    switch (ours->state) {
      case IdState::kConnectRequest:
        (void)ours->cm->Reject(ours->connection, nullptr, 0);
        break;
      case IdState::kConnecting:
      case IdState::kAccepting:
      case IdState::kConnected:
        // As the kernel's rdma_cm does for a connected id: DREQ.
        (void)ours->cm->Disconnect(ours->connection);
        break;
      default:
        break;
    }
    ours->cm->Release(ours->connection);
  }
  DeleteCmId(ours);
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return Fail(EINVAL);
  Gid gid;
  uint16_t port = 0;
  if (!cm::SockaddrToGid(addr, &gid, &port)) return Fail(EAFNOSUPPORT);
  int device = -1;
  ConnectionManager* cm = nullptr;
  if (!cm::IsWildcardSockaddr(addr)) {
    {
      std::lock_guard<std::mutex> lock(GetRegistry().mutex);
      device = DeviceWithGid(gid);
    }
    // The kernel's rdma_cm: an address no RDMA device has is ENODEV.
    if (device < 0) return Fail(ENODEV);
    cm = CmForDevice(device);
    if (cm == nullptr) return Fail(ENODEV);
  }
  std::lock_guard<std::mutex> lock(GetRegistry().mutex);
  CmId* ours = CmId::From(id);
  if (ours->state != IdState::kIdle) return Fail(EINVAL);
  std::memcpy(&id->route.addr.src_storage, addr, cm::SockaddrLength(addr));
  if (device >= 0) AttachDevice(ours, device, cm);
  ours->state = IdState::kBound;
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  if (id == nullptr || dst_addr == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  if (ours->state == IdState::kIdle && src_addr != nullptr && api::rdma_bind_addr(id, src_addr) != 0) return -1;
  Gid peer;
  uint16_t peer_port = 0;
  if (!cm::SockaddrToGid(dst_addr, &peer, &peer_port)) return Fail(EAFNOSUPPORT);
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state != IdState::kIdle && ours->state != IdState::kBound) return Fail(EINVAL);
    device = ours->device >= 0 ? ours->device : DeviceForPeer(peer);
  }
  if (device < 0) return Fail(ENETUNREACH);  // no device speaks this IP version
  ConnectionManager* cm = CmForDevice(device);
  if (cm == nullptr) return Fail(ENODEV);
  // Address resolution is the peer's MAC (ARP / neighbour discovery), as the
  // kernel's rdma_cm does it: an unanswered peer is ADDR_ERROR within the
  // caller's timeout, not a connect that retries its REQ for a minute. No
  // lock is held while it waits.
  const Status reachable = ResolveNeighbor(device, peer, timeout_ms);
  if (!reachable.ok()) {
    UROCE_LOG(ERR, kApi, "rdma_resolve_addr: %s\n", reachable.ToString().c_str());
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state != IdState::kIdle && ours->state != IdState::kBound) return Fail(EINVAL);
    const int status = reachable.code() == StatusCode::kUnavailable ? -ETIMEDOUT : -EHOSTUNREACH;
    PushEvent(EventChannel::From(id->channel), NewEvent(ours, RDMA_CM_EVENT_ADDR_ERROR, status));
  } else {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if (ours->state != IdState::kIdle && ours->state != IdState::kBound) return Fail(EINVAL);
    cm::CmAddress local;
    cm::CmAddress remote{peer, peer_port};
    Gid bound;
    if (LocalAddress(ours, &bound, &local.port) && !cm::IsWildcardSockaddr(&id->route.addr.src_addr)) {
      if (transport::IsIpv4MappedGid(bound) != transport::IsIpv4MappedGid(peer)) return Fail(EAFNOSUPPORT);
      local.gid = bound;
    } else if (!LocalGidFor(device, peer, &local.gid)) {
      return Fail(ENETUNREACH);
    }
    AttachDevice(ours, device, cm);
    SetRoute(ours, local, remote);
    ours->state = IdState::kAddrResolved;
    PushEvent(EventChannel::From(id->channel), NewEvent(ours, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
  }
  return ours->sync ? WaitSync(ours, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

int rdma_resolve_route(rdma_cm_id* id, int /*timeout_ms*/) {
  if (id == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state != IdState::kAddrResolved) return Fail(EINVAL);
    // RoCE has no path query: the path is the GIDs (IBTA Annex A16/A17).
    ours->state = IdState::kRouteResolved;
    PushEvent(EventChannel::From(id->channel), NewEvent(ours, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
  }
  return ours->sync ? WaitSync(ours, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  // rdma_listen(3): "backlog - backlog of incoming connection requests".
  // Requests beyond it are refused (REJ "no resources") by the connection
  // manager, which keeps no state for them; 0 or less: its default.
  const unsigned queue = backlog > 0 ? static_cast<unsigned>(backlog) : cm::kCmDefaultBacklog;
  if (id == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  std::vector<std::pair<int, ConnectionManager*>> targets;
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state == IdState::kIdle) {
      // Unbound: every address, IPv4 and IPv6, an ephemeral port.
      sockaddr_in6 any{};
      any.sin6_family = AF_INET6;
      std::memcpy(&id->route.addr.src_storage, &any, sizeof(any));
      ours->state = IdState::kBound;
    }
    if (ours->state != IdState::kBound) return Fail(EINVAL);
    if (ours->device >= 0) {
      targets.emplace_back(ours->device, ours->cm);
    } else {
      for (size_t d = 0; d < GetRegistry().contexts.size(); ++d) targets.emplace_back(static_cast<int>(d), nullptr);
    }
  }
  for (auto& [device, cm] : targets) {
    if (cm == nullptr) cm = CmForDevice(device);
    if (cm == nullptr) return Fail(ENODEV);
  }
  std::lock_guard<std::mutex> lock(GetRegistry().mutex);
  if (ours->state != IdState::kBound) return Fail(EINVAL);
  uint16_t port = cm::SockaddrPort(&id->route.addr.src_addr);
  for (const auto& [device, cm] : targets) {
    auto listening = cm->Listen(port, ours->tag, queue);
    if (!listening.ok()) {
      for (const auto& [done_cm, done_port] : ours->listens) (void)done_cm->StopListening(done_port);
      ours->listens.clear();
      return Fail(listening.status().ToErrno());
    }
    port = *listening;  // port 0: the first device picked it; the others follow
    ours->listens.emplace_back(cm, port);
  }
  if (id->route.addr.src_addr.sa_family == AF_INET) {
    id->route.addr.src_sin.sin_port = htons(port);
  } else {
    id->route.addr.src_sin6.sin6_port = htons(port);
  }
  ours->state = IdState::kListening;
  return 0;
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return Fail(EINVAL);
  CmId* listener = CmId::From(listen);
  if (!listener->sync || listener->state != IdState::kListening) return Fail(EINVAL);
  rdma_cm_event* event = nullptr;
  if (api::rdma_get_cm_event(listen->channel, &event) != 0) return -1;
  if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    const int status = event->status;
    api::rdma_ack_cm_event(event);
    return Fail(status < 0 ? -status : EINVAL);
  }
  // rdma_create_ep(3): an endpoint made with QP attributes gives every
  // request's id a QP made with them.
  if (listener->has_request_qp_attr) {
    ibv_qp_init_attr attr = listener->request_qp_attr;
    if (api::rdma_create_qp(event->id, listener->request_pd, &attr) != 0) {
      const int error = errno;
      (void)api::rdma_reject(event->id, nullptr, 0);
      rdma_cm_id* child = event->id;
      api::rdma_ack_cm_event(event);
      api::rdma_destroy_id(child);
      return Fail(error);
    }
  }
  // The request stays readable in the new id's event (its private data)
  // until the id's next synchronous call or rdma_destroy_id.
  *id = event->id;
  (*id)->event = event;
  return 0;
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state != IdState::kRouteResolved) return Fail(EINVAL);
    if (id->qp == nullptr) {
      // Our connection manager moves the QP through RTR and RTS itself; a QP
      // the application made and moves (conn_param->qp_num, rdma_establish)
      // is not supported.
      UROCE_LOG(ERR, kApi, "rdma_connect needs a QP made by rdma_create_qp on the id\n");
      return Fail(EOPNOTSUPP);
    }
    if (conn_param != nullptr && conn_param->private_data_len > cm::kCmReqUserDataSize) return Fail(EINVAL);
    cm::CmConnectParams params;
    params.qp = verbs::Qp::From(id->qp)->engine_qp;
    uint16_t local_port = 0;
    Gid local;
    if (LocalAddress(ours, &local, &local_port)) params.local_gid = local;
    params.local_port = local_port;
    (void)cm::SockaddrToGid(&id->route.addr.dst_addr, &params.remote.gid, &params.remote.port);
    params.local_ack_timeout = ours->ack_timeout;
    if (conn_param != nullptr) {
      params.responder_resources = conn_param->responder_resources;
      params.initiator_depth = conn_param->initiator_depth;
      params.retry_count = std::min<uint8_t>(conn_param->retry_count, 7);
      params.rnr_retry_count = std::min<uint8_t>(conn_param->rnr_retry_count, 7);
      const auto* data = static_cast<const uint8_t*>(conn_param->private_data);
      if (data != nullptr) params.private_data.assign(data, data + conn_param->private_data_len);
    }
    auto connection = ours->cm->Connect(params, ours->tag);
    if (!connection.ok()) {
      UROCE_LOG(ERR, kApi, "rdma_connect: %s\n", connection.status().ToString().c_str());
      return Fail(connection.status().ToErrno());
    }
    ours->connection = *connection;
    ours->has_connection = true;
    ours->state = IdState::kConnecting;
  }
  return ours->sync ? WaitSync(ours, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_establish(rdma_cm_id* /*id*/) {
  // Only needed after CONNECT_RESPONSE, which uroce never reports: the
  // connection manager sends the RTU itself (rdma_connect above).
  UROCE_LOG(ERR, kApi, "rdma_establish is not supported (QPs not made by rdma_create_qp)\n");
  return Fail(EOPNOTSUPP);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    if (ours->state != IdState::kConnectRequest) return Fail(EINVAL);
    if (id->qp == nullptr) {
      UROCE_LOG(ERR, kApi, "rdma_accept needs a QP made by rdma_create_qp on the id\n");
      return Fail(EOPNOTSUPP);
    }
    if (conn_param != nullptr && conn_param->private_data_len > cm::kCmRepPrivateDataSize) {
      return Fail(EINVAL);
    }
    cm::CmAcceptParams params;
    params.qp = verbs::Qp::From(id->qp)->engine_qp;
    params.local_ack_timeout = ours->ack_timeout;
    // rdma_accept(3): with no parameters, what the caller asked for.
    params.responder_resources = ours->peer_initiator_depth;
    params.initiator_depth = ours->peer_responder_resources;
    if (conn_param != nullptr) {
      params.responder_resources = conn_param->responder_resources;
      params.initiator_depth = conn_param->initiator_depth;
      params.rnr_retry_count = std::min<uint8_t>(conn_param->rnr_retry_count, 7);
      const auto* data = static_cast<const uint8_t*>(conn_param->private_data);
      if (data != nullptr) params.private_data.assign(data, data + conn_param->private_data_len);
    }
    Status accepted = ours->cm->Accept(ours->connection, params, ours->tag);
    if (!accepted.ok()) {
      UROCE_LOG(ERR, kApi, "rdma_accept: %s\n", accepted.ToString().c_str());
      ours->state = IdState::kRejected;
      return Fail(accepted.ToErrno());
    }
    ours->state = IdState::kAccepting;
  }
  return ours->sync ? WaitSync(ours, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr) return Fail(EINVAL);
  if (private_data_len > cm::kCmRejPrivateDataSize) return Fail(EINVAL);
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(GetRegistry().mutex);
    CmId* ours = CmId::From(id);
    if (ours->state != IdState::kConnectRequest) return Fail(EINVAL);
    Status rejected = ours->cm->Reject(ours->connection, static_cast<const uint8_t*>(private_data),
                                       private_data == nullptr ? 0 : private_data_len);
    if (!rejected.ok()) return Fail(rejected.ToErrno());
    ours->state = IdState::kRejected;
    device = ours->device;
  }
  TransmitNow(device);
  return 0;
}

int rdma_disconnect(rdma_cm_id* id) {
  if (id == nullptr) return Fail(EINVAL);
  std::lock_guard<std::mutex> lock(GetRegistry().mutex);
  CmId* ours = CmId::From(id);
  switch (ours->state) {
    case IdState::kConnecting:
    case IdState::kAccepting:
    case IdState::kConnected:
      break;
    case IdState::kDisconnecting:
    case IdState::kDisconnected:
    case IdState::kRejected:
    case IdState::kUnreachable:
      // Already over: the kernel's rdma_cm answers 0 here too, and programs
      // call rdma_disconnect after DISCONNECTED as a matter of course.
      return 0;
    default:
      return Fail(EINVAL);
  }
  // The connection manager moves the QP to ERR (its work is flushed) and
  // sends DREQ; DISCONNECTED follows on both sides.
  Status disconnected = ours->cm->Disconnect(ours->connection);
  if (!disconnected.ok()) return Fail(disconnected.ToErrno());
  ours->state = IdState::kDisconnecting;
  return 0;
}

int rdma_notify(rdma_cm_id* id, ibv_event_type /*event*/) {
  // IBV_EVENT_COMM_EST: the connection manager already counts the first
  // packet on a QP as the RTU (IBTA 12.9.6.3).
  return id == nullptr ? Fail(EINVAL) : 0;
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  if (id == nullptr || optval == nullptr) return Fail(EINVAL);
  std::lock_guard<std::mutex> lock(GetRegistry().mutex);
  CmId* ours = CmId::From(id);
  if (level != RDMA_OPTION_ID) return Fail(ENOSYS);  // RDMA_OPTION_IB_PATH: no IB paths on RoCE
  switch (optname) {
    case RDMA_OPTION_ID_TOS:
      // Accepted; the engine sends every packet with traffic class 0.
      return optlen == sizeof(uint8_t) ? 0 : Fail(EINVAL);
    case RDMA_OPTION_ID_REUSEADDR:
      return optlen == sizeof(int) ? 0 : Fail(EINVAL);
    case RDMA_OPTION_ID_AFONLY:
      if (optlen != sizeof(int)) return Fail(EINVAL);
      ours->af_only = *static_cast<int*>(optval) != 0;
      return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (optlen != sizeof(uint8_t)) return Fail(EINVAL);
      ours->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31);
      return 0;
    default:
      return Fail(ENOSYS);
  }
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  return id == nullptr ? 0 : htons(cm::SockaddrPort(&id->route.addr.src_addr));
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  return id == nullptr ? 0 : htons(cm::SockaddrPort(&id->route.addr.dst_addr));
}

ibv_context** rdma_get_devices(int* num_devices) {
  if (!OpenDevices()) {
    if (num_devices != nullptr) *num_devices = 0;
    errno = ENODEV;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(GetRegistry().mutex);
  const auto& contexts = GetRegistry().contexts;
  auto** list = static_cast<ibv_context**>(std::calloc(contexts.size() + 1, sizeof(ibv_context*)));
  if (list == nullptr) return nullptr;
  std::copy(contexts.begin(), contexts.end(), list);
  if (num_devices != nullptr) *num_devices = static_cast<int>(contexts.size());
  return list;
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return Fail(EINVAL);
  const auto ps = res->ai_port_space != 0 ? static_cast<rdma_port_space>(res->ai_port_space) : RDMA_PS_TCP;
  rdma_cm_id* made = nullptr;
  if (api::rdma_create_id(nullptr, &made, nullptr, ps) != 0) return -1;
  int result = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    result = api::rdma_bind_addr(made, res->ai_src_addr);
  } else {
    result = api::rdma_resolve_addr(made, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (result == 0) result = api::rdma_resolve_route(made, 2000);
  }
  if (result == 0 && qp_init_attr != nullptr) {
    // The QP's type is the address's (rdma_getaddrinfo: RC for RDMA_PS_TCP),
    // as librdmacm does; a passive endpoint keeps the attributes for
    // rdma_get_request.
    if (res->ai_qp_type != 0) qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (res->ai_flags & RAI_PASSIVE) {
      CmId* ours = CmId::From(made);
      ours->has_request_qp_attr = true;
      ours->request_qp_attr = *qp_init_attr;
      ours->request_pd = pd;
    } else {
      result = api::rdma_create_qp(made, pd, qp_init_attr);
    }
  }
  if (result != 0) {
    const int error = errno;
    api::rdma_destroy_id(made);
    return Fail(error);
  }
  *id = made;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) api::rdma_destroy_qp(id);
  if (id->srq != nullptr) api::rdma_destroy_srq(id);
  api::rdma_destroy_id(id);
}

}  // namespace api
}  // namespace uroce::rdmacm
