// The librdmacm calls that need uroce's devices and connection managers, as
// one X-macro list: X(return type, name, (parameters), (arguments)).
//
// They are implemented inside uroce's libibverbs.so.1 (namespace
// uroce::rdmacm::api), where the process's one runtime and its connection
// managers live, and reached through one table, RdmacmOps, that
// libibverbs.so.1 exports as uroce_rdmacm_v1@UROCE_PRIVATE_1. uroce's
// librdmacm.so.1 (librdmacm.cc) defines the public rdma_* names with
// rdma-core's symbol versions and forwards each call through the table.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstddef>

#define UROCE_RDMACM_ENTRY_POINTS(X)                                                                                \
  X(rdma_event_channel*, rdma_create_event_channel, (void), ())                                                     \
  X(void, rdma_destroy_event_channel, (rdma_event_channel * channel), (channel))                                    \
  X(int, rdma_create_id, (rdma_event_channel * channel, rdma_cm_id * *id, void* context, rdma_port_space ps),       \
    (channel, id, context, ps))                                                                                     \
  X(int, rdma_create_ep, (rdma_cm_id * *id, rdma_addrinfo * res, ibv_pd * pd, ibv_qp_init_attr * qp_init_attr),    \
    (id, res, pd, qp_init_attr))                                                                                    \
  X(void, rdma_destroy_ep, (rdma_cm_id * id), (id))                                                                 \
  X(int, rdma_destroy_id, (rdma_cm_id * id), (id))                                                                  \
  X(int, rdma_bind_addr, (rdma_cm_id * id, sockaddr * addr), (id, addr))                                            \
  X(int, rdma_resolve_addr, (rdma_cm_id * id, sockaddr * src_addr, sockaddr * dst_addr, int timeout_ms),          \
    (id, src_addr, dst_addr, timeout_ms))                                                                           \
  X(int, rdma_resolve_route, (rdma_cm_id * id, int timeout_ms), (id, timeout_ms))                                   \
  X(int, rdma_create_qp, (rdma_cm_id * id, ibv_pd * pd, ibv_qp_init_attr * qp_init_attr), (id, pd, qp_init_attr))  \
  X(int, rdma_create_qp_ex, (rdma_cm_id * id, ibv_qp_init_attr_ex * qp_init_attr), (id, qp_init_attr))            \
  X(void, rdma_destroy_qp, (rdma_cm_id * id), (id))                                                                 \
  X(int, rdma_connect, (rdma_cm_id * id, rdma_conn_param * conn_param), (id, conn_param))                          \
  X(int, rdma_establish, (rdma_cm_id * id), (id))                                                                   \
  X(int, rdma_listen, (rdma_cm_id * id, int backlog), (id, backlog))                                                \
  X(int, rdma_get_request, (rdma_cm_id * listen, rdma_cm_id * *id), (listen, id))                                  \
  X(int, rdma_accept, (rdma_cm_id * id, rdma_conn_param * conn_param), (id, conn_param))                           \
  X(int, rdma_reject, (rdma_cm_id * id, const void* private_data, uint8_t private_data_len),                        \
    (id, private_data, private_data_len))                                                                           \
  X(int, rdma_notify, (rdma_cm_id * id, ibv_event_type event), (id, event))                                         \
  X(int, rdma_disconnect, (rdma_cm_id * id), (id))                                                                  \
  X(int, rdma_get_cm_event, (rdma_event_channel * channel, rdma_cm_event * *event), (channel, event))              \
  X(int, rdma_ack_cm_event, (rdma_cm_event * event), (event))                                                       \
  X(__be16, rdma_get_src_port, (rdma_cm_id * id), (id))                                                             \
  X(__be16, rdma_get_dst_port, (rdma_cm_id * id), (id))                                                             \
  X(ibv_context**, rdma_get_devices, (int* num_devices), (num_devices))                                             \
  X(void, rdma_free_devices, (ibv_context * *list), (list))                                                         \
  X(int, rdma_set_option, (rdma_cm_id * id, int level, int optname, void* optval, size_t optlen),                   \
    (id, level, optname, optval, optlen))                                                                           \
  X(int, rdma_migrate_id, (rdma_cm_id * id, rdma_event_channel * channel), (id, channel))                           \
  X(int, rdma_init_qp_attr, (rdma_cm_id * id, ibv_qp_attr * qp_attr, int* qp_attr_mask), (id, qp_attr, qp_attr_mask)) \
  X(int, rdma_create_srq, (rdma_cm_id * id, ibv_pd * pd, ibv_srq_init_attr * attr), (id, pd, attr))                 \
  X(int, rdma_create_srq_ex, (rdma_cm_id * id, ibv_srq_init_attr_ex * attr), (id, attr))                            \
  X(void, rdma_destroy_srq, (rdma_cm_id * id), (id))

namespace uroce::rdmacm {

// Version 1 of the table: only ever extended at the end (size tells how far).
struct RdmacmOps {
  size_t size;
#define UROCE_RDMACM_OPS_MEMBER(ret, name, params, args) ret(*name) params;
  UROCE_RDMACM_ENTRY_POINTS(UROCE_RDMACM_OPS_MEMBER)
#undef UROCE_RDMACM_OPS_MEMBER
};

namespace api {
#define UROCE_RDMACM_DECLARE(ret, name, params, args) ret name params;
UROCE_RDMACM_ENTRY_POINTS(UROCE_RDMACM_DECLARE)
#undef UROCE_RDMACM_DECLARE
}  // namespace api

}  // namespace uroce::rdmacm

// In uroce's libibverbs.so.1, version UROCE_PRIVATE_1 (libibverbs.map).
extern "C" const uroce::rdmacm::RdmacmOps* uroce_rdmacm_v1(void);
