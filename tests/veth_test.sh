#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, one uroce process in each over
# net_af_packet (configs/veth-a.ini and veth-b.ini with this test's own
# namespace, interface and prefix names): RC traffic of every kind with every
# byte verified, over IPv4 (ARP) and IPv6 (neighbour discovery), and both
# processes shut down with every mbuf back in its pool.
#
# Needs root (CI runs as root). Where namespaces cannot be made, the test
# FAILS and says why: it never passes without having run. The namespaces
# (and the veth with them) are removed on every exit path; every process runs
# under `timeout`. No assertion on speed.
set -euo pipefail
source "$(dirname "$0")/pair_lib.sh"
uroce=$1
veth=$2
id=$$
ns_a=uroce-t$id-a
ns_b=uroce-t$id-b
if_a=ut$id-a  # IFNAMSIZ: 15 characters at most
if_b=ut$id-b
dir=$(mktemp -d /tmp/uroce-veth-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  "$veth" down "$ns_a" "$ns_b" || true
  rm -rf "$dir"
}
trap cleanup EXIT

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: veth_test needs root to make network namespaces (uid $(id -u))"
  exit 1
fi
if ! err=$("$veth" up "$ns_a" "$ns_b" "$if_a" "$if_b" 2>&1); then
  echo "$err"
  echo "FAIL: cannot make network namespaces and a veth pair here (see above); this test needs them"
  exit 1
fi
echo "$err"

flags() {  # side run
  local side=$1 run=$2 role ifc
  if [[ $side == a ]]; then role=server ifc=$if_a; else role=client ifc=$if_b; fi
  echo --port afpacket --role $role --control "$dir/control-$run.sock" \
    --set eal.file_prefix=uroce-veth-test-$id-$run-$side \
    --set "endpoint.$side.port=net_af_packet0,iface=$ifc,qpairs=1"
}

run_pair() {  # run, server extra flags (one string), client flags...
  local run=$1 server_extra=$2
  shift 2
  # shellcheck disable=SC2046,SC2086
  timeout -s KILL 300 ip netns exec "$ns_a" "$uroce" perf $(flags a "$run") $server_extra \
    >"$dir/server-$run.log" 2>&1 &
  local server_pid=$!
  pids+=("$server_pid")
  local client_rc=0 server_rc=0
  # shellcheck disable=SC2046
  timeout -s KILL 300 ip netns exec "$ns_b" "$uroce" perf $(flags b "$run") "$@" \
    >"$dir/client-$run.log" 2>&1 || client_rc=$?
  wait "$server_pid" || server_rc=$?
  perf_pair_verdict "$dir" "client-$run.log" "server-$run.log" "$client_rc" "$server_rc"
}

echo "== 1. IPv4 (ARP), every test, verified"
run_pair v4 "" --test all --size 64,1024,65536 --iters 100 --qps 2 --verify
for t in send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw; do
  grep -qE "^$t " "$dir/client-v4.log" || { echo "FAIL: no result for $t"; exit 1; }
done

echo "== 2. IPv6 (neighbour discovery), verified"
run_pair v6 "--set endpoint.a.ipv4=" --set endpoint.b.ipv4= --test send_lat,write_bw,read_bw --size 64,3000 \
  --iters 100 --verify
grep -q 'server a (fd00:78::1)' "$dir/server-v6.log" || { echo "FAIL: the server did not use its IPv6 GID"; exit 1; }
echo "veth_test: OK"
