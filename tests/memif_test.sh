#!/usr/bin/env bash
# Two uroce processes joined by net_memif (configs/pair-a.ini and pair-b.ini,
# with this test's own file prefixes, memif socket and control socket), each
# pinned to its own core, no hugepages:
#   1. RC traffic of every kind, IPv4 (ARP), several sizes and two QPs, every
#      byte verified; both exit 0 with every mbuf back in its pool.
#   2. The same over IPv6 (neighbour discovery), fewer runs.
#   3. During a long run, `uroce stats` and dpdk-telemetry.py read the
#      server's counters; then SIGTERM to the server: it flushes its QP, finds
#      every mbuf back and exits 143; the client sees its peer go, fails its
#      run and still shuts down clean.
#   Run 1 starts the server first, run 2 the client (memif clients retry).
# Bounded: every process runs under `timeout`; no assertion on speed.
set -euo pipefail
uroce=$1
dir=$(mktemp -d /tmp/uroce-memif-test.XXXXXX)  # short: a socket path has 108 bytes at most
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
id=$$

# Common flags for side a (server) and b (client) of run $1.
flags() {
  local side=$1 run=$2 role port
  if [[ $side == a ]]; then role=server; else role=client; fi
  port="net_memif0,role=$role,id=0,socket=$dir/memif-$run.sock,socket-abstract=no,bsize=8192,rsize=10"
  echo --port memif --role $role --control "$dir/control-$run.sock" \
    --set eal.file_prefix=uroce-memif-test-$id-$run-$side --set "endpoint.$side.port=$port"
}

start_server() {  # run, extra flags...
  local run=$1
  shift
  # shellcheck disable=SC2046
  timeout -s KILL 300 "$uroce" perf $(flags a "$run") "$@" >"$dir/server-$run.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
}

run_client() {  # run, extra flags... ; sets client_rc
  local run=$1
  shift
  client_rc=0
  # shellcheck disable=SC2046
  timeout -s KILL 300 "$uroce" perf $(flags b "$run") "$@" >"$dir/client-$run.log" 2>&1 || client_rc=$?
}

show() { echo "--- $1"; cat "$dir/$1"; }
clean_exit() {  # log: the runtime's shutdown line says every mbuf came back
  grep -qE 'mbufs back in the pools: ([0-9]+) of \1;' "$dir/$1" || { show "$1"; echo "FAIL: $1: mbufs leaked"; exit 1; }
}

echo "== 1. IPv4, every test, verified"
start_server v4
run_client v4 --test all --size 64,4096,65536 --iters 200 --qps 2 --verify
server_rc=0
wait "$server_pid" || server_rc=$?
show client-v4.log
show server-v4.log
[[ $client_rc -eq 0 && $server_rc -eq 0 ]] || { echo "FAIL: client exit $client_rc, server exit $server_rc"; exit 1; }
grep -q 'every byte verified' "$dir/client-v4.log"
for t in send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw; do
  grep -qE "^$t " "$dir/client-v4.log" || { echo "FAIL: no result for $t"; exit 1; }
done
clean_exit client-v4.log
clean_exit server-v4.log

echo "== 2. IPv6 (neighbour discovery), verified; the client starts first"
# shellcheck disable=SC2046
timeout -s KILL 300 "$uroce" perf $(flags b v6) --set endpoint.b.ipv4= --test send_lat,write_bw,read_lat \
  --size 64,8000 --iters 100 --verify >"$dir/client-v6.log" 2>&1 &
client_pid=$!
pids+=("$client_pid")
start_server v6 --set endpoint.a.ipv4=
client_rc=0
wait "$client_pid" || client_rc=$?
server_rc=0
wait "$server_pid" || server_rc=$?
show client-v6.log
show server-v6.log
[[ $client_rc -eq 0 && $server_rc -eq 0 ]] || { echo "FAIL: client exit $client_rc, server exit $server_rc"; exit 1; }
grep -q 'server a (fd00:77::1)' "$dir/server-v6.log" || { echo "FAIL: the server did not use its IPv6 GID"; exit 1; }
clean_exit client-v6.log
clean_exit server-v6.log

echo "== 3. SIGTERM to the server during a run"
start_server term
# shellcheck disable=SC2046
timeout -s KILL 300 "$uroce" perf $(flags b term) --test send_bw --size 4096 --iters 100000000 \
  >"$dir/client-term.log" 2>&1 &
client_pid=$!
pids+=("$client_pid")
# Wait (bounded) until the run is under way: the client prints progress.
for _ in $(seq 600); do
  grep -q 'send_bw 4096 B: [1-9]' "$dir/client-term.log" && break
  kill -0 "$client_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q 'send_bw 4096 B: [1-9]' "$dir/client-term.log" || { show client-term.log; show server-term.log; echo "FAIL: the run never started"; exit 1; }
# While it runs: its counters through telemetry, with `uroce stats` and with
# DPDK's own dpdk-telemetry.py.
stats=$(timeout 60 "$uroce" stats --file-prefix uroce-memif-test-$id-term-a) || { echo "$stats"; echo "FAIL: uroce stats"; exit 1; }
echo "$stats"
grep -q '^endpoint a: port 0 (net_memif)' <<<"$stats" || { echo "FAIL: uroce stats shows no endpoint a"; exit 1; }
grep -qE '^QP a/[0-9]+: RC RTS' <<<"$stats" || { echo "FAIL: uroce stats shows no QP in RTS"; exit 1; }
grep -qE 'rx_frames=[1-9]' <<<"$stats" || { echo "FAIL: uroce stats shows no received frames"; exit 1; }
# Where its threads run (pmd/threads.h): the main thread at least, with its CPUs.
grep -qE '^thread [0-9]+ .*: cpus [0-9]' <<<"$stats" || { echo "FAIL: uroce stats shows no threads"; exit 1; }
if command -v dpdk-telemetry.py >/dev/null; then
  tel=$(echo /uroce/port,a | timeout 60 dpdk-telemetry.py -f uroce-memif-test-$id-term-a 2>&1) || true
  echo "$tel"
  grep -q '"driver": "net_memif"' <<<"$tel" || { echo "FAIL: dpdk-telemetry.py did not read /uroce/port,a"; exit 1; }
else
  echo "FAIL: dpdk-telemetry.py (Debian's dpdk-dev) is missing"
  exit 1
fi
kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
client_rc=0
wait "$client_pid" || client_rc=$?
show server-term.log
show client-term.log
[[ $server_rc -eq 143 ]] || { echo "FAIL: server exit $server_rc, want 143 (SIGTERM, clean)"; exit 1; }
grep -qE 'SIGTERM: shut down; mbufs back in the pools: ([0-9]+) of \1; QPs flushed: 1$' "$dir/server-term.log" \
  || { echo "FAIL: server did not flush its QP and get every mbuf back"; exit 1; }
[[ $client_rc -ne 0 ]] || { echo "FAIL: the client finished a run whose server was gone"; exit 1; }
clean_exit client-term.log
echo "memif_test: OK"
