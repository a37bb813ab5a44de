#!/usr/bin/env bash
# virtio_user: a uroce process on a virtio_user port talks to a second uroce
# process on DPDK's vhost-user backend (net_vhost) through a vhost-user
# socket; no hugepages. RC traffic with every byte verified; both shut down
# with every mbuf back in its pool. Bounded by `timeout`; no assertion on speed.
set -euo pipefail
source "$(dirname "$0")/pair_lib.sh"
uroce=$1
id=$$
dir=$(mktemp -d /tmp/uroce-vhost-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
common=(--port memif --control "$dir/control.sock")
timeout -s KILL 300 "$uroce" perf "${common[@]}" --role server \
  --set "endpoint.a.port=net_vhost0,iface=$dir/vhost.sock,queues=1" --set endpoint.a.mtu=1500 \
  --set eal.file_prefix=uroce-vhost-test-$id-a >"$dir/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
for _ in $(seq 300); do  # the vhost-user socket exists once the server's EAL is up
  [[ -S $dir/vhost.sock ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
client_rc=0
timeout -s KILL 300 "$uroce" perf "${common[@]}" --role client \
  --set "endpoint.b.port=virtio_user0,path=$dir/vhost.sock,queues=1" --set endpoint.b.mtu=1500 \
  --set eal.file_prefix=uroce-vhost-test-$id-b --test send_lat,write_bw,read_lat,atomic_lat --size 64,5000 \
  --iters 100 --verify >"$dir/client.log" 2>&1 || client_rc=$?
server_rc=0
wait "$server_pid" || server_rc=$?
perf_pair_verdict "$dir" client.log server.log "$client_rc" "$server_rc"
echo "vhost_test: OK"
