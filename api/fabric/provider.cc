// uroce's libfabric provider: struct fi_provider (fi_provider(7)), getinfo,
// the fabric, the domain, memory registration and the passive endpoint. The
// active endpoint is in endpoint.cc, connection events in cm_service.cc.
//
// The provider is reached through uroce_fi_provider_v1(), which uroce's
// libibverbs.so.1 exports (version UROCE_PRIVATE_1) and liburoce-fi.so
// returns from fi_prov_ini.
#include "api/fabric/provider.h"

#include <rdma/providers/fi_prov.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "api/fabric/cm_data.h"
#include "api/fabric/cm_service.h"
#include "api/fabric/info.h"
#include "api/fabric/objects.h"
#include "api/fabric/unsupported.h"
#include "pmd/log.h"
#include "runtime/process.h"

namespace uroce::fabric {
namespace {

runtime::Process& Process() { return runtime::Process::Get(); }

// The devices of UROCE_CONFIG as getinfo sees them.
std::vector<DeviceAddresses> Devices() {
  std::vector<DeviceAddresses> out;
  const runtime::UroceConfig* config = Process().LoadConfig();  // loaded once
  if (config == nullptr) return out;
  for (size_t i = 0; i < config->endpoints.size(); ++i) {
    DeviceAddresses d;
    d.domain_name = "uroce" + std::to_string(i);
    // Every address of the port: the connection manager speaks for each
    // (getinfo lists IPv4 first, then IPv6).
    d.gids = config->endpoints[i].gids;
    d.mtu = config->endpoints[i].mtu;
    out.push_back(std::move(d));
  }
  return out;
}

// The runtime endpoint whose device is named `name` ("uroce0"), or -1.
int DeviceIndex(const char* name) {
  if (name == nullptr) return 0;
  const std::vector<DeviceAddresses> devices = Devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].domain_name == name) return static_cast<int>(i);
  }
  return -1;
}

int StartRuntime() {
  const int e = Process().Start();
  return e == 0 ? 0 : -e;
}


// ---- Memory regions (fi_mr(3)) ----

int MrClose(fid* f) {
  auto* mr = reinterpret_cast<MemoryRegion*>(f);
  Status s = mr->domain->engine->DeregMr(mr->lkey);
  if (!s.ok()) return -FI_EBUSY;
  mr->domain->open_objects.fetch_sub(1);
  delete mr;
  return 0;
}

fi_ops kMrOps = {sizeof(fi_ops),
                 MrClose,
                 Enosys<decltype(fi_ops::bind)>::Call,
                 Enosys<decltype(fi_ops::control)>::Call,
                 Enosys<decltype(fi_ops::ops_open)>::Call,
                 Enosys<decltype(fi_ops::tostr)>::Call,
                 Enosys<decltype(fi_ops::ops_set)>::Call};

// fi_mr(3) access bits -> verbs access flags. Local read is implied in verbs;
// FI_WRITE / FI_RECV / FI_READ (the buffer is written locally by a receive or
// by the data an RDMA read brings back) need local write.
int AccessFlags(uint64_t access) {
  int flags = 0;
  if (access & (FI_RECV | FI_READ)) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & FI_REMOTE_WRITE) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if (access & FI_REMOTE_READ) flags |= IBV_ACCESS_REMOTE_READ;
  if (access == 0) {
    flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  }
  // A buffer that fetching atomics write their results to.
  if (access & (FI_SEND | FI_WRITE)) flags |= IBV_ACCESS_LOCAL_WRITE;
  return flags;
}

int RegisterMemory(Domain* domain, const void* buf, size_t len, uint64_t access, uint64_t offset,
                   uint64_t flags, void* context, fid_mr** out) {
  if (out == nullptr || (buf == nullptr && len != 0)) return -FI_EINVAL;
  // Flags (fi_mr(3)) that change nothing for host memory registered by
  // address are accepted (ofi_rxm's buffer pools pass some); none asks for
  // anything uroce cannot do (libfabric 1.17 has no dma-buf flag yet).
  (void)flags;
  // FI_MR_VIRT_ADDR: the peer addresses the region by its virtual address;
  // otherwise by offset from `offset` (fi_mr(3) "offset").
  const uint64_t iova = (domain->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(buf) : offset;
  auto keys = domain->engine->RegMr(domain->pd, const_cast<void*>(buf), len, iova, AccessFlags(access));
  if (!keys.ok()) {
    UROCE_LOG(ERR, kApi, "fi_mr_reg(%p, %zu): %s\n", buf, len, keys.status().ToString().c_str());
    return keys.status().code() == StatusCode::kResourceExhausted ? -FI_ENOMEM : -FI_EINVAL;
  }
  auto* mr = new MemoryRegion();
  mr->mr.fid.fclass = FI_CLASS_MR;
  mr->mr.fid.context = context;
  mr->mr.fid.ops = &kMrOps;
  mr->mr.mem_desc = mr;
  mr->mr.key = keys->rkey;
  mr->domain = domain;
  mr->lkey = keys->lkey;
  domain->open_objects.fetch_add(1);
  *out = &mr->mr;
  return 0;
}

int MrReg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
          uint64_t flags, fid_mr** mr, void* context) {
  (void)requested_key;  // FI_MR_PROV_KEY: uroce picks the key
  return RegisterMemory(reinterpret_cast<Domain*>(f), buf, len, access, offset, flags, context, mr);
}

int MrRegv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset, uint64_t requested_key,
           uint64_t flags, fid_mr** mr, void* context) {
  (void)requested_key;
  if (count != 1 || iov == nullptr) return -FI_EINVAL;  // mr_iov_limit is 1
  return RegisterMemory(reinterpret_cast<Domain*>(f), iov[0].iov_base, iov[0].iov_len, access, offset, flags,
                        context, mr);
}

int MrRegattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  if (attr == nullptr || attr->iov_count != 1 || attr->mr_iov == nullptr) return -FI_EINVAL;
  if (attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
  return RegisterMemory(reinterpret_cast<Domain*>(f), attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len,
                        attr->access, attr->offset, flags, attr->context, mr);
}

fi_ops_mr kDomainMrOps = {sizeof(fi_ops_mr), MrReg, MrRegv, MrRegattr};

// ---- Completion objects: the cq layer's, with inline progress ----

int CqOpen(fid_domain* d, fi_cq_attr* attr, fid_cq** out, void* context) {
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  // fi_cq_read drives the engine in inline mode (manual progress underneath
  // an automatic-progress promise: the progress thread drives it too): the
  // engine of the domain it is opened on, and the others now and then.
  auto cq = cq::FabricCq::Open(*attr, context, Process().ProgressOf(reinterpret_cast<Domain*>(d)->engine));
  if (!cq.ok()) return cq.status().code() == StatusCode::kNotSupported ? -FI_ENOSYS : -FI_EINVAL;
  *out = cq->release()->fid();
  return 0;
}

int CntrOpen(fid_domain* d, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  auto cntr = cq::Counter::Open(*attr, context, Process().ProgressOf(reinterpret_cast<Domain*>(d)->engine));
  if (!cntr.ok()) return cntr.status().code() == StatusCode::kNotSupported ? -FI_ENOSYS : -FI_EINVAL;
  *out = cntr->release()->fid();
  return 0;
}

int QueryAtomic(fid_domain*, fi_datatype datatype, fi_op op, fi_atomic_attr* attr, uint64_t flags) {
  // RoCE atomics (IBTA 9.4.5): 64-bit fetch-and-add and compare-and-swap.
  if (datatype != FI_UINT64 && datatype != FI_INT64) return -FI_EOPNOTSUPP;
  const bool fetch = (flags & FI_FETCH_ATOMIC) != 0, compare = (flags & FI_COMPARE_ATOMIC) != 0;
  const bool ok = (compare && op == FI_CSWAP) || (fetch && (op == FI_SUM || op == FI_ATOMIC_READ));
  if (!ok) return -FI_EOPNOTSUPP;
  if (attr != nullptr) {
    attr->size = sizeof(uint64_t);
    attr->count = 1;
  }
  return 0;
}

// ---- Domain ----

int DomainClose(fid* f) {
  auto* domain = reinterpret_cast<Domain*>(f);
  if (domain->open_objects.load() != 0) return -FI_EBUSY;
  delete domain;
  return 0;
}

fi_ops kDomainOps = {sizeof(fi_ops),
                     DomainClose,
                     Enosys<decltype(fi_ops::bind)>::Call,
                     Enosys<decltype(fi_ops::control)>::Call,
                     Enosys<decltype(fi_ops::ops_open)>::Call,
                     Enosys<decltype(fi_ops::tostr)>::Call,
                     Enosys<decltype(fi_ops::ops_set)>::Call};

fi_ops_domain kDomainOpsDomain = {sizeof(fi_ops_domain),
                                  Enosys<decltype(fi_ops_domain::av_open)>::Call,
                                  CqOpen,
                                  EndpointOpen,
                                  Enosys<decltype(fi_ops_domain::scalable_ep)>::Call,
                                  CntrOpen,
                                  Enosys<decltype(fi_ops_domain::poll_open)>::Call,
                                  Enosys<decltype(fi_ops_domain::stx_ctx)>::Call,
                                  Enosys<decltype(fi_ops_domain::srx_ctx)>::Call,
                                  QueryAtomic,
                                  Enosys<decltype(fi_ops_domain::query_collective)>::Call,
                                  Enosys<decltype(fi_ops_domain::endpoint2)>::Call};

int DomainOpen(fid_fabric* fabric, fi_info* info, fid_domain** out, void* context) {
  if (info == nullptr || out == nullptr || info->domain_attr == nullptr) return -FI_EINVAL;
  const int index = DeviceIndex(info->domain_attr->name);
  if (index < 0) return -FI_EINVAL;
  if (int e = StartRuntime(); e != 0) return e;
  runtime::Runtime::Device& rt = Process().runtime()->device(static_cast<size_t>(index));
  auto cm = CmService::Get().ForDevice(static_cast<size_t>(index));
  if (!cm.ok()) {
    UROCE_LOG(ERR, kApi, "connection manager: %s\n", cm.status().ToString().c_str());
    return -FI_EIO;
  }
  auto* domain = new Domain();
  domain->domain.fid.fclass = FI_CLASS_DOMAIN;
  domain->domain.fid.context = context;
  domain->domain.fid.ops = &kDomainOps;
  domain->domain.ops = &kDomainOpsDomain;
  domain->domain.mr = &kDomainMrOps;
  domain->fabric = reinterpret_cast<Fabric*>(fabric);
  domain->endpoint_index = static_cast<size_t>(index);
  domain->engine = rt.side.engine.get();
  domain->pd = rt.side.pd;
  domain->cm = *cm;
  domain->port_mtu = rt.config.mtu;
  domain->mr_mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
  if (domain->mr_mode == FI_MR_BASIC || domain->mr_mode == FI_MR_UNSPEC) {
    domain->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  }
  *out = &domain->domain;
  return 0;
}

// ---- Passive endpoint (fi_endpoint(3), fi_cm(3)) ----

int PepClose(fid* f) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(f);
  CmService::Get().Unregister(pep->registry_key);
  if (pep->listening) {
    transport::Gid gid{};
    uint16_t port = 0;
    SockaddrToGid(reinterpret_cast<sockaddr*>(&pep->local), &gid, &port);
    (void)pep->cm->StopListening(port);
  }
  if (pep->eq != nullptr) {
    // fi_cm(3): an FI_CONNREQ's info, and the request behind its handle, are
    // the application's once it reads the event (fi_accept/fi_reject, then
    // fi_freeinfo). The ones still queued will never be read: free them and
    // refuse their callers now (the handle's close rejects an unanswered
    // request), rather than leak them and leave the callers to time out.
    // No FI_CONNREQ for this listener is written after Unregister above.
    pep->eq->DropEventsFor(&pep->pep.fid, [](uint32_t event, const std::vector<uint8_t>& bytes) {
      if (event != FI_CONNREQ || bytes.size() < sizeof(fi_eq_cm_entry)) return;
      fi_eq_cm_entry entry;
      std::memcpy(static_cast<void*>(&entry), bytes.data(), sizeof(entry));
      if (entry.info == nullptr) return;
      if (entry.info->handle != nullptr) (void)fi_close(entry.info->handle);
      entry.info->handle = nullptr;
      FreeInfo(entry.info);
    });
    pep->eq->bindings().Remove();
  }
  FreeInfo(pep->info);
  delete pep;
  return 0;
}

int PepBind(fid* f, fid* bfid, uint64_t flags) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(f);
  (void)flags;
  if (bfid == nullptr || bfid->fclass != FI_CLASS_EQ) return -FI_EINVAL;
  cq::EventQueue* eq = cq::EventQueue::FromFid(bfid);
  if (eq == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(pep->mutex);
  if (pep->eq != nullptr) return -FI_EINVAL;
  pep->eq = eq;
  eq->bindings().Add();
  return 0;
}

// fi_endpoint(3) FI_BACKLOG: "(int *) ... the size of the backlog queue for
// this passive endpoint", taken at fi_listen.
int PepControl(fid* f, int command, void* arg) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(f);
  if (command != FI_BACKLOG) return -FI_ENOSYS;
  if (arg == nullptr) return -FI_EINVAL;
  std::lock_guard<std::mutex> lock(pep->mutex);
  if (pep->listening) return -FI_EOPBADSTATE;
  pep->backlog = *static_cast<int*>(arg);
  return 0;
}

fi_ops kPepOps = {sizeof(fi_ops),
                  PepClose,
                  PepBind,
                  PepControl,
                  Enosys<decltype(fi_ops::ops_open)>::Call,
                  Enosys<decltype(fi_ops::tostr)>::Call,
                  Enosys<decltype(fi_ops::ops_set)>::Call};

int PepSetname(fid* f, void* addr, size_t addrlen) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(f);
  std::lock_guard<std::mutex> lock(pep->mutex);
  if (pep->listening) return -FI_EINVAL;
  transport::Gid gid{};
  uint16_t port = 0;
  if (addr == nullptr || addrlen < SockaddrLength(static_cast<sockaddr*>(addr)) ||
      !SockaddrToGid(static_cast<sockaddr*>(addr), &gid, &port)) {
    return -FI_EINVAL;
  }
  std::memcpy(&pep->local, addr, SockaddrLength(static_cast<sockaddr*>(addr)));
  return 0;
}

int PepGetname(fid* f, void* addr, size_t* addrlen) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(f);
  std::lock_guard<std::mutex> lock(pep->mutex);
  return CopySockaddr(pep->local, addr, addrlen);
}

int PepListen(fid_pep* p) {
  auto* pep = reinterpret_cast<PassiveEndpoint*>(p);
  std::lock_guard<std::mutex> lock(pep->mutex);
  if (pep->listening) return -FI_EINVAL;
  if (pep->eq == nullptr) return -FI_ENOEQ;
  transport::Gid gid{};
  uint16_t port = 0;
  SockaddrToGid(reinterpret_cast<sockaddr*>(&pep->local), &gid, &port);
  // Requests out at once: the backlog, and never more than half the EQ, so
  // that FI_CONNREQs alone cannot overrun it (fi_eq(3): an overrun EQ stays
  // so, and the listener with it). The connection manager refuses the rest
  // (REJ "no resources") without keeping anything.
  unsigned backlog = pep->backlog > 0 ? static_cast<unsigned>(pep->backlog) : cm::kCmDefaultBacklog;
  backlog = std::min<unsigned>(backlog, cm::kCmMaxBacklog);
  // The EQ's size is the EQ object's own (fi_eq_attr::size as opened), so
  // nothing outlives fi_close of the EQ (fi_eq(3): after fi_close the EQ and
  // everything of it are gone; a provider-side table keyed by its address
  // kept an entry per EQ ever opened).
  backlog = std::max<size_t>(1, std::min<size_t>(backlog, pep->eq->capacity() / 2));
  pep->max_unanswered = backlog;
  auto bound = pep->cm->Listen(port, pep->registry_key, backlog);
  if (!bound.ok()) return bound.status().code() == StatusCode::kAlreadyExists ? -FI_EADDRINUSE : -FI_EINVAL;
  if (auto* in = reinterpret_cast<sockaddr_in*>(&pep->local); in->sin_family == AF_INET) {
    in->sin_port = htons(*bound);
  } else {
    reinterpret_cast<sockaddr_in6*>(&pep->local)->sin6_port = htons(*bound);
  }
  pep->listening = true;
  return 0;
}

int PepReject(fid_pep* p, fid_t handle, const void* param, size_t paramlen) {
  (void)p;
  if (handle == nullptr || handle->fclass != FI_CLASS_CONNREQ) return -FI_EINVAL;
  if (paramlen > kCmRejectDataSize || (paramlen != 0 && param == nullptr)) return -FI_EINVAL;
  auto* request = reinterpret_cast<ConnectionRequest*>(handle);
  if (!MarkAnswered(request)) return -FI_EINVAL;
  // The caller's FI_REJECT error entry carries exactly these bytes as
  // err_data (cm_data.h).
  const std::vector<uint8_t> data = PackCmData(param, paramlen);
  Status s = request->cm->Reject(request->id, data.data(), data.size());
  request->cm->Release(request->id);
  delete request;
  return s.ok() ? 0 : -FI_EINVAL;
}

int PepGetopt(fid* f, int level, int optname, void* optval, size_t* optlen) {
  return EndpointGetopt(f, level, optname, optval, optlen);
}

fi_ops_cm kPepCmOps = {sizeof(fi_ops_cm),
                       PepSetname,
                       PepGetname,
                       Enosys<decltype(fi_ops_cm::getpeer)>::Call,
                       Enosys<decltype(fi_ops_cm::connect)>::Call,
                       PepListen,
                       Enosys<decltype(fi_ops_cm::accept)>::Call,
                       PepReject,
                       Enosys<decltype(fi_ops_cm::shutdown)>::Call,
                       Enosys<decltype(fi_ops_cm::join)>::Call};

fi_ops_ep kPepEpOps = {sizeof(fi_ops_ep),
                       Enosys<decltype(fi_ops_ep::cancel)>::Call,
                       PepGetopt,
                       Enosys<decltype(fi_ops_ep::setopt)>::Call,
                       Enosys<decltype(fi_ops_ep::tx_ctx)>::Call,
                       Enosys<decltype(fi_ops_ep::rx_ctx)>::Call,
                       Enosys<decltype(fi_ops_ep::rx_size_left)>::Call,
                       Enosys<decltype(fi_ops_ep::tx_size_left)>::Call};

int PassiveEndpointOpen(fid_fabric* fabric, fi_info* info, fid_pep** out, void* context) {
  if (info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG && info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  // The device: by the domain name, else by the source address.
  int index = info->domain_attr != nullptr ? DeviceIndex(info->domain_attr->name) : 0;
  if (index < 0) return -FI_EINVAL;
  if (int e = StartRuntime(); e != 0) return e;
  auto cm = CmService::Get().ForDevice(static_cast<size_t>(index));
  if (!cm.ok()) return -FI_EIO;
  auto* pep = new PassiveEndpoint();
  pep->pep.fid.fclass = FI_CLASS_PEP;
  pep->pep.fid.context = context;
  pep->pep.fid.ops = &kPepOps;
  pep->pep.cm = &kPepCmOps;
  pep->pep.ops = &kPepEpOps;
  pep->fabric = reinterpret_cast<Fabric*>(fabric);
  pep->info = DupInfo(info);
  pep->endpoint_index = static_cast<size_t>(index);
  pep->cm = *cm;
  if (pep->info == nullptr) {
    delete pep;
    return -FI_ENOMEM;
  }
  if (info->src_addr != nullptr && SockaddrLength(static_cast<sockaddr*>(info->src_addr)) != 0) {
    std::memcpy(&pep->local, info->src_addr, SockaddrLength(static_cast<sockaddr*>(info->src_addr)));
  } else {
    const transport::Gid gid = Process().runtime()->device(static_cast<size_t>(index)).side.gid;
    size_t len = 0;
    GidToSockaddr(gid, 0, &pep->local, &len);
  }
  pep->registry_key = CmService::Get().Register(pep);
  *out = &pep->pep;
  return 0;
}

// ---- Fabric ----

int EqOpen(fid_fabric*, fi_eq_attr* attr, fid_eq** out, void* context) {
  if (attr == nullptr || out == nullptr) return -FI_EINVAL;
  auto eq = cq::EventQueue::Open(*attr, context);
  if (!eq.ok()) return eq.status().code() == StatusCode::kNotSupported ? -FI_ENOSYS : -FI_EINVAL;
  *out = eq->release()->fid();
  return 0;
}

int FabricTrywait(fid_fabric*, fid** fids, int count) {
  if (fids == nullptr && count != 0) return -FI_EINVAL;
  for (int i = 0; i < count; ++i) {
    fid* f = fids[i];
    if (f == nullptr) return -FI_EINVAL;
    int r = -FI_EINVAL;
    switch (f->fclass) {
      case FI_CLASS_CQ: {
        cq::FabricCq* c = cq::FabricCq::FromFid(f);
        if (c != nullptr) r = c->TryWait();
        break;
      }
      case FI_CLASS_CNTR: {
        cq::Counter* c = cq::Counter::FromFid(f);
        if (c != nullptr) r = c->TryWait();
        break;
      }
      case FI_CLASS_EQ: {
        cq::EventQueue* e = cq::EventQueue::FromFid(f);
        if (e != nullptr) r = e->TryWait();
        break;
      }
      default: break;
    }
    if (r != 0) return r;
  }
  return 0;
}

int FabricClose(fid* f) {
  delete reinterpret_cast<Fabric*>(f);
  return 0;
}

fi_ops kFabricOps = {sizeof(fi_ops),
                     FabricClose,
                     Enosys<decltype(fi_ops::bind)>::Call,
                     Enosys<decltype(fi_ops::control)>::Call,
                     Enosys<decltype(fi_ops::ops_open)>::Call,
                     Enosys<decltype(fi_ops::tostr)>::Call,
                     Enosys<decltype(fi_ops::ops_set)>::Call};

fi_ops_fabric kFabricOpsFabric = {sizeof(fi_ops_fabric),
                                  DomainOpen,
                                  PassiveEndpointOpen,
                                  EqOpen,
                                  Enosys<decltype(fi_ops_fabric::wait_open)>::Call,
                                  FabricTrywait,
                                  Enosys<decltype(fi_ops_fabric::domain2)>::Call};

int FabricOpen(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  if (out == nullptr) return -FI_EINVAL;
  if (attr != nullptr && attr->name != nullptr && std::strcmp(attr->name, kFabricName) != 0) return -FI_ENODATA;
  auto* fabric = new Fabric();
  fabric->fabric.fid.fclass = FI_CLASS_FABRIC;
  fabric->fabric.fid.context = context;
  fabric->fabric.fid.ops = &kFabricOps;
  fabric->fabric.ops = &kFabricOpsFabric;
  fabric->fabric.api_version = kApiVersion;
  *out = &fabric->fabric;
  return 0;
}

// fi_getinfo(3): hints->handle may name a passive endpoint whose address an
// active endpoint is to take over (fi_endpoint(3), info->handle): the
// answers are for its address, and carry the handle on. Any other handle
// is not one uroce made for this: no answer.
int ProviderGetinfo(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
                    fi_info** info) {
  if (hints == nullptr || hints->handle == nullptr) return GetInfo(Devices(), version, node, service, flags, hints, info);
  if (info == nullptr) return -FI_EINVAL;
  if (hints->handle->fclass != FI_CLASS_PEP) return -FI_ENODATA;
  auto* pep = reinterpret_cast<PassiveEndpoint*>(hints->handle);
  fi_info with_address = *hints;
  with_address.handle = nullptr;
  const size_t len = SockaddrLength(reinterpret_cast<const sockaddr*>(&pep->local));
  if (len != 0) {
    with_address.src_addr = &pep->local;
    with_address.src_addrlen = len;
  }
  const int rc = GetInfo(Devices(), version, node, service, flags, &with_address, info);
  if (rc != 0) return rc;
  for (fi_info* i = *info; i != nullptr; i = i->next) i->handle = hints->handle;
  return 0;
}

void ProviderCleanup() {}

fi_provider kProvider = {kProviderVersion, kApiVersion, {}, kProviderName, ProviderGetinfo, FabricOpen,
                         ProviderCleanup};

}  // namespace

fi_provider* FabricProvider() { return &kProvider; }

}  // namespace uroce::fabric

extern "C" __attribute__((visibility("default"))) fi_provider* uroce_fi_provider_v1() {
  return uroce::fabric::FabricProvider();
}
