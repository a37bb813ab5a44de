#!/usr/bin/env bash
# `uroce perf --port ring`: every test, several sizes (one packet, several,
# a 64 KiB message), two QPs, with --verify, in inline and in engine
# progress; then the CSV form. Checks results and clean shutdown, never speed.
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

echo "== bad arguments are refused"
if "$uroce" perf --test nope 2>/dev/null; then echo "accepted --test nope"; exit 1; fi
if "$uroce" perf --port memif 2>/dev/null; then echo "accepted memif without --role"; exit 1; fi
err=$("$uroce" perf --set endpoint.a.mtu=1 2>&1) && { echo "accepted mtu=1"; exit 1; }
grep -q "\[endpoint.a\] mtu = '1'" <<<"$err" || { echo "$err"; echo "error does not name the key"; exit 1; }
echo "perf_test: OK"
