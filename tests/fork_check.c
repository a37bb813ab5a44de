// fork(2) after a device was opened, as rdma-core's own tests and Python's
// multiprocessing do: the parent opens uroce0 and makes objects, then forks.
// ibv_fork_init(3): the child may not use its parent's objects, but it may
// open the device and make its own.
//
//   fork_check pair     Attached to a daemon: two forked children each open
//                       uroce0, connect an RC QP to each other (QPN and GID
//                       over a socketpair) and SEND 32 checked messages each
//                       way, with DPDK's memory not shared with the parent.
//                       Then the parent, whose heap the children must not
//                       have touched, SENDs to itself over a new RC QP.
//                       Exit 0 when all of that worked.
//   fork_check orphan   Attached to a daemon: the parent opens uroce0, forks
//                       a child that sleeps for ARG seconds and exits, and
//                       prints "parent PID child PID" and leaves at once. The
//                       caller checks that the daemon lets the parent's
//                       session go while the child lives.
//   fork_check private  A process-private device (UROCE_CONFIG): the child
//                       still lists uroce0, and opening it fails with ENODEV
//                       (its DPDK ports are the parent's).
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kMessages = 32, kSize = 256, kDepth = 8 };

static void die(const char* what) {
  fprintf(stderr, "fork_check[%d]: %s (errno %d: %s)\n", (int)getpid(), what, errno, strerror(errno));
  exit(1);
}

static struct ibv_context* open_first(struct ibv_device** list_or_null) {
  struct ibv_device** list = list_or_null;
  int n = 0;
  if (list == NULL) list = ibv_get_device_list(&n);
  if (list == NULL || list[0] == NULL) die("no uroce device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (list_or_null == NULL) ibv_free_device_list(list);
  return ctx;
}

// What the parent makes before it forks: a whole set of objects, so that
// the runtime runs and the children inherit it.
static void parent_objects(struct ibv_context* ctx) {
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (pd == NULL || cq == NULL) die("parent: pd/cq");
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  if (ibv_create_qp(pd, &ia) == NULL) die("parent: qp");
  struct ibv_port_attr port;
  if (ibv_query_port(ctx, 1, &port) != 0) die("parent: query_port");
}

struct peer_info {
  uint32_t qpn;
  union ibv_gid gid;
};

static void modify(struct ibv_qp* qp, struct ibv_qp_attr* a, int mask, const char* what) {
  if (ibv_modify_qp(qp, a, mask) != 0) die(what);
}

static int poll_one(struct ibv_cq* cq, struct ibv_wc* wc) {
  for (long spins = 0; spins < 200000000L; ++spins) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) die("poll_cq");
    if (n == 1) {
      if (wc->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "fork_check[%d]: completion %s\n", (int)getpid(), ibv_wc_status_str(wc->status));
        exit(1);
      }
      return 0;
    }
  }
  fprintf(stderr, "fork_check[%d]: no completion\n", (int)getpid());
  exit(1);
}

static void connect_rc(struct ibv_qp* qp, uint32_t dest_qpn, const union ibv_gid* dgid, const char* who) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = 0};
  modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, who);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *dgid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  modify(qp, &a,
         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER,
         who);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  modify(qp, &a,
         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
         who);
}

// Whether this process still maps DPDK's memory shared ("/memfd:nohuge"
// with "s" in its permissions, proc(5)): a forked child's heap would then be
// its parent's.
static int eal_memory_shared(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) die("/proc/self/maps");
  char line[512];
  int shared = 0;
  while (fgets(line, sizeof(line), maps) != NULL) {
    char perms[8] = "";
    if (sscanf(line, "%*s %7s", perms) == 1 && perms[3] == 's' && strstr(line, "/memfd:nohuge") != NULL) shared = 1;
  }
  fclose(maps);
  return shared;
}

// Message i's receive: its length and its bytes ('a' + i % 26).
static void check_receive(const struct ibv_wc* wc, const char* buf, int i) {
  if (wc->opcode != IBV_WC_RECV || wc->byte_len != kSize) die("child: expected a receive");
  for (int k = 0; k < kSize; ++k) {
    if (buf[k] != 'a' + (i % 26)) die("child: received the wrong bytes");
  }
}

// One child: its own device, PD, CQ and RC QP, connected over `sock` to the
// other child's; `first` sends first.
static void child(int sock, int first, struct ibv_device** inherited_list) {
  alarm(30);
  // One child opens through the list its parent got, the other through a
  // list of its own: both must give a device of the child's own.
  struct ibv_context* ctx = open_first(first ? inherited_list : NULL);
  if (ctx == NULL) die("child: ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * kDepth, NULL, NULL, 0);
  if (pd == NULL || cq == NULL) die("child: pd/cq");
  static char buf[2][kSize];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
  if (mr == NULL) die("child: reg_mr");
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = kDepth, .max_recv_wr = kDepth, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp == NULL) die("child: create_qp");
  struct peer_info mine = {.qpn = qp->qp_num}, theirs;
  if (ibv_query_gid(ctx, 1, 0, &mine.gid) != 0) die("child: query_gid");
  if (write(sock, &mine, sizeof(mine)) != (ssize_t)sizeof(mine)) die("child: write");
  if (read(sock, &theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs)) die("child: read");

  connect_rc(qp, theirs.qpn, &theirs.gid, "child: connect");
  if (eal_memory_shared()) die("child: DPDK's memory is still shared with the parent");
  // Both ready before the first SEND (RNR retries would cover it too).
  char go = 1;
  struct ibv_sge rsge = {.addr = (uintptr_t)buf[1], .length = kSize, .lkey = mr->lkey};
  struct ibv_recv_wr rwr = {.sg_list = &rsge, .num_sge = 1}, *bad_r;
  if (ibv_post_recv(qp, &rwr, &bad_r) != 0) die("child: post_recv");
  if (write(sock, &go, 1) != 1 || read(sock, &go, 1) != 1) die("child: ready");

  // The peer's next SEND may overtake its ACK of ours (a responder need not
  // acknowledge at once), so that receive can complete before our send
  // does: a CQ keeps each work queue's completions in order, not the order
  // between a QP's send and receive queues. Seen under CPU load.
  int received_early = 0;
  for (int i = 0; i < 2 * kMessages; ++i) {
    struct ibv_wc wc;
    const int sending = (i % 2 == 0) == (first != 0);
    if (sending) {
      memset(buf[0], 'a' + (i % 26), kSize);
      struct ibv_sge sge = {.addr = (uintptr_t)buf[0], .length = kSize, .lkey = mr->lkey};
      struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                         *bad;
      if (ibv_post_send(qp, &wr, &bad) != 0) die("child: post_send");
      for (;;) {
        poll_one(cq, &wc);
        if (wc.opcode == IBV_WC_SEND) break;
        if (wc.opcode != IBV_WC_RECV || received_early || i + 1 >= 2 * kMessages) {
          die("child: expected a send completion");
        }
        check_receive(&wc, buf[1], i + 1);  // the next message, early
        if (ibv_post_recv(qp, &rwr, &bad_r) != 0) die("child: post_recv");
        received_early = 1;
      }
    } else if (received_early) {
      received_early = 0;  // checked when it came
    } else {
      poll_one(cq, &wc);
      check_receive(&wc, buf[1], i);
      if (ibv_post_recv(qp, &rwr, &bad_r) != 0) die("child: post_recv");
    }
  }
  // The last SEND's ACK must reach its sender before this process goes.
  if (write(sock, &go, 1) != 1 || read(sock, &go, 1) != 1) die("child: done");
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("child %d: %d messages each way\n", (int)getpid(), kMessages);
  fflush(stdout);
  _exit(0);  // as multiprocessing's children leave
}

static int pair(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n < 1) die("no uroce device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == NULL) die("parent: ibv_open_device");
  parent_objects(ctx);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair");
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    fflush(stdout);
    kids[k] = fork();
    if (kids[k] < 0) die("fork");
    if (kids[k] == 0) {
      close(sv[1 - k]);
      child(sv[k], k == 0, list);
    }
  }
  close(sv[0]);
  close(sv[1]);
  int failed = 0;
  for (int k = 0; k < 2; ++k) {
    int status = 0;
    if (waitpid(kids[k], &status, 0) != kids[k] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_check: child %d failed (status 0x%x)\n", (int)kids[k], status);
      failed = 1;
    }
  }
  if (!failed) {
    // The parent's own runtime, untouched by its children: a SEND to itself.
    struct ibv_pd* pd = ibv_alloc_pd(ctx);
    struct ibv_cq* cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    static char buf[2][kSize];
    struct ibv_mr* mr = pd == NULL ? NULL : ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp* qp = mr == NULL || cq == NULL ? NULL : ibv_create_qp(pd, &ia);
    if (qp == NULL) die("parent after its children: pd/cq/mr/qp");
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid) != 0) die("parent: query_gid");
    alarm(30);
    connect_rc(qp, qp->qp_num, &gid, "parent: connect to itself");
    memset(buf[0], 'p', kSize);
    struct ibv_sge rsge = {.addr = (uintptr_t)buf[1], .length = kSize, .lkey = mr->lkey};
    struct ibv_recv_wr rwr = {.sg_list = &rsge, .num_sge = 1}, *bad_r;
    struct ibv_sge sge = {.addr = (uintptr_t)buf[0], .length = kSize, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_recv(qp, &rwr, &bad_r) != 0 || ibv_post_send(qp, &wr, &bad) != 0) die("parent: post");
    struct ibv_wc wc;
    poll_one(cq, &wc);
    poll_one(cq, &wc);
    if (memcmp(buf[0], buf[1], kSize) != 0) die("parent: its SEND to itself arrived wrong");
    printf("pair: the parent's own runtime still works\n");
  }
  ibv_free_device_list(list);
  printf(failed ? "pair: FAILED\n" : "pair: both children connected and exchanged their messages\n");
  return failed;
}

static int orphan(int seconds) {
  struct ibv_context* ctx = open_first(NULL);
  if (ctx == NULL) die("parent: ibv_open_device");
  parent_objects(ctx);
  fflush(stdout);
  pid_t kid = fork();
  if (kid < 0) die("fork");
  if (kid == 0) {
    sleep((unsigned)seconds);
    _exit(0);
  }
  printf("parent %d child %d\n", (int)getpid(), (int)kid);
  fflush(stdout);
  return 0;
}

static int private_device(void) {
  struct ibv_context* ctx = open_first(NULL);
  if (ctx == NULL) die("parent: ibv_open_device");
  parent_objects(ctx);
  fflush(stdout);
  pid_t kid = fork();
  if (kid < 0) die("fork");
  if (kid == 0) {
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (list == NULL || n < 1) die("child: the device is no longer listed");
    errno = 0;
    struct ibv_context* c = ibv_open_device(list[0]);
    if (c != NULL || errno != ENODEV) {
      fprintf(stderr, "fork_check: the child opened its parent's process-private device (errno %d)\n", errno);
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("private: the child lists uroce0 and is refused it with ENODEV\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "pair") == 0) return pair();
  if (argc >= 2 && strcmp(argv[1], "orphan") == 0) return orphan(argc >= 3 ? atoi(argv[2]) : 5);
  if (argc >= 2 && strcmp(argv[1], "private") == 0) return private_device();
  fprintf(stderr, "usage: fork_check pair | orphan [SECONDS] | private\n");
  return 2;
}
