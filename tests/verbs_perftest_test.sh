#!/bin/bash
# perftest's programs from Debian's perftest package, unmodified, between two
# processes over net_memif (configs/pair-a.ini, pair-b.ini):
# SEND latency, RDMA WRITE latency (each side spins on its own buffer for the
# peer's WRITE, polling no CQ for it: the library's progress thread places it,
# runtime/progress_pacer.h), RDMA WRITE bandwidth, RDMA READ latency and
# atomic latency (fetch-and-add and compare-and-swap). Both sides must exit 0 and the client
# must print its result line. Figures are not checked (no test asserts speed).
source "$(dirname "$0")/verbs_common.sh"

# perftest's result rows start with the message size and the iteration count.
has_result() {
  grep -qE '^ +[0-9]+ +[0-9]+ ' "$TMP/$1.client" || fail "$1: no result line in the client's output"
}

run_pair send_lat 90 ib_send_lat "-x 0 -n 200" "-x 0 -n 200" "remote address:" && has_result send_lat
run_pair write_lat 90 ib_write_lat "-x 0 -n 2000" "-x 0 -n 2000" "remote address:" && has_result write_lat
run_pair write_bw 90 ib_write_bw "-x 0 -n 200 -s 65536" "-x 0 -n 200 -s 65536" "remote address:" && has_result write_bw
run_pair read_lat 90 ib_read_lat "-x 0 -n 200" "-x 0 -n 200" "remote address:" && has_result read_lat
run_pair atomic_lat_fa 90 ib_atomic_lat "-x 0 -n 200 -A FETCH_AND_ADD" "-x 0 -n 200 -A FETCH_AND_ADD" "remote address:" &&
  has_result atomic_lat_fa
run_pair atomic_lat_cs 90 ib_atomic_lat "-x 0 -n 200 -A CMP_AND_SWAP" "-x 0 -n 200 -A CMP_AND_SWAP" "remote address:" &&
  has_result atomic_lat_cs

[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
