#!/usr/bin/env bash
# First contact, all to all, through `uroce daemon`: four processes attached
# to one daemon (an uplink on net_null: no kernel interface, no privileges
# needed) run tests/fi_first_contact.c over "uroce;ofi_rxm". In each round
# every process opens a fresh endpoint and sends to every other at once, so
# that each of the six pairs connects from both sides at the same moment, as
# an MPI job's ranks do at their first collective. Every message is checked;
# a round that has not finished within ROUND_LIMIT seconds is a hang and
# fails the test, naming what its process still waits for. The round times
# and the daemon's switch counts (CM messages routed, and any it could not
# route) are printed for the record.
#   args: UROCE FI_FIRST_CONTACT [ROUNDS [ROUND_LIMIT]]
set -uo pipefail
abs() {
  [[ -e $1 ]] || { echo "FAIL: $1 does not exist" >&2; exit 1; }
  readlink -f "$1"
}
UROCE=$(abs "$1") && PROGRAM=$(abs "$2") || exit 1
ROUNDS=${3:-10}
RANKS=4
# A round takes 0.3-2 s on a busy 2-core machine (most of it ofi_rxm's
# buffer pools for each new endpoint, tens of MB zeroed); 8 s was the worst
# seen in 2,000 rounds. Past this it is a hang.
ROUND_LIMIT=${4:-60}
TMP=$(mktemp -d /tmp/uroce-first-contact.XXXXXX)
pids=()
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do
    pkill -KILL -P "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mkdir -p "$TMP/run" "$TMP/names"
cat > "$TMP/daemon.ini" <<EOF
[eal]
hugepages = no
log_level = *:error
telemetry = no
file_prefix = uroce-first-contact-$$
[daemon]
socket = $TMP/run/daemon.sock
[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
EOF
timeout -k 5 $((ROUNDS * ROUND_LIMIT * 2 + 120)) "$UROCE" daemon --config "$TMP/daemon.ini" > "$TMP/daemon.log" 2>&1 &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do [[ -S $TMP/run/daemon.sock ]] && break; sleep 0.1; done
if [[ ! -S $TMP/run/daemon.sock ]]; then
  cat "$TMP/daemon.log"
  echo "FAIL: the daemon did not start"
  exit 1
fi
export UROCE_DAEMON=$TMP/run/daemon.sock

echo "== $RANKS processes, $ROUNDS rounds of all-to-all first contact over uroce;ofi_rxm"
ranks=()
for r in $(seq 0 $((RANKS - 1))); do
  timeout -k 5 $((ROUNDS * ROUND_LIMIT * 2 + 60)) "$UROCE" exec -- "$PROGRAM" "$TMP/names" "$r" "$RANKS" "$ROUNDS" \
    "$ROUND_LIMIT" > "$TMP/rank$r.log" 2>&1 &
  ranks+=($!)
  pids+=($!)
done
fails=0
for r in "${!ranks[@]}"; do
  wait "${ranks[$r]}"
  rc=$?
  cat "$TMP/rank$r.log"
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: rank $r exited $rc"
    fails=$((fails + 1))
  elif ! grep -q "^fi_first_contact rank $r: $ROUNDS rounds of $RANKS-way first contact, every message checked" \
    "$TMP/rank$r.log"; then
    echo "FAIL: rank $r did not report its rounds"
    fails=$((fails + 1))
  fi
done

stats=$(timeout 20 "$UROCE" stats --daemon "$TMP/run/daemon.sock" 2>&1)
grep "^switch " <<<"$stats"
kill -0 "$daemon" 2>/dev/null || { cat "$TMP/daemon.log"; echo "FAIL: the daemon died"; fails=$((fails + 1)); }
kill -TERM "$daemon" 2>/dev/null
wait "$daemon" 2>/dev/null
if [[ $fails -ne 0 ]]; then
  tail -20 "$TMP/daemon.log"
  echo "FAIL: $fails of $RANKS processes"
  exit 1
fi
echo "PASS"
