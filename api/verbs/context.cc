// Queries of an open device: ibv_query_device(3), ibv_query_device_ex(3),
// ibv_query_port(3), ibv_query_gid(3), ibv_query_gid_ex(3),
// ibv_query_gid_table(3), ibv_query_pkey(3), ibv_get_pkey_index(3), and the
// asynchronous events, ibv_get_async_event(3) / ibv_ack_async_event(3).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api/verbs/objects.h"
#include "api/verbs/ops.h"
#include "api/verbs/registry.h"
#include "transport/on_demand_memory.h"
#include "transport/qp_state.h"
#include "transport/work_request.h"

namespace uroce::verbs {
namespace {

constexpr int kGidTableLength = 16;  // QpLimits::gid_table_size

void FillDeviceAttr(Context* ctx, ibv_device_attr* a) {
  std::memset(a, 0, sizeof(*a));
  const transport::QpLimits limits = ctx->engine->limits();
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "uroce 0.1");
  a->node_guid = static_cast<__be64>(DeviceGuid(ctx->device));
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = ~0ULL;
  a->page_size_cap = 0xfffff000;  // any 4 KiB multiple, as rxe
  a->vendor_id = 0xffffff;        // no IEEE OUI; rxe reports 0xffffff too
  a->vendor_part_id = 0x7572;     // "ur"
  a->hw_ver = 0;
  a->max_qp = static_cast<int>(ctx->engine_config->max_qps);
  a->max_qp_wr = 16384;  // Engine::CreateQp's bound
  // Memory windows of type 1 and 2B (api/verbs/mw.cc). Not
  // IBV_DEVICE_MEM_MGT_EXTENSIONS: it promises fast-registration MRs and
  // remote invalidation of MRs, which uroce does not have.
  // IBV_DEVICE_SRQ_RESIZE: ibv_modify_srq(3) with IBV_SRQ_MAX_WR (srq.cc,
  // Engine::ResizeSrq) works, as the flag promises.
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                        IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC |
                        IBV_DEVICE_SRQ_RESIZE;
  a->max_sge = static_cast<int>(transport::kMaxSendSge);
  a->max_sge_rd = static_cast<int>(transport::kMaxSendSge);
  a->max_cq = 65536;
  a->max_cqe = 1 << 22;  // Engine::CreateCq's bound
  a->max_mr = 1 << 20;
  a->max_mw = 1 << 16;  // windows share the key table with regions
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = limits.max_rd_atomic;
  a->max_qp_init_rd_atom = limits.max_dest_rd_atomic;
  a->max_res_rd_atom = limits.max_rd_atomic * a->max_qp;
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_ah = 1 << 16;
  a->max_srq = 1 << 16;
  a->max_srq_wr = 16384;
  a->max_srq_sge = static_cast<int>(transport::kMaxRecvSge);
  a->max_pkeys = limits.pkey_table_size;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
}

// Like rxe: the largest IBTA MTU that fits the Ethernet MTU less the RoCEv2
// headers (rxe_net.c's eth_mtu_int_to_enum subtracts its maximum header).
ibv_mtu ActiveMtu(uint32_t eth_mtu) {
  const uint32_t room = eth_mtu > 80 ? eth_mtu - 80 : 0;
  if (room >= 4096) return IBV_MTU_4096;
  if (room >= 2048) return IBV_MTU_2048;
  if (room >= 1024) return IBV_MTU_1024;
  if (room >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

bool GidAt(Context* ctx, uint32_t index, ibv_gid* gid) {
  const auto& gids = ctx->engine_config->gids;
  std::memset(gid, 0, sizeof(*gid));
  if (index >= kGidTableLength) return false;
  if (index < gids.size()) std::memcpy(gid->raw, gids[index].data(), 16);
  return true;
}

}  // namespace

int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* out, size_t attr_len) {
  if (port_num != 1) return EINVAL;
  Context* ctx = Context::From(context);
  ibv_port_attr a;
  std::memset(&a, 0, sizeof(a));
  // The port's state follows its link, as rxe's follows its netdev: DOWN
  // until the link is up (IBV_EVENT_PORT_ACTIVE then, runtime::Process::WatchPorts).
  // A link to another uroce process (memif, ring pair, daemon) counts as
  // ACTIVE before its peer arrives, unless active_before_link = no: frames
  // wait in the engine meanwhile (runtime/config.h).
  runtime::Process& process = runtime::Process::Get();
  const bool up = process.PortLinkUp(ctx->device->index);
  a.state = process.PortActive(ctx->device->index) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = ActiveMtu(ctx->port_mtu);
  a.gid_tbl_len = kGidTableLength;
  a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  a.max_msg_sz = 0x80000000;  // 2 GiB, IBTA's largest message
  a.pkey_tbl_len = ctx->engine->limits().pkey_table_size;
  a.lid = 0;  // RoCE: no LIDs
  a.max_vl_num = 1;
  a.active_width = 2;  // 4X
  a.active_speed = 32; // EDR (25 Gb/s per lane): what a software NIC claims
  a.phys_state = up ? 5 : 3;  // LinkUp or Disabled
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  std::memcpy(out, &a, std::min(attr_len, sizeof(a)));
  return 0;
}

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                  size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a;
  std::memset(&a, 0, sizeof(a));
  FillDeviceAttr(Context::From(context), &a.orig_attr);
  a.max_dm_size = kMaxDmSize;  // host memory (dm.cc)
  // On-demand paging (mr.cc): every operation the engine does on each
  // transport works on an IBV_ACCESS_ON_DEMAND region, since the flag
  // changes nothing below the verbs for an explicit one. Implicit regions
  // (the whole address space) reach memory through the kernel's fault-free
  // copies (transport/on_demand_memory.h), so a peer's access to an unmapped
  // page is NAKed, never a fault; offered where those system calls work.
  a.odp_caps.general_caps = IBV_ODP_SUPPORT;
  if (uroce::transport::OnDemandMemoryAvailable()) a.odp_caps.general_caps |= IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                              IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                                              IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
  a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  // XRC: an initiator's operations are RC's, a target receives into SRQs.
  a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                   IBV_ODP_SUPPORT_SRQ_RECV;
  // ibv_query_device_ex(3): the port count for devices with more than 255
  // ports, and for everyone who reads it (UCX does), so it is set, never 0.
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  std::memcpy(attr, &a, std::min(attr_size, sizeof(a)));
  return 0;
}

}  // namespace uroce::verbs

using uroce::verbs::Context;

extern "C" {

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  uroce::verbs::FillDeviceAttr(Context::From(context), attr);
  return 0;
}

// verbs.h makes ibv_query_port a macro for the inline ___ibv_query_port.
#undef ibv_query_port

// The exported (non-inline) ibv_query_port: the layout before
// port_cap_flags2 (rdma-core's struct _compat_ibv_port_attr).
int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* attr) {
  return uroce::verbs::QueryPort(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                                 offsetof(ibv_port_attr, port_cap_flags2));
}

// ibv_query_gid(3): 0, or -1 (rdma-core's convention for this call).
int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (port_num != 1 || index < 0 || !uroce::verbs::GidAt(Context::From(context), static_cast<uint32_t>(index), gid)) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

// rdma-core's private helper ibv_devinfo uses: 0 is IB/RoCE v1, 1 RoCE v2.
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (port_num != 1 || index >= static_cast<unsigned>(uroce::verbs::kGidTableLength)) return -1;
  *type = 1;  // IBV_GID_TYPE_SYSFS_ROCE_V2: every uroce GID is RoCEv2
  return 0;
}

// ibv_query_gid_ex(3): ENODATA for an empty entry, as rdma-core.
int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                      uint32_t flags, size_t entry_size) {
  if (flags != 0 || port_num != 1 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  Context* ctx = Context::From(context);
  ibv_gid gid;
  if (!uroce::verbs::GidAt(ctx, gid_index, &gid)) return EINVAL;
  if (gid_index >= ctx->engine_config->gids.size()) return ENODATA;
  std::memset(entry, 0, entry_size);
  entry->gid = gid;
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;  // uroce owns its port: no kernel netdev
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  Context* ctx = Context::From(context);
  const size_t n = ctx->engine_config->gids.size();
  if (max_entries < n) return -EINVAL;
  for (size_t i = 0; i < n; ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + i * entry_size);
    const int rc = _ibv_query_gid_ex(context, 1, static_cast<uint32_t>(i), e, 0, entry_size);
    if (rc != 0) return -rc;
  }
  return static_cast<ssize_t>(n);
}

// RoCE has the one default P_Key.
int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htons(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (port_num == 1 && (ntohs(pkey) & 0x7fff) == 0x7fff) return 0;
  return -1;
}

// ibv_get_async_event(3): blocks on async_fd (unless the program made it
// non-blocking), then takes the oldest event.
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* ctx = Context::From(context);
  uint64_t n = 0;
  if (read(context->async_fd, &n, sizeof(n)) != static_cast<ssize_t>(sizeof(n))) return -1;
  std::lock_guard<std::mutex> lock(ctx->async_mutex);
  if (ctx->async_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = ctx->async_events.front();
  ctx->async_events.pop_front();
  return 0;
}

void ibv_ack_async_event(ibv_async_event* event) {
  // Events are copies: nothing waits for their acknowledgement (destroying
  // an object with unacknowledged events does not block in uroce).
  (void)event;
}

}  // extern "C"
