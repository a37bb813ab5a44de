#!/usr/bin/env bash
# Devices open at once: opening a device never waits for its link.
# 1. ibv_devinfo over every configuration a program may use alone returns
#    at once with the port ACTIVE (pair-a too, whose peer is not there).
# 2. A memif pair with active_before_link = no behaves as a NIC's port: DOWN
#    until the peer connects, then IBV_EVENT_PORT_ACTIVE; when the peer's
#    process ends, IBV_EVENT_PORT_ERR.
# Arguments: uroce, port_state_check, ring.ini, pair-a.ini, pair-b.ini.
set -uo pipefail
UROCE=$1 CHECK=$2 RING=$3 PAIR_A=$4 PAIR_B=$5
TMP=${TEST_TMPDIR:-$(mktemp -d)}
export UROCE_PAIR="port-state-$$-$RANDOM"
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

for cfg in "$RING" "$PAIR_A" "$PAIR_B"; do
  start=$(date +%s%N)
  out=$(timeout -k 5 60 "$UROCE" exec --config "$cfg" -- ibv_devinfo 2>&1)
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  name=$(basename "$cfg")
  # "Well under a second" on an idle machine (0.35 s here); the bound leaves
  # room for a loaded CI machine and is still far below a link wait (10-30 s).
  if [[ $rc -ne 0 ]] || ! grep -q "PORT_ACTIVE" <<<"$out" || ((ms > 5000)); then
    fail "ibv_devinfo with $name: rc=$rc in $ms ms"; echo "$out"
  else
    echo "ok: ibv_devinfo with $name in $ms ms, port ACTIVE"
  fi
done

# A pair whose ports follow their link.
{ cat "$PAIR_A"; echo "active_before_link = no"; } > "$TMP/a.ini"
{ cat "$PAIR_B"; echo "active_before_link = no"; } > "$TMP/b.ini"
# The server: DOWN at open, then ACTIVE once the client came; it holds the
# link a moment after that (sleep in the client's check: see below) and ends.
timeout -k 5 60 "$UROCE" exec --config "$TMP/a.ini" -- "$CHECK" 20 active > "$TMP/a.out" 2>&1 &
apid=$!
for _ in $(seq 100); do grep -q "^opened" "$TMP/a.out" && break; sleep 0.1; done
sleep 1  # the server stays DOWN while nobody connects
grep -q "^opened .* port DOWN$" "$TMP/a.out" || fail "server: not DOWN at open: $(head -1 "$TMP/a.out")"
# No [eal] file_prefix in the pair's files: `uroce stats --pid` finds the
# process's counters (uroce exec runs the program in its own process).
spid=$(pgrep -P "$apid" | head -1)
stats=$(timeout 30 "$UROCE" stats --pid "$spid" 2>&1)
grep -q "^endpoint a: port 0 (net_memif)" <<<"$stats" || { fail "uroce stats --pid $spid"; echo "$stats"; }
# The client: its own port comes up when it connects (ACTIVE), then goes
# down (ERR) when the server's process has ended.
timeout -k 5 60 "$UROCE" exec --config "$TMP/b.ini" -- "$CHECK" 20 active err > "$TMP/b.out" 2>&1
brc=$?
wait "$apid"
arc=$?
grep -q "^event port active port 1, port ACTIVE$" "$TMP/a.out" || fail "server: no PORT_ACTIVE event (rc=$arc)"
grep -q "^event port active port 1, port ACTIVE$" "$TMP/b.out" || fail "client: no PORT_ACTIVE event"
grep -q "^event port error port 1, port DOWN$" "$TMP/b.out" || fail "client: no PORT_ERR event after the server ended (rc=$brc)"
echo "--- server:"; cat "$TMP/a.out"; echo "--- client:"; cat "$TMP/b.out"
((arc == 0 && brc == 0)) || fail "server rc=$arc client rc=$brc"

((FAILS == 0)) && echo "PASS" || echo "$FAILS failures"
exit $((FAILS != 0))
