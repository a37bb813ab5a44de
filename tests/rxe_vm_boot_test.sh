#!/usr/bin/env bash
# Smoke test (a) of the rxe guest harness: Debian's kernel boots under qemu,
# rxe0 exists on eth0 and its GID table holds RoCE v2 GIDs for the guest's IPv4
# and IPv6 addresses (which the harness sets from its command line: non-default
# ones here, so the options are seen to reach the guest). Then every rdma-core
# and perftest program the interop tests will use runs, server and client,
# against rxe0 itself in the guest (rxe_vm_guest_loopback.sh), one guest
# command per program, each with the time limit its own work needs.
# Arguments: rxe_vm.py, rxe_vm_guest_loopback.sh.
#
# Time limits follow from the work (the sum is checked against Bazel's
# TEST_TIMEOUT below, and is qemu's --lifetime):
#   boot          boot_limit (ready in 4-6 s here; more on a loaded machine)
#   ibv_devinfo   devinfo_limit
#   each pair     pair_limit: one attempt = ready_limit + program_limit + 2 s
#                 (see rxe_vm_guest_loopback.sh), two for perftest (its retry)
#                 plus slack_limit for the shell around it
#   each exec     + 30 s: the harness waits that much beyond the guest's limit
#   stop          50 s at most (power-off, then the supervisor's kill)
# A first run on a machine also fetches the kernel package (README).
set -uo pipefail
harness=$1 loopback=$2
source "$(dirname "$0")/rxe_vm_lib.sh"

boot_limit=90
devinfo_limit=30
program_limit=30
ready_limit=10
slack_limit=5
exec_margin=30
stop_limit=50
pairs=(rc_pingpong_ipv4 ud_pingpong_ipv6 srq_pingpong rping ib_send_bw ib_write_bw
  ib_read_bw ib_atomic_bw ib_send_lat)

pair_limit() {  # name
  local attempts=1
  [[ $1 == ib_* ]] && attempts=2
  echo $((attempts * (ready_limit + program_limit + 2) + slack_limit))
}

bound=$((boot_limit + devinfo_limit + exec_margin + stop_limit))
for name in "${pairs[@]}"; do
  bound=$((bound + $(pair_limit "$name") + exec_margin))
done
echo "time bound of this test: $bound s (Bazel's: ${TEST_TIMEOUT:-none} s)"
if [[ -n ${TEST_TIMEOUT:-} && $bound -gt $TEST_TIMEOUT ]]; then
  fail "the time limits add up to $bound s, more than Bazel's $TEST_TIMEOUT s: raise the target's timeout in tests/BUILD"
fi

state=$tmp/vm
ok=0
cleanup() {
  # Always power off and remove the namespace; keep the artifacts on failure.
  if [[ $ok -eq 1 ]]; then
    rxe_vm stop --state "$state"
  else
    rxe_vm stop --state "$state" --save-to "$artifacts" --label boot
  fi
}
trap cleanup EXIT

# --lifetime: should this script die without stopping it, qemu still ends.
env_lines=$(rxe_vm start --state "$state" --guest-ip 10.77.1.2/24 --guest-ip6 fd77:1::2/64 \
  --host-ip 10.77.1.1/24 --host-ip6 fd77:1::1/64 \
  --boot-timeout "$boot_limit" --lifetime "$bound") || fail "the guest did not start (see above)"
eval "$env_lines"

out=$(rxe_vm exec --state "$state" --timeout "$devinfo_limit" -- "ibv_devinfo -v -d rxe0; rdma link show")
status=$?
echo "$out"
[[ $status -eq 0 ]] || fail "ibv_devinfo or rdma link show failed in the guest (status $status)"

grep -Eq '^hca_id:[[:space:]]+rxe0$' <<<"$out" || fail "no rxe0 in ibv_devinfo"
grep -Eq 'state:[[:space:]]+PORT_ACTIVE' <<<"$out" || fail "rxe0's port is not active"
grep -Eq 'link_layer:[[:space:]]+Ethernet' <<<"$out" || fail "rxe0 is not on Ethernet"
grep -Eq '^link rxe0/1 state ACTIVE .*netdev eth0' <<<"$out" ||
  fail "rdma link show does not show rxe0 on eth0"
v4=$(gid_index "$out" "::ffff:10.77.1.2")
v6=$(gid_index "$out" "fd77:1::2")
[[ -n $v4 ]] || fail "no RoCE v2 GID ::ffff:10.77.1.2 for the guest's IPv4 address"
[[ -n $v6 ]] || fail "no RoCE v2 GID fd77:1::2 for the guest's IPv6 address"

# One guest command per program pair; every pair runs, then each must have
# printed "LOOPBACK <name> 0".
all=
for name in "${pairs[@]}"; do
  limit=$(pair_limit "$name")
  begin=$SECONDS
  out=$(rxe_vm exec --state "$state" --timeout "$limit" -- \
    "set -- $name $v4 $v6 10.77.1.2 $program_limit $ready_limit
     $(cat "$loopback")")
  status=$?
  echo "$out"
  echo "--- $name: status $status in $((SECONDS - begin)) s (limit $limit s)"
  all+=$out$'\n'
done
for name in "${pairs[@]}"; do
  grep -q "^LOOPBACK $name 0\$" <<<"$all" || fail "$name in loopback on rxe0 failed"
done
ok=1
echo "PASS: rxe0 up; RoCE v2 GIDs: IPv4 at index $v4, IPv6 at index $v6; programs work in loopback"
