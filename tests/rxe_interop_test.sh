#!/usr/bin/env bash
# uroce against the Linux kernel's Soft-RoCE (rdma_rxe) in a qemu guest
# (tools/rxe_vm), both directions, with rdma-core's and perftest's own
# programs, unmodified: on the host side they run over uroce's
# libibverbs.so.1 (`uroce exec`) on the guest's tap through net_af_packet,
# with uroce's own address (10.77.0.10 / fd77::10) and MAC answering ARP/ND;
# in the guest over rxe0. The programs' TCP side channel uses the host
# kernel's address on the same tap (10.77.0.1) or the guest's (10.77.0.2).
#
# Cases: RC ping-pong with -c (every byte checked) at 64 B, 4 KiB and 64 KiB
# (multi-packet at path MTU 1024), rxe client -> uroce server over IPv4 and
# uroce client -> rxe server over IPv6; UD ping-pong; ib_write_bw.
# On failure the capture and console log are kept (TEST_UNDECLARED_OUTPUTS_DIR).
set -uo pipefail
harness=$1 uroce=$2
source "$(dirname "$0")/rxe_vm_lib.sh"

state=$tmp/vm
ok=0
cleanup() {
  if [[ $ok -eq 1 ]]; then
    rxe_vm stop --state "$state"
  else
    rxe_vm stop --state "$state" --save-to "$artifacts" --label interop
  fi
}
trap cleanup EXIT

env_lines=$(rxe_vm start --state "$state" --lifetime 600) || fail "the guest did not start (see above)"
eval "$env_lines"
in_ns() { ip netns exec "$RXE_VM_NETNS" "$@"; }

cfg=$tmp/uroce.ini
cat >"$cfg" <<INI
[eal]
hugepages = no
log_level = *:warning
file_prefix = uroce-interop-$$
telemetry = no

[engine]
progress = inline

[endpoint.a]
port = net_af_packet0,iface=$RXE_VM_TAP,qpairs=1
ipv4 = 10.77.0.10
ipv6 = fd77::10
mtu = 1500
INI

devinfo=$(rxe_vm exec --state "$state" -- ibv_devinfo -v -d rxe0) || fail "ibv_devinfo failed in the guest"
rxe_v4=$(gid_index "$devinfo" "::ffff:$RXE_VM_GUEST_IP")
rxe_v6=$(gid_index "$devinfo" "$RXE_VM_GUEST_IP6")
[[ -n $rxe_v4 && -n $rxe_v6 ]] || fail "rxe0 has no RoCE v2 GIDs for $RXE_VM_GUEST_IP / $RXE_VM_GUEST_IP6"
# uroce's GID table: index 0 the IPv4 address, 1 the IPv6 one.
uroce_v4=0
uroce_v6=1

port=18700
# uroce serves, the guest's rxe is the client (TCP to the host kernel's address).
uroce_server() {  # name expect program "args for both sides" guest_gid uroce_gid
  local name=$1 expect=$2 prog=$3 args=$4 ggid=$5 ugid=$6 out status
  port=$((port + 1))
  in_ns timeout -k 5 120 "$uroce" exec --config "$cfg" -- $prog $args -p $port $([[ $prog == ib_* ]] && echo "-x $ugid" || echo "-g $ugid") \
    >"$tmp/$name.uroce" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do in_ns ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  out=$(rxe_vm exec --state "$state" -- \
    "timeout 100 $prog -d rxe0 $args -p $port $([[ $prog == ib_* ]] && echo "-x $ggid" || echo "-g $ggid") $RXE_VM_HOST_IP")
  status=$?
  wait "$pid"
  local ustatus=$?
  echo "$out" >"$tmp/$name.rxe"
  if [[ $status -ne 0 || $ustatus -ne 0 ]] || ! grep -qE "$expect" "$tmp/$name.rxe" || ! grep -qE "$expect" "$tmp/$name.uroce"; then
    echo "--- uroce side:"; cat "$tmp/$name.uroce"; echo "--- rxe side:"; cat "$tmp/$name.rxe"
    fail "$name: rxe client status $status, uroce server status $ustatus"
  fi
  echo "ok: $name (rxe client -> uroce server): $(grep -E "$expect" "$tmp/$name.rxe" | tail -1)"
}
# The guest's rxe serves, uroce is the client (TCP to the guest's address).
rxe_server() {  # name expect program args guest_gid uroce_gid
  local name=$1 expect=$2 prog=$3 args=$4 ggid=$5 ugid=$6 out status
  port=$((port + 1))
  rxe_vm spawn --state "$state" --job "$name" --timeout 100 -- "$prog -d rxe0 $args -p $port -g $ggid" ||
    fail "$name: cannot start the server in the guest"
  sleep 2
  in_ns timeout -k 5 120 "$uroce" exec --config "$cfg" -- $prog $args -p $port -g $ugid "$RXE_VM_GUEST_IP" \
    >"$tmp/$name.uroce" 2>&1
  local ustatus=$?
  out=$(rxe_vm wait --state "$state" --job "$name" --timeout 110)
  status=$?
  echo "$out" >"$tmp/$name.rxe"
  if [[ $status -ne 0 || $ustatus -ne 0 ]] || ! grep -qE "$expect" "$tmp/$name.rxe" || ! grep -qE "$expect" "$tmp/$name.uroce"; then
    echo "--- uroce side:"; cat "$tmp/$name.uroce"; echo "--- rxe side:"; cat "$tmp/$name.rxe"
    fail "$name: rxe server status $status, uroce client status $ustatus"
  fi
  echo "ok: $name (uroce client -> rxe server): $(grep -E "$expect" "$tmp/$name.uroce" | tail -1)"
}

uroce_server rc64_v4 "iters in" ibv_rc_pingpong "-c -s 64 -n 20" "$rxe_v4" "$uroce_v4"
uroce_server rc4k_v4 "iters in" ibv_rc_pingpong "-c -s 4096 -n 20" "$rxe_v4" "$uroce_v4"
uroce_server rc64k_v4 "iters in" ibv_rc_pingpong "-c -s 65536 -n 10" "$rxe_v4" "$uroce_v4"
rxe_server rc4k_v6 "iters in" ibv_rc_pingpong "-c -s 4096 -n 20" "$rxe_v6" "$uroce_v6"
rxe_server rc64k_v6 "iters in" ibv_rc_pingpong "-c -s 65536 -n 10" "$rxe_v6" "$uroce_v6"
uroce_server ud_v4 "iters in" ibv_ud_pingpong "-c -s 512 -n 20" "$rxe_v4" "$uroce_v4"
uroce_server write_bw_v4 "^ +65536 +20 " ib_write_bw "-n 20 -s 65536" "$rxe_v4" "$uroce_v4"

ok=1
echo "PASS: uroce and kernel rxe interoperate (RC both directions over IPv4 and IPv6, UD, RDMA WRITE)"
