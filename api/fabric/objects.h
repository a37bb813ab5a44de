// The objects of uroce's libfabric provider. Each begins with the libfabric
// struct the application holds (struct fid_fabric, fid_domain, fid_ep,
// fid_pep, fid_mr), so a pointer to one is a pointer to the other.
//
// Where they sit: the provider is compiled into uroce's libibverbs.so.1 (the
// process's one uroce runtime lives there: EAL starts once per process) and
// liburoce-fi.so, the file libfabric loads from FI_PROVIDER_PATH, hands
// libfabric the provider found there (api/fabric/loader.cc).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cm/connection_manager.h"
#include "cq/fabric_cq.h"
#include "cq/counter.h"
#include "cq/event_queue.h"
#include "transport/engine.h"

namespace uroce::fabric {

inline constexpr char kProviderName[] = "uroce";
inline constexpr char kFabricName[] = "uroce";
inline constexpr uint32_t kProviderVersion = FI_VERSION(1, 0);
inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

struct Fabric {
  fid_fabric fabric;  // first
};

struct Domain {
  fid_domain domain;  // first
  Fabric* fabric = nullptr;
  size_t endpoint_index = 0;  // the runtime endpoint (uroce device) it runs on
  transport::Engine* engine = nullptr;
  transport::PdHandle pd = 0;
  cm::ConnectionManager* cm = nullptr;
  uint32_t port_mtu = 1500;
  uint64_t mr_mode = 0;  // as agreed in getinfo (FI_MR_VIRT_ADDR decides iova)
  std::atomic<uint32_t> open_objects{0};  // EPs, MRs, CQs... (fi_close -FI_EBUSY)
};

struct MemoryRegion {
  fid_mr mr;  // first; mr.mem_desc points back here, mr.key is the rkey
  Domain* domain = nullptr;
  uint32_t lkey = 0;
};

// The handle of an FI_CONNREQ (fi_cm(3): info->handle): which CM request a
// later fi_endpoint + fi_accept or fi_reject answers.
struct ConnectionRequest {
  fid handle;  // first; fclass FI_CLASS_CONNREQ
  cm::ConnectionManager* cm = nullptr;
  cm::CmConnectionId id = 0;
  std::atomic<bool> answered{false};
  // The listener's count of requests handed out and not answered yet
  // (shared: the passive endpoint may be closed first).
  std::shared_ptr<std::atomic<unsigned>> unanswered;
};

// Marks `request` answered (accepted, rejected, or closed); true the first
// time only. Frees its place among its listener's unanswered requests.
inline bool MarkAnswered(ConnectionRequest* request) {
  if (request->answered.exchange(true)) return false;
  if (request->unanswered) request->unanswered->fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

struct PassiveEndpoint {
  fid_pep pep;  // first
  Fabric* fabric = nullptr;
  fi_info* info = nullptr;  // our copy
  cq::EventQueue* eq = nullptr;
  sockaddr_storage local{};  // bound address (port 0 until listen picks one)
  size_t endpoint_index = 0;
  cm::ConnectionManager* cm = nullptr;
  uint64_t registry_key = 0;
  bool listening = false;
  // fi_control(FI_BACKLOG) before fi_listen; 0: the connection manager's
  // default. FI_CONNREQ events handed out and not answered yet are bounded
  // by it (and by half the EQ: the EQ must never overrun, fi_eq(3) makes an
  // overrun EQ unusable for good).
  int backlog = 0;
  unsigned max_unanswered = cm::kCmDefaultBacklog;
  std::shared_ptr<std::atomic<unsigned>> unanswered = std::make_shared<std::atomic<unsigned>>(0);
  std::mutex mutex;
};

enum class EndpointState { kCreated, kEnabled, kConnecting, kAccepting, kConnected, kShutdown };

struct Endpoint {
  fid_ep ep;  // first
  Domain* domain = nullptr;
  fi_info* info = nullptr;  // our copy
  // Bindings (fi_ep_bind): the cq layer's objects.
  cq::FabricCq* tx_cq = nullptr;
  cq::FabricCq* rx_cq = nullptr;
  cq::Counter* tx_cntr = nullptr;
  cq::Counter* rx_cntr = nullptr;
  cq::EventQueue* eq = nullptr;
  bool tx_selective = false;  // FI_SELECTIVE_COMPLETION on the transmit CQ
  bool rx_selective = false;
  uint64_t tx_op_flags = 0;   // fi_control FI_SETOPSFLAG / tx_attr->op_flags
  uint64_t rx_op_flags = 0;
  // The engine's objects, made at fi_enable.
  transport::CompletionQueue* send_cq = nullptr;
  transport::CompletionQueue* recv_cq = nullptr;
  transport::QueuePair* qp = nullptr;
  uint32_t max_send_wr = 0, max_recv_wr = 0;
  // Connection management.
  std::mutex mutex;  // control path: state, addresses, CM ids
  std::atomic<EndpointState> state{EndpointState::kCreated};
  ConnectionRequest* request = nullptr;  // passive: from info->handle
  // Active: fi_connect is waiting for the peer's MAC (ARP/ND, off the
  // caller's thread); the REQ goes once it resolves.
  bool resolving = false;
  bool has_connection = false;
  cm::CmConnectionId connection = 0;
  uint64_t registry_key = 0;
  sockaddr_storage local{};
  sockaddr_storage peer{};
};

}  // namespace uroce::fabric
