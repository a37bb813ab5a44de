#include "api/fabric/cm_service.h"

#include <cstdlib>
#include <cstring>

#include "api/fabric/info.h"
#include "api/verbs/connection_managers.h"

namespace uroce::fabric {
namespace {

int ConnectionRequestClose(fid* f) {
  // fi_cm(3): the handle is the provider's; an application that drops a
  // request without answering may close it. Unanswered requests are
  // rejected so the caller is not left waiting.
  auto* request = reinterpret_cast<ConnectionRequest*>(f);
  if (!request->answered.exchange(true)) (void)request->cm->Reject(request->id, nullptr, 0);
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

void WriteCmEvent(cq::EventQueue* eq, uint32_t event, fid* f, fi_info* info, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(sizeof(fi_eq_cm_entry) + data.size());
  fi_eq_cm_entry entry{};
  entry.fid = f;
  entry.info = info;
  std::memcpy(bytes.data(), &entry, sizeof(entry));
  if (!data.empty()) std::memcpy(bytes.data() + sizeof(entry), data.data(), data.size());
  eq->WriteEvent(event, bytes.data(), bytes.size());
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
  static CmService* service = new CmService();
  return *service;
}

CmService::CmService() {
  sink_ = verbs::ConnectionManagers::Get().AddSink(
      [this](size_t, transport::ConnectionManager* cm, transport::CmEvent& event) {
        std::lock_guard<std::mutex> lock(mutex_);
        Dispatch(cm, event);
      });
}

StatusOr<transport::ConnectionManager*> CmService::ForDevice(size_t index) {
  return verbs::ConnectionManagers::Get().ForDevice(index);
}

uint64_t CmService::Register(PassiveEndpoint* pep) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t key = verbs::ConnectionManagers::MakeTag(sink_, next_key_++);
  targets_[key].pep = pep;
  return key;
}

uint64_t CmService::Register(Endpoint* ep) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t key = verbs::ConnectionManagers::MakeTag(sink_, next_key_++);
  targets_[key].ep = ep;
  return key;
}

void CmService::Unregister(uint64_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_.erase(key);
}

// mutex_ held.
void CmService::Dispatch(transport::ConnectionManager* cm, transport::CmEvent& event) {
  using transport::CmEventType;
  if (event.type == CmEventType::kConnectRequest) {
    auto it = targets_.find(event.listen_tag);
    PassiveEndpoint* pep = it == targets_.end() ? nullptr : it->second.pep;
    if (pep == nullptr || pep->eq == nullptr) {
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
    WriteCmEvent(pep->eq, FI_CONNREQ, &pep->pep.fid, info, event.private_data);
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
      if (ep->eq != nullptr) WriteCmEvent(ep->eq, FI_CONNECTED, &ep->ep.fid, nullptr, event.private_data);
      break;
    }
    case CmEventType::kRejected:
      ep->state.store(EndpointState::kShutdown, std::memory_order_release);
      if (ep->eq != nullptr) WriteCmError(ep->eq, &ep->ep.fid, FI_ECONNREFUSED, event.reject_reason, event.private_data);
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
