// rdma-core's provider interface (IBVERBS_PRIVATE_34): the symbols its
// providers (libmlx5, ...) bind to. uroce is not a host for rdma-core
// providers, but those libraries still get loaded against uroce's
// libibverbs.so.1: DPDK's shared build dlopens every driver in its plugin
// directory at rte_eal_init, and librte_common_mlx5 / librte_net_mlx5 need
// libmlx5.so.1, which needs these names (a missing one fails the dlopen, and
// with it EAL start-up: see api/verbs/README.md). They are here so that
// those libraries load; called, they fail cleanly: EOPNOTSUPP, or NULL with
// errno, and verbs_register_driver_34 (libmlx5's constructor) registers
// nothing. Only mlx5 hardware would ever reach them. No rdma-core header
// declares them for applications, so the signatures below are only what the
// caller sees in registers: an int, a pointer or nothing.
#include <cerrno>

extern "C" {
int IBVERBS_PRIVATE_34(void) { return EOPNOTSUPP; }
int __ioctl_final_num_attrs(void) { return EOPNOTSUPP; }
void __verbs_log(void) {}
void* _verbs_init_and_alloc_context(void) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int execute_ioctl(void) { return EOPNOTSUPP; }
int ibv_cmd_advise_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_alloc_dm(void) { return EOPNOTSUPP; }
int ibv_cmd_alloc_mw(void) { return EOPNOTSUPP; }
int ibv_cmd_alloc_pd(void) { return EOPNOTSUPP; }
int ibv_cmd_attach_mcast(void) { return EOPNOTSUPP; }
int ibv_cmd_close_xrcd(void) { return EOPNOTSUPP; }
int ibv_cmd_create_ah(void) { return EOPNOTSUPP; }
int ibv_cmd_create_counters(void) { return EOPNOTSUPP; }
int ibv_cmd_create_cq(void) { return EOPNOTSUPP; }
int ibv_cmd_create_cq_ex(void) { return EOPNOTSUPP; }
int ibv_cmd_create_flow(void) { return EOPNOTSUPP; }
int ibv_cmd_create_flow_action_esp(void) { return EOPNOTSUPP; }
int ibv_cmd_create_qp(void) { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex(void) { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex2(void) { return EOPNOTSUPP; }
int ibv_cmd_create_rwq_ind_table(void) { return EOPNOTSUPP; }
int ibv_cmd_create_srq(void) { return EOPNOTSUPP; }
int ibv_cmd_create_srq_ex(void) { return EOPNOTSUPP; }
int ibv_cmd_create_wq(void) { return EOPNOTSUPP; }
int ibv_cmd_dealloc_mw(void) { return EOPNOTSUPP; }
int ibv_cmd_dealloc_pd(void) { return EOPNOTSUPP; }
int ibv_cmd_dereg_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_ah(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_counters(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_cq(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow_action(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_qp(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_rwq_ind_table(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_srq(void) { return EOPNOTSUPP; }
int ibv_cmd_destroy_wq(void) { return EOPNOTSUPP; }
int ibv_cmd_detach_mcast(void) { return EOPNOTSUPP; }
int ibv_cmd_free_dm(void) { return EOPNOTSUPP; }
int ibv_cmd_get_context(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_cq(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_flow_action_esp(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_qp(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_qp_ex(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_srq(void) { return EOPNOTSUPP; }
int ibv_cmd_modify_wq(void) { return EOPNOTSUPP; }
int ibv_cmd_open_qp(void) { return EOPNOTSUPP; }
int ibv_cmd_open_xrcd(void) { return EOPNOTSUPP; }
int ibv_cmd_poll_cq(void) { return EOPNOTSUPP; }
int ibv_cmd_post_recv(void) { return EOPNOTSUPP; }
int ibv_cmd_post_send(void) { return EOPNOTSUPP; }
int ibv_cmd_post_srq_recv(void) { return EOPNOTSUPP; }
int ibv_cmd_query_context(void) { return EOPNOTSUPP; }
int ibv_cmd_query_device_any(void) { return EOPNOTSUPP; }
int ibv_cmd_query_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_query_port(void) { return EOPNOTSUPP; }
int ibv_cmd_query_qp(void) { return EOPNOTSUPP; }
int ibv_cmd_query_srq(void) { return EOPNOTSUPP; }
int ibv_cmd_read_counters(void) { return EOPNOTSUPP; }
int ibv_cmd_reg_dm_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_reg_dmabuf_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_reg_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_req_notify_cq(void) { return EOPNOTSUPP; }
int ibv_cmd_rereg_mr(void) { return EOPNOTSUPP; }
int ibv_cmd_resize_cq(void) { return EOPNOTSUPP; }
int ibv_read_ibdev_sysfs_file(void) {
  errno = ENOENT;
  return -1;
}
int verbs_allow_disassociate_destroy(void) { return 0; }
void verbs_init_cq(void) {}
void* verbs_open_device(void) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void verbs_register_driver_34(void) {}
void verbs_set_ops(void) {}
void verbs_uninit_context(void) {}

// IBVERBS_1.0 / 1.1 helpers for the kernel's rdma_cm and SA structures
// (librdmacm uses them with what the kernel's rdma_ucm hands it; uroce has
// no kernel side, so there is never anything to convert).
void ibv_copy_path_rec_from_kern(void) {}
void ibv_copy_path_rec_to_kern(void) {}
void ibv_copy_qp_attr_from_kern(void) {}
void ibv_copy_ah_attr_from_kern(void) {}

}  // extern "C"
