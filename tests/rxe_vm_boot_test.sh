#!/usr/bin/env bash
# Smoke test (a) of the rxe guest harness: Debian's kernel boots under qemu,
# rxe0 exists on eth0 and its GID table holds RoCE v2 GIDs for the guest's IPv4
# and IPv6 addresses (which the harness sets from its command line: non-default
# ones here, so the options are seen to reach the guest). Uses the one-shot
# `run` interface. Then every rdma-core and perftest program the interop tests
# will use runs, server and client, against rxe0 itself in the guest
# (rxe_vm_guest_loopback.sh). Arguments: rxe_vm.py, rxe_vm_guest_loopback.sh.
set -uo pipefail
harness=$1 loopback=$2
source "$(dirname "$0")/rxe_vm_lib.sh"

# The capture and console log of the run go with the test's outputs on failure.
trap '[[ $? -ne 0 ]] && cp "$tmp"/run/* "$artifacts"/ 2>/dev/null' EXIT
out=$(rxe_vm run --guest-ip 10.77.1.2/24 --guest-ip6 fd77:1::2/64 \
        --host-ip 10.77.1.1/24 --host-ip6 fd77:1::1/64 \
        --artifacts "$tmp/run" --save always --label boot --timeout 60 \
        -- "ibv_devinfo -v -d rxe0; rdma link show
            set -- 10.77.1.2 fd77:1::2
            $(cat "$loopback")")
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "the harness or the guest command failed (status $status)"

grep -Eq '^hca_id:[[:space:]]+rxe0$' <<<"$out" || fail "no rxe0 in ibv_devinfo"
grep -Eq 'state:[[:space:]]+PORT_ACTIVE' <<<"$out" || fail "rxe0's port is not active"
grep -Eq 'link_layer:[[:space:]]+Ethernet' <<<"$out" || fail "rxe0 is not on Ethernet"
grep -Eq '^link rxe0/1 state ACTIVE .*netdev eth0' <<<"$out" ||
  fail "rdma link show does not show rxe0 on eth0"
v4=$(gid_index "$out" "::ffff:10.77.1.2")
v6=$(gid_index "$out" "fd77:1::2")
[[ -n $v4 ]] || fail "no RoCE v2 GID ::ffff:10.77.1.2 for the guest's IPv4 address"
[[ -n $v6 ]] || fail "no RoCE v2 GID fd77:1::2 for the guest's IPv6 address"
for name in rc_pingpong_ipv4 ud_pingpong_ipv6 srq_pingpong rping ib_send_bw ib_write_bw \
  ib_read_bw ib_atomic_bw ib_send_lat; do
  grep -q "^LOOPBACK $name 0\$" <<<"$out" || fail "$name in loopback on rxe0 failed"
done
echo "PASS: rxe0 up; RoCE v2 GIDs: IPv4 at index $v4, IPv6 at index $v6; programs work in loopback"
