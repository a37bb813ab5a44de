#!/usr/bin/env bash
# Debian's unmodified verbs programs over uroce between two network
# namespaces joined by a veth pair: each process's uroce device sits on its
# veth end through net_af_packet (configs/veth-a.ini and veth-b.ini, with this
# test's own names), finds its peer's MAC with ARP, and runs RC (with -c, every
# byte checked), UD and SRQ ping-pongs and perftest's send/write/read/atomic. The programs' TCP side channel runs over the
# kernel's own addresses on the same veth (10.79.0.x), uroce uses 10.78.0.x.
#
# Needs root (CI runs as root); where namespaces cannot be made the test FAILS
# and says why. Namespaces go on every exit path; every process runs under
# `timeout`. No assertion on speed.
set -uo pipefail
source "$(dirname "$0")/pair_lib.sh"
uroce=$1
veth=$2
cfg_a=$3
cfg_b=$4
id=$$
ns_a=uroce-v$id-a
ns_b=uroce-v$id-b
if_a=uv$id-a
if_b=uv$id-b
dir=$(mktemp -d /tmp/uroce-verbs-veth.XXXXXX)
cleanup() {
  "$veth" down "$ns_a" "$ns_b" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

veth_namespaces_up verbs_veth_test "$veth" "$ns_a" "$ns_b" "$if_a" "$if_b"

# This test's copies of the ready configs: its interfaces and prefixes.
sed -e "s|iface=[^ ,]*|iface=$if_a|" -e "s|^file_prefix = .*|file_prefix = uroce-vv$id-a|" "$cfg_a" > "$dir/a.ini"
sed -e "s|iface=[^ ,]*|iface=$if_b|" -e "s|^file_prefix = .*|file_prefix = uroce-vv$id-b|" "$cfg_b" > "$dir/b.ini"

fails=0
run() {  # name expect program args...  (expect: a line both sides print)
  local name=$1 expect=$2 prog=$3
  shift 3
  local port=$((20000 + RANDOM % 20000))
  timeout -k 5 90 ip netns exec "$ns_a" "$uroce" exec --config "$dir/a.ini" -- "$prog" -p "$port" "$@" \
    > "$dir/$name.server" 2>&1 &
  local spid=$!
  for _ in $(seq 1 300); do
    ip netns exec "$ns_a" ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  timeout -k 5 90 ip netns exec "$ns_b" "$uroce" exec --config "$dir/b.ini" -- "$prog" -p "$port" "$@" 10.79.0.1 \
    > "$dir/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -q "$expect" "$dir/$name.client" ||
     ! grep -q "$expect" "$dir/$name.server"; then
    echo "FAIL: $name: server rc=$src client rc=$crc"
    echo "--- server:"; cat "$dir/$name.server"; echo "--- client:"; cat "$dir/$name.client"
    fails=$((fails + 1))
    return
  fi
  # perftest: the client's result row (message size, iterations, figures).
  if [[ $expect == "remote address:" ]] && ! grep -qE '^ +[0-9]+ +[0-9]+ ' "$dir/$name.client"; then
    echo "FAIL: $name: no result line in the client's output"; cat "$dir/$name.client"
    fails=$((fails + 1))
    return
  fi
  echo "ok: $name: $(grep "$expect" "$dir/$name.client" | tail -1)"
}

run rc_4096 "iters in" ibv_rc_pingpong -g 0 -c -s 4096 -n 100
run rc_100000 "iters in" ibv_rc_pingpong -g 0 -c -s 100000 -n 20
run ud_512 "iters in" ibv_ud_pingpong -g 0 -c -s 512 -n 100
run srq "iters in" ibv_srq_pingpong -g 0 -c -s 2048 -n 100
run send_lat "remote address:" ib_send_lat -x 0 -n 200
run write_bw "remote address:" ib_write_bw -x 0 -n 200 -s 65536
run read_lat "remote address:" ib_read_lat -x 0 -n 200
run atomic_lat "remote address:" ib_atomic_lat -x 0 -n 200

[[ $fails -eq 0 ]] && echo PASS || { echo "$fails failure(s)"; exit 1; }
