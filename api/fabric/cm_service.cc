#include "api/fabric/cm_service.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "api/fabric/cm_data.h"
#include "api/fabric/info.h"
#include "runtime/connection_managers.h"

namespace uroce::fabric {
namespace {

int ConnectionRequestClose(fid* f) {
  // fi_cm(3): the handle is the provider's; an application that drops a
  // request without answering may close it. Unanswered requests are
  // rejected so the caller is not left waiting.
  auto* request = reinterpret_cast<ConnectionRequest*>(f);
  if (MarkAnswered(request)) (void)request->cm->Reject(request->id, nullptr, 0);
  request->cm->Release(request->id);
  delete request;
  return 0;
}

int NoBind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int NoControl(fid*, int, void*) { return -FI_ENOSYS; }
int NoOpsOpen(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int NoTostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int NoOpsSet(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

fi_ops kConnectionRequestOps = {sizeof(fi_ops), ConnectionRequestClose, NoBind, NoControl, NoOpsOpen, NoTostr,
                                NoOpsSet};

ssize_t WriteCmEvent(cq::EventQueue* eq, uint32_t event, fid* f, fi_info* info, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(sizeof(fi_eq_cm_entry) + data.size());
  fi_eq_cm_entry entry{};
  entry.fid = f;
  entry.info = info;
  std::memcpy(bytes.data(), &entry, sizeof(entry));
  if (!data.empty()) std::memcpy(bytes.data() + sizeof(entry), data.data(), data.size());
  return eq->WriteEvent(event, bytes.data(), bytes.size());
}

void WriteCmError(cq::EventQueue* eq, fid* f, int err, int prov_errno, const std::vector<uint8_t>& data) {
  fi_eq_err_entry error{};
  error.fid = f;
  error.context = f->context;
  error.err = err;
  error.prov_errno = prov_errno;
  error.err_data = data.empty() ? nullptr : const_cast<uint8_t*>(data.data());
  error.err_data_size = data.size();
  eq->WriteError(error);
}

}  // namespace

CmService& CmService::Get() {
  // Never destroyed: the connection managers' thread calls it until the
  // process ends.
  static CmService* service = [] {
    auto* s = new CmService();
    pthread_atfork(nullptr, nullptr, [] { Get().ForgetParentAfterFork(); });
    return s;
  }();
  return *service;
}

void CmService::ForgetParentAfterFork() {
  new (&mutex_) std::mutex();
  new (&jobs_mutex_) std::mutex();
  new (&jobs_ready_) std::condition_variable();
  jobs_.clear();
  resolver_started_ = false;
  targets_.clear();
}

CmService::CmService() {
  sink_ = runtime::ConnectionManagers::Get().AddSink(
      [this](size_t, cm::ConnectionManager* cm, cm::CmEvent& event) {
        std::lock_guard<std::mutex> lock(mutex_);
        Dispatch(cm, event);
      });
}

StatusOr<cm::ConnectionManager*> CmService::ForDevice(size_t index) {
  return runtime::ConnectionManagers::Get().ForDevice(index);
}

uint64_t CmService::Register(PassiveEndpoint* pep) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t key = runtime::ConnectionManagers::MakeTag(sink_, next_key_++);
  targets_[key].pep = pep;
  return key;
}

uint64_t CmService::Register(Endpoint* ep) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t key = runtime::ConnectionManagers::MakeTag(sink_, next_key_++);
  targets_[key].ep = ep;
  return key;
}

void CmService::Unregister(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_.erase(key);
}

void CmService::ResolveThenConnect(uint64_t key, transport::Engine* engine, transport::PdHandle pd,
                                   cm::ConnectionManager* cm, const cm::CmConnectParams& params) {
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  ResolveJob job;
  job.key = key;
  job.engine = engine;
  job.pd = pd;
  job.cm = cm;
  job.params = params;
  jobs_.push_back(std::move(job));
  if (!resolver_started_) {
    // Never joined, as the service itself: it sleeps while there is no work.
    std::thread([this] { ResolverLoop(); }).detach();
    resolver_started_ = true;
  }
  jobs_ready_.notify_one();
}

void CmService::ResolverLoop() {
  for (;;) {
    ResolveJob job;
    {
      std::unique_lock<std::mutex> lock(jobs_mutex_);
      jobs_ready_.wait(lock, [this] { return !jobs_.empty(); });
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // CreateAh asks the engine's resolver (ARP/ND) for a missing MAC; no lock
    // of ours is held meanwhile, so events and other connects go on.
    const transport::Gid& peer = job.params.remote.gid;
    // The endpoint's own GID when the device has it, else the device's first
    // GID of the peer's IP version.
    const auto& gids = job.engine->config().gids;
    const auto own = std::find(gids.begin(), gids.end(), job.params.local_gid);
    const std::optional<size_t> source =
        own != gids.end() ? std::optional<size_t>(own - gids.begin()) : transport::SourceGidFor(gids, peer);
    const int sgid = source ? static_cast<int>(*source) : -1;
    transport::MacAddress mac{};
    bool resolved = job.engine->LookupNeighbor(peer, &mac);
    if (!resolved && sgid >= 0) {
      ibv_ah_attr attr{};
      attr.is_global = 1;
      attr.port_num = 1;
      attr.grh.sgid_index = static_cast<uint8_t>(sgid);
      attr.grh.hop_limit = 64;
      std::memcpy(attr.grh.dgid.raw, peer.data(), 16);
      auto ah = job.engine->CreateAh(job.pd, attr);
      if (ah.ok()) (void)job.engine->DestroyAh(*ah);
      resolved = job.engine->LookupNeighbor(peer, &mac);
    }
    FinishConnect(job, resolved, mac);
  }
}

void CmService::FinishConnect(ResolveJob& job, bool resolved, const transport::MacAddress& mac) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = targets_.find(job.key);
  Endpoint* ep = it == targets_.end() ? nullptr : it->second.ep;
  if (ep == nullptr) return;  // closed meanwhile
  std::lock_guard<std::mutex> ep_lock(ep->mutex);
  if (!ep->resolving) return;
  ep->resolving = false;
  if (resolved) {
    job.params.has_remote_mac = true;
    job.params.remote_mac = mac;
    auto id = job.cm->Connect(job.params, job.key);
    if (id.ok()) {
      ep->connection = *id;
      ep->has_connection = true;
      return;
    }
  }
  // fi_cm(3): a connect that fails is reported on the EQ as an error event.
  ep->state.store(EndpointState::kShutdown, std::memory_order_release);
  if (ep->eq != nullptr) WriteCmError(ep->eq, &ep->ep.fid, FI_EHOSTUNREACH, 0, {});
}

// mutex_ held.
void CmService::Dispatch(cm::ConnectionManager* cm, cm::CmEvent& event) {
  using cm::CmEventType;
  if (event.type == CmEventType::kConnectRequest) {
    auto it = targets_.find(event.listen_tag);
    PassiveEndpoint* pep = it == targets_.end() ? nullptr : it->second.pep;
    // Refused at once (REJ, nothing kept) when nobody listens any more, or
    // when the listener has as many requests out as it may: the EQ must not
    // fill (fi_eq(3): an overrun EQ is unusable for good).
    if (pep == nullptr || pep->eq == nullptr ||
        pep->unanswered->load(std::memory_order_acquire) >= pep->max_unanswered) {
      (void)cm->Reject(event.id, nullptr, 0);
      cm->Release(event.id);
      return;
    }
    fi_info* info = DupInfo(pep->info);
    auto* request = new ConnectionRequest();
    request->handle.fclass = FI_CLASS_CONNREQ;
    request->handle.ops = &kConnectionRequestOps;
    request->cm = cm;
    request->id = event.id;
    request->unanswered = pep->unanswered;
    if (info == nullptr) {
      (void)cm->Reject(event.id, nullptr, 0);
      cm->Release(event.id);
      delete request;
      return;
    }
    sockaddr_storage ss{};
    size_t len = 0;
    std::free(info->src_addr);
    std::free(info->dest_addr);
    GidToSockaddr(event.local.gid, event.local.port, &ss, &len);
    info->src_addr = std::malloc(len);
    std::memcpy(info->src_addr, &ss, len);
    info->src_addrlen = len;
    GidToSockaddr(event.peer.gid, event.peer.port, &ss, &len);
    info->dest_addr = std::malloc(len);
    std::memcpy(info->dest_addr, &ss, len);
    info->dest_addrlen = len;
    info->handle = &request->handle;
    pep->unanswered->fetch_add(1, std::memory_order_acq_rel);
    // fi_eq(3): the event is the fi_eq_cm_entry and the caller's data, as
    // long as the caller made it (cm_data.h), not the REQ's padded field.
    if (WriteCmEvent(pep->eq, FI_CONNREQ, &pep->pep.fid, info, UnpackCmData(event.private_data)) < 0) {
      // Not queued (the EQ is full or out of memory): nobody will answer
      // it, so refuse it now and keep nothing.
      MarkAnswered(request);
      (void)cm->Reject(event.id, nullptr, 0);
      cm->Release(event.id);
      info->handle = nullptr;
      FreeInfo(info);
      delete request;
    }
    return;
  }
  auto it = targets_.find(event.tag);
  Endpoint* ep = it == targets_.end() ? nullptr : it->second.ep;
  if (ep == nullptr) return;
  std::lock_guard<std::mutex> ep_lock(ep->mutex);
  switch (event.type) {
    case CmEventType::kEstablished: {
      size_t len = 0;
      GidToSockaddr(event.peer.gid, event.peer.port, &ep->peer, &len);
      GidToSockaddr(event.local.gid, event.local.port, &ep->local, &len);
      ep->state.store(EndpointState::kConnected, std::memory_order_release);
      // Active side: the acceptor's data as it passed it (the REP's field
      // is padded; cm_data.h). Passive side: none.
      if (ep->eq != nullptr) {
        WriteCmEvent(ep->eq, FI_CONNECTED, &ep->ep.fid, nullptr, UnpackCmData(event.private_data));
      }
      break;
    }
    case CmEventType::kRejected:
      ep->state.store(EndpointState::kShutdown, std::memory_order_release);
      // err_data: fi_reject's data as the rejecting side passed it
      // (cm_data.h); none for a REJ the peer's CM sent by itself.
      if (ep->eq != nullptr) {
        WriteCmError(ep->eq, &ep->ep.fid, FI_ECONNREFUSED, event.reject_reason, UnpackCmData(event.private_data));
      }
      break;
    case CmEventType::kUnreachable:
      ep->state.store(EndpointState::kShutdown, std::memory_order_release);
      if (ep->eq != nullptr) WriteCmError(ep->eq, &ep->ep.fid, FI_ETIMEDOUT, 0, {});
      break;
    case CmEventType::kDisconnected:
      ep->state.store(EndpointState::kShutdown, std::memory_order_release);
      if (ep->eq != nullptr) WriteCmEvent(ep->eq, FI_SHUTDOWN, &ep->ep.fid, nullptr, {});
      break;
    case CmEventType::kConnectRequest:
      break;
  }
}

}  // namespace uroce::fabric
