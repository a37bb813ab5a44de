// MPI ping-pong between rank 0 and rank 1 with MPI_Send/MPI_Recv, message
// sizes 64 B to 1 MiB, every byte of every message checked on both sides.
// Run under mpirun with two ranks; with `--mca pml cm --mca mtl ofi` the
// messages go through Open MPI's OFI MTL, i.e. libfabric's tagged interface
// (tests/fi_mpi_test.sh runs it over uroce;ofi_rxm).
//
// Output: one line per size ("size <bytes>: <n> round trips verified, <us>
// us per round trip") and a final "mpi_pingpong: PASS ..." from rank 0.
// Exit status 0 only if every round trip of every size was verified on both
// ranks; a mismatch names the size, round, offset and both bytes.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMinSize = 64, kMaxSize = 1 << 20, kTag = 7 };

// The byte at `offset` of the message of round `round` at size `size`, sent
// by `rank`. Depends on all four so that a stale, shifted, truncated or
// misdirected message cannot pass as the expected one.
static uint8_t PatternByte(int rank, size_t size, int round, size_t offset) {
  uint32_t x = (uint32_t)(offset * 2654435761u) ^ (uint32_t)(size * 40503u) ^
               (uint32_t)(round * 977u) ^ (uint32_t)(rank * 0x9e3779b9u);
  return (uint8_t)(x ^ (x >> 13) ^ (x >> 24));
}

static void Fill(uint8_t *buf, int rank, size_t size, int round) {
  for (size_t i = 0; i < size; ++i) buf[i] = PatternByte(rank, size, round, i);
}

// Returns 0 if `buf` holds what `sender` sent, else prints the first wrong
// byte and returns 1.
static int Check(const uint8_t *buf, int me, int sender, size_t size, int round) {
  for (size_t i = 0; i < size; ++i) {
    uint8_t want = PatternByte(sender, size, round, i);
    if (buf[i] != want) {
      fprintf(stderr,
              "mpi_pingpong: rank %d: size %zu round %d: byte %zu is 0x%02x, "
              "expected 0x%02x\n",
              me, size, round, i, buf[i], want);
      return 1;
    }
  }
  return 0;
}

// Receives one message from `peer` and checks its length.
static int Receive(uint8_t *buf, size_t size, int peer, int me, int round) {
  MPI_Status status;
  int count = -1;
  if (MPI_Recv(buf, (int)size, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, &status) != MPI_SUCCESS) {
    fprintf(stderr, "mpi_pingpong: rank %d: MPI_Recv failed\n", me);
    return 1;
  }
  MPI_Get_count(&status, MPI_BYTE, &count);
  if (count != (int)size || status.MPI_SOURCE != peer || status.MPI_TAG != kTag) {
    fprintf(stderr,
            "mpi_pingpong: rank %d: size %zu round %d: got %d bytes from rank %d "
            "tag %d\n",
            me, size, round, count, status.MPI_SOURCE, status.MPI_TAG);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = -1, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, got %d\n", world);
    MPI_Finalize();
    return 2;
  }
  int peer = 1 - rank;
  uint8_t *out = malloc(kMaxSize);
  uint8_t *in = malloc(kMaxSize);
  if (!out || !in) {
    fprintf(stderr, "mpi_pingpong: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  int failures = 0, sizes = 0;
  for (size_t size = kMinSize; size <= kMaxSize && !failures; size *= 4) {
    int rounds = size >= 65536 ? 20 : 100;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int round = 0; round < rounds && !failures; ++round) {
      if (rank == 0) {
        Fill(out, rank, size, round);
        MPI_Send(out, (int)size, MPI_BYTE, peer, kTag, MPI_COMM_WORLD);
        memset(in, 0, size);
        failures += Receive(in, size, peer, rank, round);
        if (!failures) failures += Check(in, rank, peer, size, round);
      } else {
        memset(in, 0, size);
        failures += Receive(in, size, peer, rank, round);
        if (!failures) failures += Check(in, rank, peer, size, round);
        // The reply is the responder's own pattern, not an echo: a transport
        // that hands back the sender's buffer cannot pass.
        Fill(out, rank, size, round);
        MPI_Send(out, (int)size, MPI_BYTE, peer, kTag, MPI_COMM_WORLD);
      }
    }
    double elapsed = MPI_Wtime() - start;
    if (failures) break;
    ++sizes;
    if (rank == 0)
      printf("size %zu: %d round trips verified, %.2f us per round trip\n", size, rounds,
             elapsed * 1e6 / rounds);
  }

  // Both ranks must agree that everything was verified.
  int total_failures = 0;
  if (failures) {
    // The peer may be blocked in a receive that will never complete.
    fprintf(stderr, "mpi_pingpong: rank %d: FAIL\n", rank);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Allreduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total_failures == 0)
    printf("mpi_pingpong: PASS: %d sizes from %d B to %d B, every byte verified on both ranks\n",
           sizes, kMinSize, kMaxSize);
  fflush(stdout);
  free(out);
  free(in);
  MPI_Finalize();
  return total_failures == 0 ? 0 : 1;
}
