// The libibverbs 1.0 ABI (2006; struct ibv_device_1_0 and friends): the
// names rdma-core still exports as NAME@IBVERBS_1.0 beside the default
// NAME@@IBVERBS_1.1. Programs linked since libibverbs 1.1 never bind to
// them; a program that does gets ENOSYS (NULL with errno for constructors,
// -1 with errno for the calls that returned -1) instead of a wrong layout.
// ibv_register_driver@IBVERBS_1.1 (the pre-2017 provider entry point)
// registers nothing.
#include <cerrno>
#include <cstdint>

#define UROCE_COMPAT(name, version) __asm__(".symver uroce_compat_" #name "," #name "@" #version)

extern "C" {
void uroce_compat_ibv_ack_async_event(void) {}
UROCE_COMPAT(ibv_ack_async_event, IBVERBS_1.0);
void uroce_compat_ibv_ack_cq_events(void) {}
UROCE_COMPAT(ibv_ack_cq_events, IBVERBS_1.0);
void* uroce_compat_ibv_alloc_pd(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_alloc_pd, IBVERBS_1.0);
int uroce_compat_ibv_attach_mcast(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_attach_mcast, IBVERBS_1.0);
int uroce_compat_ibv_close_device(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_close_device, IBVERBS_1.0);
void* uroce_compat_ibv_create_ah(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_create_ah, IBVERBS_1.0);
void* uroce_compat_ibv_create_cq(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_create_cq, IBVERBS_1.0);
void* uroce_compat_ibv_create_qp(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_create_qp, IBVERBS_1.0);
void* uroce_compat_ibv_create_srq(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_create_srq, IBVERBS_1.0);
int uroce_compat_ibv_dealloc_pd(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_dealloc_pd, IBVERBS_1.0);
int uroce_compat_ibv_dereg_mr(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_dereg_mr, IBVERBS_1.0);
int uroce_compat_ibv_destroy_ah(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_destroy_ah, IBVERBS_1.0);
int uroce_compat_ibv_destroy_cq(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_destroy_cq, IBVERBS_1.0);
int uroce_compat_ibv_destroy_qp(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_destroy_qp, IBVERBS_1.0);
int uroce_compat_ibv_destroy_srq(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_destroy_srq, IBVERBS_1.0);
int uroce_compat_ibv_detach_mcast(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_detach_mcast, IBVERBS_1.0);
void uroce_compat_ibv_free_device_list(void) {}
UROCE_COMPAT(ibv_free_device_list, IBVERBS_1.0);
int uroce_compat_ibv_get_async_event(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_get_async_event, IBVERBS_1.0);
int uroce_compat_ibv_get_cq_event(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_get_cq_event, IBVERBS_1.0);
uint64_t uroce_compat_ibv_get_device_guid(void) {
  errno = ENOSYS;
  return 0;
}
UROCE_COMPAT(ibv_get_device_guid, IBVERBS_1.0);
void* uroce_compat_ibv_get_device_list(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_get_device_list, IBVERBS_1.0);
void* uroce_compat_ibv_get_device_name(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_get_device_name, IBVERBS_1.0);
int uroce_compat_ibv_modify_qp(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_modify_qp, IBVERBS_1.0);
int uroce_compat_ibv_modify_srq(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_modify_srq, IBVERBS_1.0);
void* uroce_compat_ibv_open_device(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_open_device, IBVERBS_1.0);
int uroce_compat_ibv_query_device(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_device, IBVERBS_1.0);
int uroce_compat_ibv_query_gid(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_gid, IBVERBS_1.0);
int uroce_compat_ibv_query_pkey(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_pkey, IBVERBS_1.0);
int uroce_compat_ibv_query_port(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_port, IBVERBS_1.0);
int uroce_compat_ibv_query_qp(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_qp, IBVERBS_1.0);
int uroce_compat_ibv_query_srq(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_query_srq, IBVERBS_1.0);
void* uroce_compat_ibv_reg_mr(void) {
  errno = ENOSYS;
  return nullptr;
}
UROCE_COMPAT(ibv_reg_mr, IBVERBS_1.0);
int uroce_compat_ibv_resize_cq(void) {
  errno = ENOSYS;
  return -1;
}
UROCE_COMPAT(ibv_resize_cq, IBVERBS_1.0);
void uroce_compat_ibv_register_driver(void) {}
UROCE_COMPAT(ibv_register_driver, IBVERBS_1.1);

}  // extern "C"
