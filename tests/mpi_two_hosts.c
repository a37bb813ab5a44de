// Four MPI ranks on two hosts, two on each (tests/daemon_mpi_test.sh runs it
// with every rank attached to its host's `uroce daemon`, over Open MPI's OFI
// MTL on "uroce;ofi_rxm"):
//   1. the layout: exactly two hosts (MPI_Get_processor_name) with two ranks
//      each, or the program fails (a rank started on the wrong host, or two
//      "hosts" that Open MPI took for one, would test nothing);
//   2. ping-pong on one host: each host's two ranks, both pairs at once
//      (through the host's daemon, host address to itself);
//   3. ping-pong across the hosts: the first rank of one host with the first
//      of the other, the second with the second, both pairs at once;
//      MPI_Send/MPI_Recv, 64 B to 1 MiB, every byte of every message checked
//      on both sides, the reply the responder's own pattern (not an echo);
//   4. MPI_Allreduce(MPI_SUM) of one int64 per rank (rank + 1: the sum must
//      be 10) and of a vector of kVector int64 whose every element depends on
//      the rank and the index, checked element by element on every rank.
//
// Output, all from ranks that verified what they print:
//   "layout: rank R on HOST" (every rank)
//   "PHASE ranks A-B (HOSTA, HOSTB): size S: N round trips verified, U us per
//    round trip" (the lower rank of each pair)
//   "rank R: allreduce verified: sum 10, N elements" (every rank)
//   "mpi_two_hosts: PASS ..." (rank 0, once every rank reported no failure)
// A failure prints what was wrong ("mpi_two_hosts: rank R: ...") and the rank
// exits non-zero (MPI_Abort where a peer would otherwise wait forever).
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRanks = 4, kMinSize = 64, kMaxSize = 1 << 20, kVector = 1 << 18 };

static int me = -1;

static void Die(const char* what) {
  fprintf(stderr, "mpi_two_hosts: rank %d: FAIL: %s\n", me, what);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// The byte at `offset` of the message of round `round`, size `size`, phase
// `phase`, sent by `rank`: a stale, shifted, truncated or misdirected
// message cannot pass as the expected one.
static uint8_t PatternByte(int phase, int rank, size_t size, int round, size_t offset) {
  uint32_t x = (uint32_t)(offset * 2654435761u) ^ (uint32_t)(size * 40503u) ^ (uint32_t)(round * 977u) ^
               (uint32_t)(rank * 0x9e3779b9u) ^ (uint32_t)(phase * 0x85ebca6bu);
  return (uint8_t)(x ^ (x >> 13) ^ (x >> 24));
}

static void Fill(uint8_t* buf, int phase, int rank, size_t size, int round) {
  for (size_t i = 0; i < size; ++i) buf[i] = PatternByte(phase, rank, size, round, i);
}

// Receives one message of `size` bytes from `peer` and checks its length,
// source and every byte; returns 0 if all is right.
static int ReceiveChecked(uint8_t* buf, int phase, size_t size, int peer, int round) {
  MPI_Status status;
  int count = -1;
  memset(buf, 0, size);
  if (MPI_Recv(buf, (int)size, MPI_BYTE, peer, phase, MPI_COMM_WORLD, &status) != MPI_SUCCESS) {
    fprintf(stderr, "mpi_two_hosts: rank %d: MPI_Recv from %d failed\n", me, peer);
    return 1;
  }
  MPI_Get_count(&status, MPI_BYTE, &count);
  if (count != (int)size || status.MPI_SOURCE != peer) {
    fprintf(stderr, "mpi_two_hosts: rank %d: phase %d size %zu round %d: got %d bytes from rank %d\n", me, phase,
            size, round, count, status.MPI_SOURCE);
    return 1;
  }
  for (size_t i = 0; i < size; ++i) {
    uint8_t want = PatternByte(phase, peer, size, round, i);
    if (buf[i] != want) {
      fprintf(stderr,
              "mpi_two_hosts: rank %d: phase %d size %zu round %d from rank %d: byte %zu is 0x%02x, expected "
              "0x%02x\n",
              me, phase, size, round, peer, i, buf[i], want);
      return 1;
    }
  }
  return 0;
}

// One ping-pong between `me` and `peer` at every size; the lower rank
// starts each round and prints the results. Returns the number of failures.
static int PingPong(const char* name, int phase, int peer, const char* my_host, const char* peer_host,
                    uint8_t* out, uint8_t* in) {
  int failures = 0;
  for (size_t size = kMinSize; size <= kMaxSize && !failures; size *= 4) {
    int rounds = size >= 65536 ? 10 : 50;
    double start = MPI_Wtime();
    for (int round = 0; round < rounds && !failures; ++round) {
      if (me < peer) {
        Fill(out, phase, me, size, round);
        MPI_Send(out, (int)size, MPI_BYTE, peer, phase, MPI_COMM_WORLD);
        failures += ReceiveChecked(in, phase, size, peer, round);
      } else {
        failures += ReceiveChecked(in, phase, size, peer, round);
        if (!failures) {
          Fill(out, phase, me, size, round);
          MPI_Send(out, (int)size, MPI_BYTE, peer, phase, MPI_COMM_WORLD);
        }
      }
    }
    double elapsed = MPI_Wtime() - start;
    if (!failures && me < peer) {
      printf("%s ranks %d-%d (%s, %s): size %zu: %d round trips verified, %.1f us per round trip\n", name, me, peer,
             my_host, peer_host, size, rounds, elapsed * 1e6 / rounds);
      fflush(stdout);
    }
  }
  return failures;
}

// The vector element `i` contributed by `rank`.
static int64_t Element(int rank, size_t i) { return (int64_t)(rank + 1) * 1000003 + (int64_t)i * (rank * 7 + 1); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != kRanks) {
    fprintf(stderr, "mpi_two_hosts: rank %d: needs exactly %d ranks, got %d\n", me, kRanks, world);
    MPI_Finalize();
    return 2;
  }

  // 1. The layout: who is on which host.
  char hosts[kRanks][MPI_MAX_PROCESSOR_NAME];
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  memset(host, 0, sizeof(host));
  MPI_Get_processor_name(host, &len);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  if (strcmp(hosts[me], host) != 0) Die("MPI_Allgather returned another host name for this rank");
  printf("layout: rank %d on %s\n", me, host);
  fflush(stdout);
  // a[0], a[1]: the ranks on rank 0's host; b[0], b[1]: the others.
  int a[kRanks], b[kRanks], na = 0, nb = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (strcmp(hosts[r], hosts[0]) == 0) {
      a[na++] = r;
    } else {
      b[nb++] = r;
    }
  }
  if (na != 2 || nb != 2 || strcmp(hosts[b[0]], hosts[b[1]]) != 0) {
    if (me == 0) {
      for (int r = 0; r < kRanks; ++r) fprintf(stderr, "mpi_two_hosts: rank %d is on %s\n", r, hosts[r]);
    }
    Die("the ranks are not two on each of two hosts");
  }

  uint8_t* out = malloc(kMaxSize);
  uint8_t* in = malloc(kMaxSize);
  int64_t* send = malloc(kVector * sizeof(int64_t));
  int64_t* sum = malloc(kVector * sizeof(int64_t));
  if (!out || !in || !send || !sum) Die("out of memory");

  // 2. On one host: a[0]-a[1] and b[0]-b[1] at once.
  int same_peer = me == a[0] ? a[1] : me == a[1] ? a[0] : me == b[0] ? b[1] : b[0];
  MPI_Barrier(MPI_COMM_WORLD);
  if (PingPong("same-host", 1, same_peer, host, hosts[same_peer], out, in)) Die("same-host ping-pong");
  // 3. Across the hosts: a[0]-b[0] and a[1]-b[1] at once.
  int cross_peer = me == a[0] ? b[0] : me == b[0] ? a[0] : me == a[1] ? b[1] : a[1];
  if (strcmp(hosts[cross_peer], host) == 0) Die("the cross-host peer is on this host");
  MPI_Barrier(MPI_COMM_WORLD);
  if (PingPong("cross-host", 2, cross_peer, host, hosts[cross_peer], out, in)) Die("cross-host ping-pong");

  // 4. MPI_Allreduce: one value per rank, then a vector.
  int failures = 0;
  int64_t mine = me + 1, total = -1;
  MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int64_t want_total = kRanks * (kRanks + 1) / 2;
  if (total != want_total) {
    fprintf(stderr, "mpi_two_hosts: rank %d: MPI_Allreduce of rank+1 gave %lld, expected %lld\n", me,
            (long long)total, (long long)want_total);
    ++failures;
  }
  for (size_t i = 0; i < kVector; ++i) {
    send[i] = Element(me, i);
    sum[i] = -1;
  }
  MPI_Allreduce(send, sum, kVector, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < kVector; ++i) {
    int64_t want = 0;
    for (int r = 0; r < kRanks; ++r) want += Element(r, i);
    if (sum[i] != want) {
      fprintf(stderr, "mpi_two_hosts: rank %d: MPI_Allreduce vector element %zu is %lld, expected %lld\n", me, i,
              (long long)sum[i], (long long)want);
      ++failures;
      break;
    }
  }
  if (!failures) {
    printf("rank %d: allreduce verified: sum %lld, %d elements\n", me, (long long)total, kVector);
    fflush(stdout);
  }

  // Every rank's verdict; each rank also exits by its own.
  int all_failures = -1;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0 && failures == 0 && all_failures == 0) {
    printf("mpi_two_hosts: PASS: %d ranks on 2 hosts, ping-pong on one host and across, %d B to %d B, "
           "MPI_Allreduce checked on every rank\n",
           kRanks, kMinSize, kMaxSize);
    fflush(stdout);
  }
  free(out);
  free(in);
  free(send);
  free(sum);
  MPI_Finalize();
  return failures == 0 && all_failures == 0 ? 0 : 1;
}
