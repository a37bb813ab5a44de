#!/usr/bin/env bash
# net_tap on a kernel interface: one uroce process makes a tap interface
# with net_tap (the server), a second one attaches to that same kernel
# interface with net_af_packet (the client); the kernel carries the frames
# between them. RC traffic with every byte verified, ARP, clean shutdown on
# both sides. Needs root and /dev/net/tun (the test fails and says so
# without them). Bounded by `timeout`; no assertion on speed.
set -euo pipefail
source "$(dirname "$0")/pair_lib.sh"
uroce=$1
id=$$
tap=utap$id
dir=$(mktemp -d /tmp/uroce-tap-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  ip link del "$tap" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
[[ $(id -u) -eq 0 ]] || { echo "FAIL: tap_test needs root (uid $(id -u))"; exit 1; }
[[ -c /dev/net/tun ]] || { echo "FAIL: no /dev/net/tun here; net_tap needs it"; exit 1; }

common=(--port memif --control "$dir/control.sock" --set eal.log_level=*:error)
timeout -s KILL 300 "$uroce" perf "${common[@]}" --role server --set "endpoint.a.port=net_tap0,iface=$tap" \
  --set endpoint.a.mtu=1500 --set eal.file_prefix=uroce-tap-test-$id-a >"$dir/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
# The client needs the kernel interface the server's net_tap makes.
for _ in $(seq 300); do
  ip link show "$tap" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
ip link show "$tap" >/dev/null 2>&1 || { cat "$dir/server.log"; echo "FAIL: net_tap made no interface $tap"; exit 1; }
client_rc=0
timeout -s KILL 300 "$uroce" perf "${common[@]}" --role client \
  --set "endpoint.b.port=net_af_packet0,iface=$tap,qpairs=1" --set endpoint.b.mtu=1500 \
  --set eal.file_prefix=uroce-tap-test-$id-b --test send_lat,write_lat,read_bw,atomic_lat --size 64,3000 \
  --iters 100 --verify >"$dir/client.log" 2>&1 || client_rc=$?
server_rc=0
wait "$server_pid" || server_rc=$?
perf_pair_verdict "$dir" client.log server.log "$client_rc" "$server_rc"
echo "tap_test: OK"
