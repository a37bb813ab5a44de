/* A small verbs program: two RC QPs of the first device, connected to each
 * other through the device's own GID, send a message; the receiver checks
 * it. Plain libibverbs: it runs on any RoCE device, and over uroce in CI. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what) {
  fprintf(stderr, "hello_verbs: %s failed\n", what);
  return 1;
}

static int to_rts(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  for (long spins = 0; spins < 2000000000L; ++spins) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n == 1 && wc->status == IBV_WC_SUCCESS ? 0 : -1;
  }
  return -1;
}

int main(void) {
  int n = 0;
  struct ibv_device **devices = ibv_get_device_list(&n);
  if (devices == NULL || n == 0) return fail("finding a device");
  struct ibv_context *ctx = ibv_open_device(devices[0]);
  if (ctx == NULL) return fail("ibv_open_device");
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid)) return fail("ibv_query_gid");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (pd == NULL || cq == NULL) return fail("ibv_alloc_pd / ibv_create_cq");
  static char sent[64] = "hello from uroce", received[64];
  struct ibv_mr *mr_sent = ibv_reg_mr(pd, sent, sizeof(sent), 0);
  struct ibv_mr *mr_received = ibv_reg_mr(pd, received, sizeof(received), IBV_ACCESS_LOCAL_WRITE);
  if (mr_sent == NULL || mr_received == NULL) return fail("ibv_reg_mr");
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
  if (a == NULL || b == NULL) return fail("ibv_create_qp");
  if (to_rts(a, b->qp_num, &gid) || to_rts(b, a->qp_num, &gid)) return fail("connecting the QPs");

  struct ibv_sge rsge = {.addr = (uintptr_t)received, .length = sizeof(received), .lkey = mr_received->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rsge, .num_sge = 1}, *bad_rwr;
  if (ibv_post_recv(b, &rwr, &bad_rwr)) return fail("ibv_post_recv");
  struct ibv_sge ssge = {.addr = (uintptr_t)sent, .length = sizeof(sent), .lkey = mr_sent->lkey};
  struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED}, *bad_swr;
  if (ibv_post_send(a, &swr, &bad_swr)) return fail("ibv_post_send");
  struct ibv_wc first, second;
  if (wait_one(cq, &first) || wait_one(cq, &second)) return fail("a completion");
  if (strcmp(received, sent) != 0) return fail("checking the message");
  printf("hello_verbs: %s: QP 0x%x sent \"%s\" to QP 0x%x\n", ibv_get_device_name(devices[0]), a->qp_num,
         received, b->qp_num);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(mr_sent);
  ibv_dereg_mr(mr_received);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(devices);
  return 0;
}
