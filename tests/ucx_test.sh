#!/bin/bash
# UCX 1.13 (ucx-utils), unmodified, over uroce: UCX finds
# uroce's devices through the device files `uroce exec` presents (root: a
# private mount namespace, tools/device_files.h), and its perftest runs
# between two processes joined by net_memif.
#
# On one host UCX's own choice is shared memory (posix, sysv, cma: it knows
# both processes are on one machine), so the four ucx_perftest runs also run
# with UCX_TLS=rc_verbs,ud_verbs,self: transport selection only, the device,
# GID and everything else as UCX picks them. One run with no UCX variable at
# all checks that a default UCX job starts and finishes beside uroce.
source "$(dirname "$0")/verbs_common.sh"

if ! command -v ucx_info > /dev/null || ! command -v ucx_perftest > /dev/null; then
  echo "FAIL: ucx-utils is not installed (tools/setup installs it)"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: UCX needs the device files, which uroce exec presents only as root"
  exit 1
fi

# ucx_info -d over both endpoints of configs/ring.ini.
make_pair_configs
info="$TMP/ucx_info.txt"
timeout -k 5 60 "$UROCE" exec --config "$TMP/a-$PAIRS.ini" --device-files=yes -- ucx_info -d > "$info" 2>&1
for want in "Memory domain: uroce0" "Transport: rc_verbs" "Transport: ud_verbs" "Device: uroce0:1" \
            "Connection manager: rdmacm"; do
  grep -q "$want" "$info" || fail "ucx_info -d does not show '$want'"
done
[[ $FAILS -eq 0 ]] && echo "ok: ucx_info -d lists uroce0:1 with rc_verbs, ud_verbs and the rdmacm connection manager"

# ucx_run NAME TLS TEST SIZE: ucx_perftest server (memif server side) and
# client; both must finish and the client must report its final line.
ucx_run() {
  local name="$1" tls="$2" test="$3" size="$4"
  local port=$((20000 + (RANDOM % 20000)))
  local vars=()
  [[ -n $tls ]] && vars=(UCX_TLS="$tls")
  make_pair_configs
  timeout -k 5 60 env "${vars[@]}" "$UROCE" exec --config "$TMP/a-$PAIRS.ini" --device-files=yes -- \
    ucx_perftest -p "$port" > "$TMP/$name.server" 2>&1 &
  local spid=$!
  wait_for_server "$port" "$spid" 30
  # A pair still running after 20 s (a run takes about a second) has
  # stalled: what uroce counted on each side still alive goes in the report.
  ( sleep 20
    for pid in $(pgrep -f "^ucx_perftest -p $port( |\$)"); do "$UROCE" stats --pid "$pid"; done ) \
    > "$TMP/$name.stalled" 2>&1 &
  local watch=$!
  timeout -k 5 60 env "${vars[@]}" "$UROCE" exec --config "$TMP/b-$PAIRS.ini" --device-files=yes -- \
    ucx_perftest -p "$port" -t "$test" -s "$size" -n 2000 127.0.0.1 > "$TMP/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  pkill -P "$watch" 2>/dev/null
  kill "$watch" 2>/dev/null
  wait "$watch" 2>/dev/null
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -q "^Final:" "$TMP/$name.client"; then
    fail "$name: server rc=$src client rc=$crc"
    echo "--- server:"; cat "$TMP/$name.server"; echo "--- client:"; cat "$TMP/$name.client"
    if [[ -s $TMP/$name.stalled ]]; then echo "--- uroce stats of each side still running after 20 s:"; cat "$TMP/$name.stalled"; fi
    return 1
  fi
  # Final: iterations, latency (50%, average, overall) us, bandwidth MB/s, rate.
  echo "ok: $name: $(grep "^Final:" "$TMP/$name.client" | awk '{print "latency " $4 " us, " $6 " MB/s"}')"
}

ucx_run default_tag_lat "" tag_lat 8
for t in tag_lat tag_bw ucp_put_bw ucp_get; do
  ucx_run "uroce_$t" rc_verbs,ud_verbs,self "$t" 65536
done
ucx_run uroce_ud_tag_lat ud_verbs,self tag_lat 8

echo "$FAILS failed"
[[ $FAILS -eq 0 ]]
