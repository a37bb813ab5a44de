#include "api/fabric/info.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "api/fabric/objects.h"

namespace uroce::fabric {
namespace {

template <typename T>
T* Calloc() {
  return static_cast<T*>(std::calloc(1, sizeof(T)));
}

char* Strdup(const char* s) { return s == nullptr ? nullptr : strdup(s); }

void* DupBytes(const void* p, size_t len) {
  if (p == nullptr || len == 0) return nullptr;
  void* out = std::malloc(len);
  if (out != nullptr) std::memcpy(out, p, len);
  return out;
}

// Resolves a node/service pair to one address of `family` (AF_UNSPEC: any).
bool Resolve(const char* node, const char* service, int family, sockaddr_storage* out, bool passive) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  if (getaddrinfo(node, service, &hints, &result) != 0 || result == nullptr) return false;
  // Prefer what the caller can use: the first IPv4 or IPv6 address.
  bool found = false;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) {
      std::memcpy(out, a->ai_addr, a->ai_addrlen);
      found = true;
      break;
    }
  }
  freeaddrinfo(result);
  return found;
}

bool IsAnyAddress(const transport::Gid& gid) {
  transport::Gid zero{};
  transport::Gid mapped_zero{};
  mapped_zero[10] = mapped_zero[11] = 0xFF;
  return gid == zero || gid == mapped_zero;
}

struct Request {
  bool has_src = false, has_dest = false;
  transport::Gid src_gid{}, dest_gid{};
  uint16_t src_port = 0, dest_port = 0;
  int family = AF_UNSPEC;  // from addr_format or the addresses
};

// fi_getinfo(3) "addr_format": uroce speaks FI_SOCKADDR_IN and _IN6.
bool AddrFormatFamily(uint32_t format, int* family) {
  switch (format) {
    case FI_FORMAT_UNSPEC:
    case FI_SOCKADDR: *family = AF_UNSPEC; return true;
    case FI_SOCKADDR_IN: *family = AF_INET; return true;
    case FI_SOCKADDR_IN6: *family = AF_INET6; return true;
    default: return false;
  }
}

bool CapsOk(const fi_info* hints, uint64_t* caps) {
  const uint64_t all = kPrimaryCaps | kSecondaryCaps;
  if (hints == nullptr || hints->caps == 0) {
    *caps = all;
    return true;
  }
  if ((hints->caps & ~all) != 0) return false;
  // Primary capabilities: what was asked (fi_getinfo(3): a provider should not
  // hand out primary capabilities the application did not ask for), with the
  // directions filled in when none were named. Secondary: all of ours.
  uint64_t primary = hints->caps & kPrimaryCaps;
  if ((primary & FI_MSG) && !(primary & (FI_SEND | FI_RECV))) primary |= FI_SEND | FI_RECV;
  if ((primary & (FI_RMA | FI_ATOMIC)) && !(primary & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE))) {
    primary |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  }
  *caps = primary | kSecondaryCaps;
  return true;
}

// libfabric's ofi_rma_target_allowed: RMA or atomics with no direction named,
// or a remote direction named, make the endpoint a target.
bool RmaTargetAllowed(uint64_t caps) {
  if (!(caps & (FI_RMA | FI_ATOMIC))) return false;
  if (caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)) return true;
  return !(caps & (FI_READ | FI_WRITE));
}

// fi_mr(3) "MR modes" with its compatibility rules, as libfabric's utility
// code checks them for its own providers (ofi_check_mr_mode in
// prov/util/src/util_attr.c). uroce needs descriptors for local buffers
// (FI_MR_LOCAL: lkeys) and picks the keys (FI_MR_PROV_KEY: rkeys) of regions
// a peer targets; it honours FI_MR_VIRT_ADDR and FI_MR_ALLOCATED either way,
// and supports basic registration (fi_mr(3): FI_MR_BASIC is "equivalent to
// requiring FI_MR_VIRT_ADDR, FI_MR_ALLOCATED and FI_MR_PROV_KEY", with the
// deprecated mode bit FI_LOCAL_MR for local descriptors), never scalable.
//   - Local descriptors must be offered in every version: mr_mode
//     FI_MR_LOCAL, or the fi_info mode bit FI_LOCAL_MR.
//   - API < 1.5: mr_mode is FI_MR_UNSPEC ("FI_MR_BASIC or FI_MR_SCALABLE")
//     or FI_MR_BASIC; the answer is FI_MR_BASIC.
//   - API >= 1.5: FI_MR_BASIC must stand alone ("must be set alone and not
//     paired with mr_mode bits") and "will not be cleared by the provider":
//     the answer is FI_MR_BASIC. Otherwise every bit uroce needs must be
//     offered, so FI_MR_UNSPEC (0) offers none and gets -FI_ENODATA.
//     FI_MR_PROV_KEY is needed only when the endpoint may be an RMA target;
//     without it (and no target asked for) the remote capabilities are left
//     out of the answer. The answer is the offered bits uroce acts on.
// *mode: the mr_mode to report; *caps may lose FI_REMOTE_READ/WRITE.
bool MrModeOk(const fi_info* hints, uint32_t version, uint64_t* caps, uint64_t* mode) {
  *mode = kRequiredMrMode | kOptionalMrMode;
  if (hints == nullptr || hints->domain_attr == nullptr) {
    if (FI_VERSION_LT(version, FI_VERSION(1, 5))) *mode = FI_MR_BASIC;
    return true;
  }
  const uint64_t asked = static_cast<uint32_t>(hints->domain_attr->mr_mode);
  if (!(asked & FI_MR_LOCAL) && !(hints->mode & FI_LOCAL_MR)) return false;
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
    if (asked != FI_MR_UNSPEC && asked != FI_MR_BASIC) return false;
    *mode = FI_MR_BASIC;
    return true;
  }
  if (asked & FI_MR_BASIC) {
    if (asked != FI_MR_BASIC) return false;
    *mode = FI_MR_BASIC;
    return true;
  }
  if (asked & FI_MR_SCALABLE) return false;
  uint64_t needed = FI_MR_LOCAL;
  if (RmaTargetAllowed(hints->caps)) needed |= FI_MR_PROV_KEY;
  if ((asked & needed) != needed) return false;
  // Keys the application would choose are not uroce's: no remote access.
  if (!(asked & FI_MR_PROV_KEY)) *caps &= ~static_cast<uint64_t>(FI_REMOTE_READ | FI_REMOTE_WRITE);
  *mode = asked & (kRequiredMrMode | kOptionalMrMode);
  return true;
}

// The message and completion orderings uroce guarantees (fi_endpoint(3)
// "msg_order", "comp_order"). An RC QP's responder carries out requests in
// PSN order, but builds a READ's response packet by packet after it, so a
// later WRITE or SEND may land in memory the READ has not read yet: no
// write-after-read (WAR) and no send-after-read (SAR), as with any RC NIC
// (IBTA 9.7.7; IBV_SEND_FENCE is the verbs answer, libfabric's verbs provider
// reports the same set). Atomics are carried out when they arrive, in order.
// Completions of one queue are in posting order (FI_ORDER_STRICT); data
// within a message is not placed in order (no FI_ORDER_DATA).
constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RMA_RAR | FI_ORDER_ATOMIC_RAR | FI_ORDER_RAW |
                               FI_ORDER_RMA_RAW | FI_ORDER_ATOMIC_RAW | FI_ORDER_RAS | FI_ORDER_WAW |
                               FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_WAW | FI_ORDER_WAS | FI_ORDER_SAW |
                               FI_ORDER_SAS;
constexpr uint64_t kCompOrder = FI_ORDER_STRICT;

// fi_getinfo(3): "the provider ... shall not return fi_info structures that
// do not satisfy the hints": every attribute uroce cannot meet is -FI_ENODATA
// (the checks of libfabric's ofi_check_info for its own providers).
bool AttributesOk(const fi_info* hints, uint32_t version) {
  if (hints == nullptr) return true;
  if (const fi_tx_attr* tx = hints->tx_attr; tx != nullptr) {
    if ((tx->msg_order & ~kMsgOrder) || (tx->comp_order & ~kCompOrder)) return false;
    if (tx->inject_size > kInjectSize || tx->iov_limit > kIovLimit || tx->rma_iov_limit > 1) return false;
  }
  if (const fi_rx_attr* rx = hints->rx_attr; rx != nullptr) {
    if ((rx->msg_order & ~kMsgOrder) || (rx->comp_order & ~kCompOrder)) return false;
    if (rx->iov_limit > kIovLimit) return false;
  }
  if (const fi_ep_attr* ep = hints->ep_attr; ep != nullptr) {
    if (ep->max_msg_size > kMaxMsgSize || ep->protocol_version > 1) return false;
    // One transmit and one receive context per endpoint, none shared:
    // FI_SHARED_CONTEXT would need fi_stx_context / fi_srx_context, which
    // uroce does not have (max_ep_stx_ctx = max_ep_srx_ctx = 0).
    if (ep->tx_ctx_cnt > 1 || ep->rx_ctx_cnt > 1) return false;
    if (ep->auth_key_size != 0) return false;  // no authorization keys
    // The sizes up to which the orderings above hold (fi_endpoint(3)
    // "max_order_*_size"), as libfabric checks them: for RMA and atomics.
    if ((hints->caps & (FI_RMA | FI_ATOMIC)) &&
        (ep->max_order_raw_size > kMaxMsgSize || ep->max_order_war_size > 0 ||
         ep->max_order_waw_size > kMaxMsgSize)) {
      return false;
    }
  }
  if (const fi_domain_attr* d = hints->domain_attr; d != nullptr) {
    if (d->max_ep_stx_ctx > 0 || d->max_ep_srx_ctx > 0) return false;
    if (d->max_ep_tx_ctx > 1 || d->max_ep_rx_ctx > 1) return false;
    // RoCE immediate data: 4 bytes, and only with FI_RX_CQ_DATA (it takes a
    // posted receive, IBTA 9.4.3; see BuildInfo).
    if (d->cq_data_size > sizeof(uint32_t)) return false;
    if (d->cq_data_size > 0 && !(hints->mode & FI_RX_CQ_DATA)) return false;
    if (d->auth_key_size != 0) return false;
    // fi_domain(3) "caps": domain capabilities uroce has are FI_LOCAL_COMM
    // and FI_REMOTE_COMM; FI_SHARED_AV and the rest are not offered.
    // (Checked from API 1.5 on, as the field is.)
    if (!FI_VERSION_LT(version, FI_VERSION(1, 5))) {
      if (d->caps & ~kSecondaryCaps) return false;
      if (d->mr_iov_limit > 1) return false;
    }
  }
  return true;
}

fi_info* BuildInfo(const DeviceAddresses& device, const transport::Gid& gid, const Request& req, uint64_t caps,
                   uint64_t mr_mode, const fi_info* hints) {
  fi_info* info = Calloc<fi_info>();
  if (info == nullptr) return nullptr;
  info->tx_attr = Calloc<fi_tx_attr>();
  info->rx_attr = Calloc<fi_rx_attr>();
  info->ep_attr = Calloc<fi_ep_attr>();
  info->domain_attr = Calloc<fi_domain_attr>();
  info->fabric_attr = Calloc<fi_fabric_attr>();
  if (!info->tx_attr || !info->rx_attr || !info->ep_attr || !info->domain_attr || !info->fabric_attr) {
    FreeInfo(info);
    return nullptr;
  }
  const bool rx_cq_data = hints == nullptr || (hints->mode & FI_RX_CQ_DATA) != 0;
  info->caps = caps;
  // FI_RX_CQ_DATA: remote CQ data (RDMA write with immediate) consumes a
  // posted receive, as in RoCE (IBTA 9.4.3). Without it, no CQ data.
  info->mode = rx_cq_data ? FI_RX_CQ_DATA : 0;
  const bool ipv4 = transport::IsIpv4MappedGid(gid);
  info->addr_format = ipv4 ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6;

  sockaddr_storage ss{};
  size_t len = 0;
  GidToSockaddr(gid, req.has_src ? req.src_port : 0, &ss, &len);
  info->src_addr = DupBytes(&ss, len);
  info->src_addrlen = len;
  if (req.has_dest) {
    GidToSockaddr(req.dest_gid, req.dest_port, &ss, &len);
    info->dest_addr = DupBytes(&ss, len);
    info->dest_addrlen = len;
  }

  fi_tx_attr* tx = info->tx_attr;
  tx->caps = caps & (FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_READ | FI_WRITE);
  tx->mode = info->mode;
  tx->op_flags = 0;
  tx->msg_order = kMsgOrder;
  tx->comp_order = kCompOrder;
  tx->inject_size = kInjectSize;
  tx->size = kQueueSize;
  tx->iov_limit = kIovLimit;
  tx->rma_iov_limit = 1;
  fi_rx_attr* rx = info->rx_attr;
  rx->caps = caps & (FI_MSG | FI_RMA | FI_ATOMIC | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
  rx->mode = info->mode;
  rx->msg_order = kMsgOrder;
  rx->comp_order = kCompOrder;
  rx->total_buffered_recv = 0;
  rx->size = kQueueSize;
  rx->iov_limit = kIovLimit;
  if (hints != nullptr) {
    // Queue depths: what was asked, up to the engine's bound.
    if (hints->tx_attr != nullptr && hints->tx_attr->size != 0) tx->size = std::min(hints->tx_attr->size, kMaxQueueSize);
    if (hints->rx_attr != nullptr && hints->rx_attr->size != 0) rx->size = std::min(hints->rx_attr->size, kMaxQueueSize);
    if (hints->tx_attr != nullptr) tx->op_flags = hints->tx_attr->op_flags & (FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE);
    if (hints->rx_attr != nullptr) rx->op_flags = hints->rx_attr->op_flags & FI_COMPLETION;
  }

  fi_ep_attr* ep = info->ep_attr;
  ep->type = FI_EP_MSG;
  ep->protocol = FI_PROTO_RDMA_CM_IB_RC;  // RC QPs, IB CM exchange over QP1
  ep->protocol_version = 1;
  ep->max_msg_size = kMaxMsgSize;
  ep->msg_prefix_size = 0;
  ep->max_order_raw_size = kMaxMsgSize;
  ep->max_order_war_size = 0;  // no write-after-read order (kMsgOrder)
  ep->max_order_waw_size = kMaxMsgSize;
  ep->tx_ctx_cnt = 1;
  ep->rx_ctx_cnt = 1;
  ep->mem_tag_format = 0;

  fi_domain_attr* d = info->domain_attr;
  d->name = Strdup(device.domain_name.c_str());
  d->threading = FI_THREAD_SAFE;
  d->control_progress = FI_PROGRESS_AUTO;
  d->data_progress = FI_PROGRESS_AUTO;
  d->resource_mgmt = FI_RM_ENABLED;  // RNR retry and back-pressured CQs: nothing is overrun
  d->av_type = FI_AV_UNSPEC;
  d->mr_mode = static_cast<int>(mr_mode);
  // Basic registration comes with local descriptors through the deprecated
  // mode bit (fi_mr(3) "Basic Memory Registration"): uroce requires it.
  if (mr_mode == FI_MR_BASIC) info->mode |= FI_LOCAL_MR;
  d->mr_key_size = sizeof(uint32_t);
  d->cq_data_size = rx_cq_data ? sizeof(uint32_t) : 0;
  d->cq_cnt = 1024;
  d->ep_cnt = 1024;
  d->tx_ctx_cnt = 1024;
  d->rx_ctx_cnt = 1024;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->max_ep_stx_ctx = 0;
  d->max_ep_srx_ctx = 0;
  d->cntr_cnt = 1024;
  d->mr_iov_limit = 1;
  d->caps = kSecondaryCaps;
  d->mode = 0;
  d->mr_cnt = 1 << 16;
  d->max_err_data = sizeof(ibv_wc_status);
  if (hints != nullptr && hints->domain_attr != nullptr) {
    // Threading and progress: uroce is thread safe and progresses on its own,
    // which satisfies any level asked for; report what was asked.
    if (hints->domain_attr->threading != FI_THREAD_UNSPEC) d->threading = hints->domain_attr->threading;
    if (hints->domain_attr->control_progress != FI_PROGRESS_UNSPEC) {
      d->control_progress = hints->domain_attr->control_progress;
    }
    if (hints->domain_attr->data_progress != FI_PROGRESS_UNSPEC) {
      d->data_progress = hints->domain_attr->data_progress;
    }
    if (hints->domain_attr->resource_mgmt != FI_RM_UNSPEC) d->resource_mgmt = hints->domain_attr->resource_mgmt;
  }

  fi_fabric_attr* f = info->fabric_attr;
  f->name = Strdup(kFabricName);
  // prov_name stays NULL: libfabric's fi_getinfo names the provider itself
  // (it appends the provider's name to whatever a provider sets, which is
  // how layered names such as "uroce;ofi_rxm" are built).
  f->prov_name = nullptr;
  f->prov_version = kProviderVersion;
  f->api_version = kApiVersion;
  if (!d->name || !f->name || !info->src_addr || (req.has_dest && !info->dest_addr)) {
    FreeInfo(info);
    return nullptr;
  }
  return info;
}

}  // namespace

int CopySockaddr(const sockaddr_storage& ss, void* addr, size_t* addrlen) {
  if (addrlen == nullptr) return -FI_EINVAL;
  const size_t len = SockaddrLength(reinterpret_cast<const sockaddr*>(&ss));
  if (len == 0) return -FI_EADDRNOTAVAIL;
  const size_t room = *addrlen;
  *addrlen = len;
  if (addr == nullptr || room < len) return -FI_ETOOSMALL;
  std::memcpy(addr, &ss, len);
  return 0;
}

void FreeInfo(fi_info* info) {
  while (info != nullptr) {
    fi_info* next = info->next;
    std::free(info->src_addr);
    std::free(info->dest_addr);
    std::free(info->tx_attr);
    std::free(info->rx_attr);
    if (info->ep_attr != nullptr) std::free(info->ep_attr->auth_key);
    std::free(info->ep_attr);
    if (info->domain_attr != nullptr) {
      std::free(info->domain_attr->auth_key);
      std::free(info->domain_attr->name);
    }
    std::free(info->domain_attr);
    if (info->fabric_attr != nullptr) {
      std::free(info->fabric_attr->name);
      std::free(info->fabric_attr->prov_name);
    }
    std::free(info->fabric_attr);
    std::free(info);
    info = next;
  }
}

fi_info* DupInfo(const fi_info* in) {
  if (in == nullptr) return nullptr;
  fi_info* out = Calloc<fi_info>();
  if (out == nullptr) return nullptr;
  *out = *in;
  out->next = nullptr;
  out->nic = nullptr;
  out->src_addr = DupBytes(in->src_addr, in->src_addrlen);
  out->dest_addr = DupBytes(in->dest_addr, in->dest_addrlen);
  out->tx_attr = nullptr;
  out->rx_attr = nullptr;
  out->ep_attr = nullptr;
  out->domain_attr = nullptr;
  out->fabric_attr = nullptr;
  bool ok = true;
  if (in->tx_attr != nullptr) ok &= (out->tx_attr = static_cast<fi_tx_attr*>(DupBytes(in->tx_attr, sizeof(fi_tx_attr)))) != nullptr;
  if (in->rx_attr != nullptr) ok &= (out->rx_attr = static_cast<fi_rx_attr*>(DupBytes(in->rx_attr, sizeof(fi_rx_attr)))) != nullptr;
  if (in->ep_attr != nullptr) {
    out->ep_attr = static_cast<fi_ep_attr*>(DupBytes(in->ep_attr, sizeof(fi_ep_attr)));
    ok &= out->ep_attr != nullptr;
    if (out->ep_attr != nullptr) {
      out->ep_attr->auth_key = static_cast<uint8_t*>(DupBytes(in->ep_attr->auth_key, in->ep_attr->auth_key_size));
    }
  }
  if (in->domain_attr != nullptr) {
    out->domain_attr = static_cast<fi_domain_attr*>(DupBytes(in->domain_attr, sizeof(fi_domain_attr)));
    ok &= out->domain_attr != nullptr;
    if (out->domain_attr != nullptr) {
      out->domain_attr->domain = nullptr;
      out->domain_attr->name = Strdup(in->domain_attr->name);
      out->domain_attr->auth_key =
          static_cast<uint8_t*>(DupBytes(in->domain_attr->auth_key, in->domain_attr->auth_key_size));
    }
  }
  if (in->fabric_attr != nullptr) {
    out->fabric_attr = static_cast<fi_fabric_attr*>(DupBytes(in->fabric_attr, sizeof(fi_fabric_attr)));
    ok &= out->fabric_attr != nullptr;
    if (out->fabric_attr != nullptr) {
      out->fabric_attr->fabric = nullptr;
      out->fabric_attr->name = Strdup(in->fabric_attr->name);
      out->fabric_attr->prov_name = Strdup(in->fabric_attr->prov_name);
    }
  }
  if (!ok) {
    FreeInfo(out);
    return nullptr;
  }
  return out;
}

int GetInfo(const std::vector<DeviceAddresses>& devices, uint32_t version, const char* node, const char* service,
            uint64_t flags, const fi_info* hints, fi_info** info) {
  if (info == nullptr) return -FI_EINVAL;
  *info = nullptr;
  Request req;
  if (hints != nullptr) {
    if (hints->fabric_attr != nullptr) {
      // Layered requests name the core first: ofi_rxm asks "uroce;^ofi_rxm"
      // (libfabric has filtered by name already; this guards direct calls).
      if (const char* name = hints->fabric_attr->prov_name; name != nullptr) {
        const size_t core = std::strcspn(name, ";");
        if (core != std::strlen(kProviderName) || strncasecmp(name, kProviderName, core) != 0) return -FI_ENODATA;
      }
      if (hints->fabric_attr->name != nullptr && std::strcmp(hints->fabric_attr->name, kFabricName) != 0) {
        return -FI_ENODATA;
      }
    }
    if (hints->ep_attr != nullptr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_MSG) {
      return -FI_ENODATA;
    }
    if (hints->ep_attr != nullptr && hints->ep_attr->protocol != FI_PROTO_UNSPEC &&
        hints->ep_attr->protocol != FI_PROTO_RDMA_CM_IB_RC) {
      return -FI_ENODATA;
    }
    if (!AddrFormatFamily(hints->addr_format, &req.family)) return -FI_ENODATA;
    if (hints->src_addr != nullptr) {
      if (!SockaddrToGid(static_cast<const sockaddr*>(hints->src_addr), &req.src_gid, &req.src_port)) {
        return -FI_ENODATA;
      }
      req.has_src = true;
    }
    if (hints->dest_addr != nullptr) {
      if (!SockaddrToGid(static_cast<const sockaddr*>(hints->dest_addr), &req.dest_gid, &req.dest_port)) {
        return -FI_ENODATA;
      }
      req.has_dest = true;
    }
    if (!AttributesOk(hints, version)) return -FI_ENODATA;
    if (hints->domain_attr != nullptr && hints->domain_attr->name != nullptr) {
      bool known = false;
      for (const DeviceAddresses& d : devices) known |= d.domain_name == hints->domain_attr->name;
      if (!known) return -FI_ENODATA;
    }
  }
  // node/service: the local address with FI_SOURCE (or with no node at all,
  // as a listening server asks), the peer's otherwise (fi_getinfo(3)).
  if (node != nullptr || service != nullptr) {
    const bool source = (flags & FI_SOURCE) != 0 || node == nullptr;
    sockaddr_storage ss{};
    if (!Resolve(node, service != nullptr ? service : "0", req.family, &ss, source && node == nullptr)) {
      return -FI_ENODATA;
    }
    transport::Gid gid{};
    uint16_t port = 0;
    SockaddrToGid(reinterpret_cast<const sockaddr*>(&ss), &gid, &port);
    if (source) {
      req.has_src = true;
      req.src_gid = gid;
      req.src_port = port;
      if (node == nullptr) {
        // A wildcard: any of our addresses of that family.
        req.src_gid = ss.ss_family == AF_INET ? transport::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}
                                              : transport::Gid{};
      }
    } else {
      req.has_dest = true;
      req.dest_gid = gid;
      req.dest_port = port;
    }
  }

  uint64_t caps = 0, mr_mode = 0;
  if (!CapsOk(hints, &caps)) return -FI_ENODATA;
  if (!MrModeOk(hints, version, &caps, &mr_mode)) return -FI_ENODATA;

  fi_info* head = nullptr;
  fi_info** tail = &head;
  // IPv4 first, then IPv6: programs that take the first entry get IPv4.
  for (int pass = 0; pass < 2; ++pass) {
    const bool want_v4 = pass == 0;
    for (const DeviceAddresses& device : devices) {
      if (hints != nullptr && hints->domain_attr != nullptr && hints->domain_attr->name != nullptr &&
          device.domain_name != hints->domain_attr->name) {
        continue;
      }
      for (const transport::Gid& gid : device.gids) {
        if (transport::IsIpv4MappedGid(gid) != want_v4) continue;
        if (req.family == AF_INET && !want_v4) continue;
        if (req.family == AF_INET6 && want_v4) continue;
        if (req.has_dest && transport::IsIpv4MappedGid(req.dest_gid) != want_v4) continue;
        if (req.has_src) {
          if (transport::IsIpv4MappedGid(req.src_gid) != want_v4 && !IsAnyAddress(req.src_gid)) continue;
          if (!IsAnyAddress(req.src_gid) && req.src_gid != gid) continue;
        }
        fi_info* fi = BuildInfo(device, gid, req, caps, mr_mode, hints);
        if (fi == nullptr) {
          FreeInfo(head);
          return -FI_ENOMEM;
        }
        *tail = fi;
        tail = &fi->next;
        break;  // one address per family per device
      }
    }
  }
  if (head == nullptr) return -FI_ENODATA;
  *info = head;
  return 0;
}

}  // namespace uroce::fabric
