// First contact, all to all, over "uroce;ofi_rxm": the connection pattern of
// an MPI job's start. In each round every one of N processes opens a fresh
// RDM endpoint, publishes its name in DIR, and sends one tagged message to
// every other process at once, so that every pair connects from both sides
// at the same moment: ofi_rxm's simultaneous-connect rule (the higher
// address rejects the peer's request with EALREADY, the lower one withdraws
// its own and accepts; prov/rxm/src/rxm_conn.c) through uroce's CM (duplicate
// REQs answered with MRA while the peer's program has not answered, REJ, REP,
// RTU). Each process then waits for its N-1 messages and N-1 send
// completions and checks every message's sender and round.
//
// A round that does not finish within ROUND_LIMIT seconds is a hang, not a
// slow run: the process names what it still waits for and exits non-zero.
// Round times are printed (median and worst) for the record; nothing here
// judges speed.
//
//   fi_first_contact DIR RANK N ROUNDS ROUND_LIMIT
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kMaxRanks = 16, kMaxName = 256 };

static int rank;

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void Die(int code, const char *what, long rc) {
  fprintf(stderr, "fi_first_contact rank %d: %s: %s\n", rank, what, rc < 0 ? fi_strerror((int)-rc) : "failed");
  exit(code);
}

#define CHECK(call)                  \
  do {                               \
    long rc_ = (long)(call);         \
    if (rc_ < 0) Die(2, #call, rc_); \
  } while (0)

// DIR/WHAT.ROUND.RANK, written whole (a rename) so that readers never see
// half of it.
static void Publish(const char *dir, const char *what, int round, const void *data, size_t length) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.%d", dir, what, round, rank);
  snprintf(path, sizeof path, "%s/%s.%d.%d", dir, what, round, rank);
  FILE *f = fopen(tmp, "w");
  if (f == NULL || fwrite(data, 1, length, f) != length || fclose(f) != 0 || rename(tmp, path) != 0) {
    perror("fi_first_contact: publish");
    exit(2);
  }
}

// Reads DIR/WHAT.ROUND.WHO once it exists; 0 if it does not yet.
static size_t TryFetch(const char *dir, const char *what, int round, int who, void *data, size_t capacity) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d.%d", dir, what, round, who);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  const size_t n = fread(data, 1, capacity, f);
  fclose(f);
  return n;
}

static int CompareDoubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: fi_first_contact DIR RANK N ROUNDS ROUND_LIMIT\n");
    return 2;
  }
  const char *dir = argv[1];
  rank = atoi(argv[2]);
  const int n = atoi(argv[3]);
  const int rounds = atoi(argv[4]);
  const double limit = atof(argv[5]);
  if (n < 2 || n > kMaxRanks || rank < 0 || rank >= n || rounds < 1 || rounds > 1000 || limit <= 0) {
    fprintf(stderr, "fi_first_contact: bad arguments\n");
    return 2;
  }
  struct fi_info *hints = fi_allocinfo();
  if (hints == NULL) Die(2, "fi_allocinfo", -FI_ENOMEM);
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup("uroce;ofi_rxm");
  struct fi_info *info = NULL;
  CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
  double took[1000];
  for (int round = 0; round < rounds; ++round) {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 256};
    CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_MAP};
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));
    CHECK(fi_endpoint(domain, info, &ep, NULL));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_enable(ep));
    char name[kMaxName];
    size_t length = sizeof name;
    CHECK(fi_getname(&ep->fid, name, &length));
    Publish(dir, "name", round, name, length);
    const double start = Now();
    const double deadline = start + limit;

    // Every name of this round, in rank order.
    fi_addr_t address[kMaxRanks];
    for (int i = 0; i < n; ++i) {
      char peer[kMaxName];
      size_t got;
      while ((got = TryFetch(dir, "name", round, i, peer, sizeof peer)) == 0) {
        if (Now() > deadline) {
          fprintf(stderr,
                  "fi_first_contact rank %d round %d: no endpoint name from "
                  "rank %d\n",
                  rank, round, i);
          return 3;
        }
        usleep(1000);
      }
      if (got != length || fi_av_insert(av, peer, 1, &address[i], 0, NULL) != 1) Die(2, "fi_av_insert", 0);
    }

    // The tag names the round and the sender, so that each receive takes
    // only its own sender's message (no FI_DIRECTED_RECV needed).
    uint64_t in[kMaxRanks], out[kMaxRanks];
    struct fi_context context[2 * kMaxRanks];
    int done_at[2 * kMaxRanks];
    int posted = 0;
    for (int i = 0; i < n; ++i) {
      if (i == rank) continue;
      in[i] = 0;
      done_at[posted] = -1;
      CHECK(fi_trecv(ep, &in[i], sizeof in[i], NULL, address[i], ((uint64_t)round << 16) | (uint64_t)i, 0,
                     &context[posted]));
      ++posted;
    }
    for (int i = 0; i < n; ++i) {
      if (i == rank) continue;
      out[i] = ((uint64_t)rank << 32) | (uint64_t)round;
      done_at[posted] = -1;
      for (;;) {
        const ssize_t rc = fi_tsend(ep, &out[i], sizeof out[i], NULL, address[i],
                                    ((uint64_t)round << 16) | (uint64_t)rank, &context[posted]);
        if (rc == 0) break;
        if (rc != -FI_EAGAIN) Die(4, "fi_tsend", rc);
        struct fi_cq_tagged_entry entry;
        (void)fi_cq_read(cq, &entry, 0);  // progress: the connection forms
        if (Now() > deadline) {
          fprintf(stderr,
                  "fi_first_contact rank %d round %d: the send to rank %d "
                  "still waits for its connection\n",
                  rank, round, i);
          return 4;
        }
      }
      ++posted;
    }
    int completed = 0;
    while (completed < posted) {
      struct fi_cq_tagged_entry entries[8];
      const ssize_t got = fi_cq_read(cq, entries, 8);
      if (got > 0) {
        for (ssize_t k = 0; k < got; ++k) {
          const long which = (struct fi_context *)entries[k].op_context - context;
          if (which >= 0 && which < posted) done_at[which] = 1;
        }
        completed += (int)got;
      } else if (got == -FI_EAVAIL) {
        struct fi_cq_err_entry error;
        memset(&error, 0, sizeof error);
        (void)fi_cq_readerr(cq, &error, 0);
        fprintf(stderr, "fi_first_contact rank %d round %d: completion error: %s\n", rank, round,
                fi_strerror(error.err));
        return 5;
      } else if (got != -FI_EAGAIN) {
        Die(5, "fi_cq_read", got);
      }
      if (Now() > deadline) {
        fprintf(stderr,
                "fi_first_contact rank %d round %d: %d of %d completions after "
                "%.0f s; waiting for:",
                rank, round, completed, posted, limit);
        int k = 0;
        for (int i = 0; i < n; ++i) {
          if (i != rank && done_at[k++] < 0) fprintf(stderr, " the message from rank %d", i);
        }
        for (int i = 0; i < n; ++i) {
          if (i != rank && done_at[k++] < 0) fprintf(stderr, " the send to rank %d", i);
        }
        fprintf(stderr, "\n");
        return 6;
      }
    }
    for (int i = 0; i < n; ++i) {
      if (i != rank && in[i] != (((uint64_t)i << 32) | (uint64_t)round)) {
        fprintf(stderr, "fi_first_contact rank %d round %d: a wrong message from rank %d\n", rank, round, i);
        return 7;
      }
    }
    took[round] = Now() - start;

    // Nobody closes before everyone has everything: a peer may still wait
    // for the acknowledgement of its send to us. Progress meanwhile.
    Publish(dir, "done", round, "x", 1);
    for (int i = 0; i < n; ++i) {
      char x;
      while (TryFetch(dir, "done", round, i, &x, 1) == 0) {
        struct fi_cq_tagged_entry entry;
        (void)fi_cq_read(cq, &entry, 0);
        if (Now() > start + 2 * limit) {
          fprintf(stderr,
                  "fi_first_contact rank %d round %d: rank %d never finished "
                  "the round\n",
                  rank, round, i);
          return 8;
        }
        usleep(500);
      }
    }
    CHECK(fi_close(&ep->fid));
    CHECK(fi_close(&av->fid));
    CHECK(fi_close(&cq->fid));
    CHECK(fi_close(&domain->fid));
    CHECK(fi_close(&fabric->fid));
  }
  qsort(took, (size_t)rounds, sizeof took[0], CompareDoubles);
  printf(
      "fi_first_contact rank %d: %d rounds of %d-way first contact, every "
      "message checked; round time median %.3f s, "
      "worst %.3f s\n",
      rank, rounds, n, took[rounds / 2], took[rounds - 1]);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return 0;
}
