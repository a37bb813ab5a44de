// The per-object verbs of uroce's libibverbs.so.1 that go into struct
// ibv_context's ops and struct verbs_context (context.cc fills them).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "common/ring.h"

namespace uroce::verbs {

// context.cc
int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len);
int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                  size_t attr_size);
// pd.cc
ibv_pd* AllocParentDomain(ibv_context* context, ibv_parent_domain_init_attr* attr);
ibv_td* AllocTd(ibv_context* context, ibv_td_init_attr* attr);
int DeallocTd(ibv_td* td);
// The allocator the engine takes a queue's ring memory from: the parent
// domain's (calling its alloc and free with `resource_type`), or empty (the
// heap) for a plain PD or a parent domain without allocators.
RingAllocator RingAllocatorOf(ibv_pd* pd, uint64_t resource_type);
// dm.cc. Device memory a context may hold (max_dm_size): host memory, so
// any bound would do; 256 KiB is what mlx5 NICs offer, and programs size
// their use of device memory from it.
constexpr uint64_t kMaxDmSize = 256 * 1024;
ibv_dm* AllocDm(ibv_context* context, ibv_alloc_dm_attr* attr);
int FreeDm(ibv_dm* dm);
ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned access);
// mr.cc
int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge);
// mw.cc
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type);
int DeallocMw(ibv_mw* mw);
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
// cq.cc
int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int ReqNotifyCq(ibv_cq* cq, int solicited_only);
ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr);
// qp.cc
int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr);
// srq.cc
int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_srq* CreateSrqEx(ibv_context* context, ibv_srq_init_attr_ex* attr);
int GetSrqNum(ibv_srq* srq, uint32_t* srq_num);
// xrcd.cc
ibv_xrcd* OpenXrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int CloseXrcd(ibv_xrcd* xrcd);

}  // namespace uroce::verbs
