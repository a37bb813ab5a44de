#!/usr/bin/env bash
# uroce against kernel rxe in a qemu guest (see rxe_interop_test.sh), with
# perftest's bandwidth programs, unmodified, in both directions, a few
# iterations each (through TCG the link moves a few MB/s: these check that
# the two interoperate, not speed): SEND, RDMA WRITE, RDMA READ, and atomic
# fetch-and-add and compare-and-swap; IPv4 and IPv6 GIDs.
#
# -o 16 on both sides: perftest sets a requester's max_rd_atomic to the
# *peer's* count of outstanding reads, by default the peer device's
# max_qp_rd_atom: rxe's 128 is above uroce's limit (16, as ConnectX
# hardware), so a uroce client would fail to reach RTS ("Failed to modify QP
# to RTS"). perftest assumes equal devices; -o makes them agree.
set -uo pipefail
harness=$1 uroce=$2
source "$(dirname "$0")/rxe_vm_lib.sh"
source "$(dirname "$0")/rxe_interop_lib.sh"

# perftest's result rows start with the message size and the iteration count.
interop_start interop_perftest 1500
both_ways send_bw "^ +65536 +20 " ib_send_bw "-n 20 -s 65536" 4
both_ways write_bw "^ +65536 +20 " ib_write_bw "-n 20 -s 65536" 6
both_ways read_bw "^ +65536 +20 " ib_read_bw "-n 20 -s 65536 -o 16" 4
both_ways atomic_fa "^ +8 +20 " ib_atomic_bw "-n 20 -A FETCH_AND_ADD -o 16" 4
both_ways atomic_cs "^ +8 +20 " ib_atomic_bw "-n 20 -A CMP_AND_SWAP -o 16" 6
interop_pass "uroce and kernel rxe interoperate: perftest SEND, WRITE, READ, atomics, both directions"
