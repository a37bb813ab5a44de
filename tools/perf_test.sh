#!/usr/bin/env bash
# `uroce perf --port ring`: every test, several sizes (one packet, several,
# a 64 KiB message), two QPs, with --verify, in inline and in engine
# progress; then the CSV form; `uroce floor`; a memif pair over TCP
# control with its one-time token (and with none); an N:1 incast of two
# client processes into one server through a daemon, with the server's
# receive side as the bottleneck; a sender beyond a daemon's uplink that
# has a bottleneck ([impair] in the daemon's configuration); the local path
# between two processes, with and without reading the sender's memory.
# Checks results
# and clean shutdown, never speed.
set -euo pipefail
uroce=$1

check_run() {
  local out=$1
  grep -q 'every byte verified' <<<"$out" || { echo "$out"; echo "not verified"; exit 1; }
  for t in send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw; do
    grep -qE "^$t " <<<"$out" || { echo "$out"; echo "no row for $t"; exit 1; }
  done
  grep -qE 'mbufs back in the pools: ([0-9]+) of \1;' <<<"$out" || { echo "$out"; echo "mbufs leaked"; exit 1; }
}

for progress in inline engine; do
  echo "== ring, $progress progress"
  out=$("$uroce" perf --test all --size 1,64,5000,65536 --iters 200 --qps 2 --verify --quiet \
        --set engine.progress=$progress 2>&1) || { echo "$out"; echo "uroce perf failed"; exit 1; }
  echo "$out"
  check_run "$out"
done

echo "== CSV"
out=$("$uroce" perf --test send_lat,write_bw --size 64 --iters 100 --csv --quiet 2>/dev/null)
echo "$out"
head -1 <<<"$out" | grep -qx 'test,size,iters,qps,lat_median_us,lat_p99_us,lat_mean_us,mb_per_s,gbit_per_s,mmsg_per_s,port,progress'
grep -qE '^send_lat,64,100,1,[0-9.]+,[0-9.]+,[0-9.]+,' <<<"$out"
grep -qE '^write_bw,64,100,1,,,,[0-9.]+,' <<<"$out"

echo "== JSON"
out=$("$uroce" perf --test send_lat,write_bw --size 64 --iters 100 --json --quiet 2>/dev/null)
echo "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])
assert [r["test"] for r in rows] == ["send_lat", "write_bw"], rows
assert rows[0]["size"] == 64 and rows[0]["iters"] == 100 and rows[0]["lat_median_us"] > 0, rows[0]
assert rows[1]["lat_median_us"] is None and rows[1]["mb_per_s"] > 0, rows[1]
PY

echo "== incast: flows with their own windows, a probe, Jain's index (DCQCN on, verified)"
out=$("$uroce" perf --test incast --size 65536 --iters 200 --qps 3 --verify --json --quiet \
  --set congestion.algorithm=dcqcn 2>/dev/null)
echo "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])
r = rows[0]
assert r["test"] == "incast" and r["qps"] == 3 and r["iters"] == 200, r
assert r["mb_per_s"] > 0 and r["lat_median_us"] > 0 and 1 / 3 <= r["jain"] <= 1.0, r
PY

echo "== uroce floor: raw frames over a memif pair (the medium's floor)"
dir=$(mktemp -d /tmp/uroce-floor.XXXXXX)
trap 'rm -rf "$dir"' EXIT
floor_port() {  # ROLE SIDE
  echo "--set endpoint.$2.port=net_memif0,role=$1,id=0,socket=$dir/memif.sock,socket-abstract=no"
  echo "--set eal.file_prefix=uroce-floor-test-$$-$2"
}
# shellcheck disable=SC2046  # the flags are words
timeout 60 "$uroce" floor --role server $(floor_port server a) > "$dir/server.log" 2>&1 &
server=$!
# shellcheck disable=SC2046
out=$(timeout 60 "$uroce" floor --role client --iters 500 $(floor_port client b) 2>&1) ||
  { echo "$out"; cat "$dir/server.log"; echo "uroce floor's client failed"; exit 1; }
wait "$server" || { cat "$dir/server.log"; echo "uroce floor's server failed"; exit 1; }
echo "$out" | tail -2
grep -q "5000 of 5000 streamed frames arrived" <<<"$out" || { echo "the stream lost frames"; exit 1; }
grep -qE '^floor: size 64 lat_median_us [0-9.]+ lat_p99_us [0-9.]+ lat_mean_us [0-9.]+ rate_mmsg_per_s [0-9.]+$' \
  <<<"$out" || { echo "no floor: line"; exit 1; }
if "$uroce" floor --role client --size 63 2>/dev/null; then echo "floor accepted --size 63"; exit 1; fi

echo "== perf over memif with TCP control: the one-time token"
# The server prints its token; a client with a wrong hello is closed and the
# server goes on waiting; the right client (UROCE_PERF_TOKEN) runs.
unset UROCE_PERF_TOKEN
perf_side() {  # ROLE SIDE RUN
  echo "--port memif --role $1 --quiet --control $control"
  echo "--set endpoint.$2.port=net_memif0,role=$1,id=0,socket=$dir/perf-$3.sock,socket-abstract=no,bsize=8192,rsize=10"
  echo "--set eal.file_prefix=uroce-perf-test-$$-$3-$2"
}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_for() {  # FILE PATTERN: up to 10 s
  for _ in $(seq 200); do grep -q "$2" "$1" && return 0; sleep 0.05; done
  cat "$1"; echo "no '$2' in $1"; exit 1
}
port=$(free_port)
control=127.0.0.1:$port
# shellcheck disable=SC2046
timeout 60 "$uroce" perf $(perf_side server a token) > "$dir/token-server.log" 2>&1 &
server=$!
wait_for "$dir/token-server.log" '^uroce perf: token [0-9a-f]\{32\}$'
token=$(sed -n 's/^uroce perf: token \([0-9a-f]*\)$/\1/p' "$dir/token-server.log")
# shellcheck disable=SC2046
err=$("$uroce" perf $(perf_side client b token) 2>&1) && { echo "a TCP client without a token ran"; exit 1; }
grep -q "is TCP: give the token the server printed" <<<"$err" || { echo "$err"; echo "no hint at --token"; exit 1; }
# A wrong hello, queued before the right client exists: the server closes it
# (cat sees EOF, nothing else) once its port is up.
timeout 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; echo 'HELLO token=0123456789abcdef' >&3; cat <&3" \
  > "$dir/wrong.out" 2>&1 &
wrong=$!
sleep 0.2
# shellcheck disable=SC2046
out=$(UROCE_PERF_TOKEN=$token timeout 60 "$uroce" perf $(perf_side client b token) --test send_lat,write_bw \
      --iters 100 2>&1) ||
  { echo "$out"; cat "$dir/token-server.log"; echo "the client with the token failed"; exit 1; }
wait "$server" || { cat "$dir/token-server.log"; echo "the server failed"; exit 1; }
wait "$wrong" || { cat "$dir/wrong.out"; echo "the wrong client was not closed"; exit 1; }
[[ ! -s $dir/wrong.out ]] || { cat "$dir/wrong.out"; echo "the wrong client got an answer"; exit 1; }
grep -qE '^send_lat +64 ' <<<"$out" || { echo "$out"; echo "no send_lat row"; exit 1; }
grep -q 'refused the client at 127.0.0.1:[0-9]*: a wrong token (1 refused so far)' "$dir/token-server.log" ||
  { cat "$dir/token-server.log"; echo "the server did not log the wrong client"; exit 1; }

echo "== perf over memif with TCP control: --token none on both sides"
port=$(free_port)
control=127.0.0.1:$port
# shellcheck disable=SC2046
timeout 60 "$uroce" perf $(perf_side server a none) --token none > "$dir/none-server.log" 2>&1 &
server=$!
# shellcheck disable=SC2046
out=$(timeout 60 "$uroce" perf $(perf_side client b none) --token none --test send_lat --iters 100 2>&1) ||
  { echo "$out"; cat "$dir/none-server.log"; echo "the client with --token none failed"; exit 1; }
wait "$server" || { cat "$dir/none-server.log"; echo "the server with --token none failed"; exit 1; }
grep -qE '^send_lat +64 ' <<<"$out" || { echo "$out"; echo "no send_lat row"; exit 1; }
grep -q 'token none: the first client' "$dir/none-server.log" || { cat "$dir/none-server.log"; exit 1; }

echo "== N:1 incast between processes: a daemon, a server with --clients 2, its receive side the bottleneck"
start_daemon() {  # INI SOCKET LOG: a daemon of the test's own, in the background ($daemon)
  timeout 120 "$uroce" daemon --config "$1" > "$3" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [[ -S $2 ]] && break; sleep 0.05; done
  [[ -S $2 ]] || { cat "$3"; echo "the daemon of $1 did not start"; exit 1; }
}
# The daemon's uplink goes nowhere (net_null); the processes reach each other
# over the links it makes. The bottleneck on the server's receive side covers
# every link into it, so the two writers share its queue: it marks CE, the
# server sends CNPs, and each writer receives some and slows down (DCQCN).
daemon_ini() {  # NAME: the [eal] and [daemon] sections of a test daemon's configuration
  printf '[eal]\nhugepages = no\nlog_level = *:error\ntelemetry = no\nfile_prefix = uroce-perf-test-%s-%s\n' "$$" "$1"
  printf '[daemon]\nsocket = %s/%s.sock\n' "$dir" "$1"
}
{ daemon_ini uroce; cat <<INI
[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
mtu = 9000
INI
} > "$dir/daemon.ini"
start_daemon "$dir/daemon.ini" "$dir/uroce.sock" "$dir/daemon.log"
incast=(--port daemon --control "$dir/incast.sock" --quiet --set congestion.algorithm=dcqcn)
UROCE_DAEMON=$dir/uroce.sock timeout 120 "$uroce" perf "${incast[@]}" --role server --clients 2 \
  --impair rate_mbps=2000,queue_frames=64,ecn_frames=4,direction=rx,seed=7 > "$dir/incast-server.log" 2>&1 &
server=$!
writers=()
for i in 1 2; do
  UROCE_DAEMON=$dir/uroce.sock timeout 120 "$uroce" perf "${incast[@]}" --role client --test write_bw \
    --size 65536 --iters 300 --verify > "$dir/incast-$i.log" 2>&1 &
  writers+=($!)
done
for i in 1 2; do
  wait "${writers[$((i - 1))]}" || { cat "$dir/incast-$i.log" "$dir/incast-server.log"; echo "writer $i failed"; exit 1; }
  grep -q 'every byte verified' "$dir/incast-$i.log" || { cat "$dir/incast-$i.log"; echo "writer $i: not verified"; exit 1; }
  grep -qE 'congestion: .*CNPs sent 0, received [1-9]' "$dir/incast-$i.log" ||
    { cat "$dir/incast-$i.log"; echo "writer $i received no CNP"; exit 1; }
done
wait "$server" || { cat "$dir/incast-server.log"; echo "the incast server failed"; exit 1; }
cat "$dir/incast-server.log"
grep -qE 'mbufs back in the pools: ([0-9]+) of \1;' "$dir/incast-server.log" || { echo "mbufs leaked"; exit 1; }
grep -qE 'rx: frames [1-9].*CE marked [1-9]' "$dir/incast-server.log" || { echo "the bottleneck marked nothing"; exit 1; }
grep -qE 'congestion: CE-marked frames received [1-9][0-9]*, CNPs sent [1-9]' "$dir/incast-server.log" ||
  { echo "the server sent no CNP"; exit 1; }

echo "== the local path: two processes linked past the daemon, large messages through the link's payload area"
# Large messages go in chunks through the link's file (host/local_links.h);
# the stop report counts them. Every byte is checked, and again with
# pull_min_bytes 0 (frames only).
for pull in 16384 0; do
  local_args=(--port daemon --control "$dir/local.sock" --quiet --set engine.pull_min_bytes=$pull)
  UROCE_DAEMON=$dir/uroce.sock timeout 120 "$uroce" perf "${local_args[@]}" --role server > "$dir/local-server.log" 2>&1 &
  server=$!
  out=$(UROCE_DAEMON=$dir/uroce.sock timeout 120 "$uroce" perf "${local_args[@]}" --role client \
        --test send_lat,send_bw,write_bw,read_bw --size 64,65536,1048576 --iters 200 --verify 2>&1) ||
    { echo "$out"; cat "$dir/local-server.log"; echo "the local path failed (pull_min_bytes=$pull)"; exit 1; }
  wait "$server" || { cat "$dir/local-server.log"; echo "the local server failed"; exit 1; }
  echo "$out"
  grep -q 'every byte verified' <<<"$out" || { echo "not verified"; exit 1; }
  grep -qE 'mbufs back in the pools: ([0-9]+) of \1;' <<<"$out" || { echo "mbufs leaked"; exit 1; }
  if [[ $pull != 0 ]]; then
    grep -qE "chunks through a link's payload area: sent [1-9][0-9]*, received [1-9][0-9]* \([0-9]+ bytes\), refused 0, failed 0" \
      <<<"$out" || { echo "no chunk went through the payload area, or something failed"; exit 1; }
    grep -qE "chunks through a link's payload area: sent [1-9]" "$dir/local-server.log" ||
      { cat "$dir/local-server.log"; echo "the server sent no chunk through the payload area"; exit 1; }
  elif grep -qE "read from another process's memory|chunks through a link's payload area" <<<"$out"; then
    echo "pull_min_bytes=0 still sent large messages past the frames"; exit 1
  fi
done

kill "$daemon"
wait "$daemon" || true
if "$uroce" perf --port daemon --role client --clients 2 2>/dev/null; then echo "a client took --clients"; exit 1; fi

echo "== a bottleneck on the daemon's uplink: a sender beyond it (memif) into an attached process, DCQCN"
# The uplink is a memif whose other end is a process-private uroce perf (the
# "wire"); [impair] in the daemon's configuration sits on that uplink, here
# on the frames entering the host.
{ daemon_ini uplink; cat <<INI
[impair]
rate_mbps = 2000
queue_frames = 64
ecn_frames = 4
direction = rx
seed = 3
[endpoint.up]
port = net_memif0,role=server,id=0,socket=$dir/uplink-memif.sock,socket-abstract=no,bsize=8192,rsize=10
ipv4 = 10.77.0.1
mtu = 9000
INI
} > "$dir/uplink.ini"
if "$uroce" daemon --config "$dir/uplink.ini" --set impair.rnr_storm=0.1 2>/dev/null; then
  echo "the daemon took an RNR storm"; exit 1
fi
start_daemon "$dir/uplink.ini" "$dir/uplink.sock" "$dir/uplink-daemon.log"
UROCE_DAEMON=$dir/uplink.sock timeout 60 "$uroce" perf --port daemon --role server --control "$dir/uplink-c.sock" \
  --quiet --set congestion.algorithm=dcqcn > "$dir/uplink-server.log" 2>&1 &
server=$!
out=$(timeout 60 "$uroce" perf --port memif --role client --control "$dir/uplink-c.sock" --quiet \
  --set "endpoint.b.port=net_memif0,role=client,id=0,socket=$dir/uplink-memif.sock,socket-abstract=no,bsize=8192,rsize=10" \
  --set "eal.file_prefix=uroce-perf-test-$$-far" --set congestion.algorithm=dcqcn \
  --test write_bw --size 65536 --iters 300 --verify 2>&1) ||
  { echo "$out"; cat "$dir/uplink-server.log" "$dir/uplink-daemon.log"; echo "the sender beyond the uplink failed"; exit 1; }
wait "$server" || { cat "$dir/uplink-server.log"; echo "the attached server failed"; exit 1; }
echo "$out" | tail -2
grep -q 'every byte verified' <<<"$out" || { echo "$out"; echo "not verified"; exit 1; }
grep -qE 'congestion: .*received [1-9]' <<<"$out" || { echo "the sender received no CNP"; exit 1; }
stats=$("$uroce" stats --daemon "$dir/uplink.sock")
grep -E '^impair ' <<<"$stats"
grep -qE '^impair device=uroce0 tx_frames=0 .* rx_frames=[1-9][0-9]* .* rx_ce_marked=[1-9]' <<<"$stats" ||
  { echo "$stats"; echo "no CE marks on the uplink's receive side in STATS"; exit 1; }
kill "$daemon"
wait "$daemon" || true
grep -qE 'uroce0 impairments: tx: frames 0, .*; rx: frames [1-9].*CE marked [1-9]' "$dir/uplink-daemon.log" ||
  { cat "$dir/uplink-daemon.log"; echo "the daemon's stop report has no impairments"; exit 1; }
grep -qE 'mbufs back in the pool: ([0-9]+) of \1$' "$dir/uplink-daemon.log" ||
  { cat "$dir/uplink-daemon.log"; echo "the daemon leaked mbufs"; exit 1; }

echo "== bad arguments are refused"
if "$uroce" perf --test nope 2>/dev/null; then echo "accepted --test nope"; exit 1; fi
if "$uroce" perf --port memif 2>/dev/null; then echo "accepted memif without --role"; exit 1; fi
if "$uroce" perf --port memif --role client --control 127.0.0.1:1 --token 0123 2>/dev/null; then
  echo "accepted a short token"; exit 1
fi
err=$("$uroce" perf --set endpoint.a.mtu=1 2>&1) && { echo "accepted mtu=1"; exit 1; }
grep -q "\[endpoint.a\] mtu = '1'" <<<"$err" || { echo "$err"; echo "error does not name the key"; exit 1; }
echo "perf_test: OK"
