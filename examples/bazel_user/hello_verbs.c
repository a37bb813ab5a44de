/* hello_verbs [MESSAGES]: two RC QPs, on the first two devices when there are
 * two (uroce0 and uroce1 of configs/ring.ini: the messages cross their
 * link), else both on the first, connected through their GIDs: one sends
 * MESSAGES messages (default 1), the other checks each. Plain libibverbs:
 * it runs on any RoCE device, and over uroce in CI. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
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

struct side {
  struct ibv_context *ctx;
  union ibv_gid gid;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
};

static int open_side(struct ibv_device *device, struct side *s) {
  s->ctx = ibv_open_device(device);
  if (s->ctx == NULL || ibv_query_gid(s->ctx, 1, 0, &s->gid)) return -1;
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
  if (s->pd == NULL || s->cq == NULL) return -1;
  struct ibv_qp_init_attr init = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  s->qp = ibv_create_qp(s->pd, &init);
  return s->qp == NULL ? -1 : 0;
}

static void close_side(struct side *s) {
  ibv_destroy_qp(s->qp);
  ibv_destroy_cq(s->cq);
  ibv_dealloc_pd(s->pd);
  ibv_close_device(s->ctx);
}

int main(int argc, char **argv) {
  const int messages = argc > 1 ? atoi(argv[1]) : 1;
  int n = 0;
  struct ibv_device **devices = ibv_get_device_list(&n);
  if (devices == NULL || n == 0) return fail("finding a device");
  struct side a, b;
  if (open_side(devices[0], &a) || open_side(devices[n > 1 ? 1 : 0], &b)) return fail("opening a device");
  static char sent[64] = "hello from uroce", received[64];
  struct ibv_mr *mr_sent = ibv_reg_mr(a.pd, sent, sizeof(sent), 0);
  struct ibv_mr *mr_received = ibv_reg_mr(b.pd, received, sizeof(received), IBV_ACCESS_LOCAL_WRITE);
  if (mr_sent == NULL || mr_received == NULL) return fail("ibv_reg_mr");
  if (to_rts(a.qp, b.qp->qp_num, &b.gid) || to_rts(b.qp, a.qp->qp_num, &a.gid)) return fail("connecting the QPs");

  for (int i = 0; i < messages; ++i) {
    snprintf(sent, sizeof(sent), "hello %d from uroce", i);
    struct ibv_sge rsge = {.addr = (uintptr_t)received, .length = sizeof(received), .lkey = mr_received->lkey};
    struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rsge, .num_sge = 1}, *bad_rwr;
    if (ibv_post_recv(b.qp, &rwr, &bad_rwr)) return fail("ibv_post_recv");
    struct ibv_sge ssge = {.addr = (uintptr_t)sent, .length = sizeof(sent), .lkey = mr_sent->lkey};
    struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED}, *bad_swr;
    if (ibv_post_send(a.qp, &swr, &bad_swr)) return fail("ibv_post_send");
    struct ibv_wc wc;
    if (wait_one(b.cq, &wc) || wait_one(a.cq, &wc)) return fail("a completion");
    if (strcmp(received, sent) != 0) return fail("checking a message");
  }
  printf("hello_verbs: QP 0x%x of %s sent %d messages, each checked (the last \"%s\"), to QP 0x%x of %s\n",
         a.qp->qp_num, ibv_get_device_name(devices[0]), messages, received, b.qp->qp_num,
         ibv_get_device_name(devices[n > 1 ? 1 : 0]));
  ibv_dereg_mr(mr_sent);
  ibv_dereg_mr(mr_received);
  close_side(&a);
  close_side(&b);
  ibv_free_device_list(devices);
  return 0;
}
