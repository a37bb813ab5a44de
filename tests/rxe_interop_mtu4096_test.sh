#!/usr/bin/env bash
# uroce against kernel rxe in a qemu guest (see rxe_interop_test.sh) at path
# MTU 4096: the guest's eth0 and the tap at MTU 9000, uroce's port at 9000,
# -m 4096 to the programs. RC ping-pong with -c at 64 KiB (16 packets a
# message), perftest RDMA WRITE and READ, and rping (rdma_cm) at 8000 B,
# both directions.
set -uo pipefail
harness=$1 uroce=$2
source "$(dirname "$0")/rxe_vm_lib.sh"
source "$(dirname "$0")/rxe_interop_lib.sh"

interop_start interop_mtu4096 9000
both_ways rc64k_mtu4096 "iters in" ibv_rc_pingpong "-c -m 4096 -s 65536 -n 10" 4
both_ways write_bw_mtu4096 "^ +65536 +20 " ib_write_bw "-m 4096 -n 20 -s 65536" 6
both_ways read_bw_mtu4096 "^ +65536 +20 " ib_read_bw "-m 4096 -n 20 -s 65536 -o 16" 4
# rdma_cm on both sides: the REQ's path MTU is 4096 (each side's port MTU
# allows it), so 8000-byte messages take two full packets.
rping_both_ways rping8k_mtu4096 "-C 10 -S 8000 -V -v" 6
# The frames on the wire are path MTU 4096 ones: 4096-byte payloads from
# each side, over IPv4 and IPv6 (`uroce dump` lines: "N  SRC:PORT > DST:4791
# ... len 4096 ...").
full_frames_from_both() {
  local src
  for src in 10.77.0.10 10.77.0.2 fd77::10 fd77::2; do
    grep -qE "^ *[0-9]+ +$src:[0-9]+ > .* len 4096 " "$1" ||
      { echo "FAIL: the capture has no frame with a 4096-byte payload from $src" >&2; return 1; }
  done
  echo "capture: 4096-byte payloads from both sides over IPv4 and IPv6"
}
capture_check=full_frames_from_both
interop_pass "uroce and kernel rxe interoperate at path MTU 4096, both directions"
