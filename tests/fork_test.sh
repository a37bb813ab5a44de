#!/usr/bin/env bash
# fork(2) after a device was opened (tests/fork_check.c), through a daemon of
# the test's own whose uplink goes nowhere (net_null, no-rx=1), as
# bazel/uroce_test_runner.sh makes one for three or more ranks:
#   1. pair: two forked children of a process that opened uroce0 connect an
#      RC QP to each other and exchange checked SENDs;
#   2. orphan: the parent leaves while its forked child lives on; the daemon
#      must let the parent's session go (no "pid=PARENT" in its STATS) while
#      the child is alive;
#   3. private: a process-private device (ring.ini) is refused to the child.
#   args: UROCE FORK_CHECK RING_INI
set -uo pipefail
UROCE=$1
CHECK=$2
RING=$3
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
dir=$(mktemp -d /tmp/uroce-fork.XXXXXX)  # short: a socket path has 108 bytes
daemon_pid=
orphan_child=
cleanup() {
  [[ -n $orphan_child ]] && kill -KILL "$orphan_child" 2>/dev/null
  [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
cat > "$dir/daemon.ini" <<INI
[eal]
lcores = 0
hugepages = no
log_level = *:error
telemetry = no

[daemon]
socket = $dir/uroce.sock

[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
ipv6 = fd00:88::1
INI
"$UROCE" daemon --config "$dir/daemon.ini" > "$dir/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 200); do [[ -S $dir/uroce.sock ]] && break; sleep 0.05; done
[[ -S $dir/uroce.sock ]] || { cat "$dir/daemon.log"; echo "FAIL: the daemon did not start"; exit 1; }
export UROCE_DAEMON=$dir/uroce.sock

echo "== pair"
if ! timeout -k 5 60 "$UROCE" exec -- "$CHECK" pair; then
  fail "two forked children could not connect and exchange messages"
  "$UROCE" stats --daemon "$UROCE_DAEMON"
fi

echo "== orphan"
# Into a file: the child keeps the parent's stdout, and $(...) would wait
# for the child.
timeout -k 5 30 "$UROCE" exec -- "$CHECK" orphan 20 > "$dir/orphan.out" || fail "fork_check orphan exited $?"
cat "$dir/orphan.out"
read -r _ parent _ orphan_child < <(grep '^parent ' "$dir/orphan.out")
if [[ -z $parent || -z $orphan_child ]]; then
  fail "fork_check orphan printed no pids"
else
  gone=no
  for _ in $(seq 100); do
    if ! "$UROCE" stats --daemon "$UROCE_DAEMON" | grep -q "pid=$parent "; then gone=yes; break; fi
    sleep 0.05
  done
  # Alive, not a zombie: its copy of the parent's files would still be open.
  state=$(awk '{print $3}' "/proc/$orphan_child/stat" 2>/dev/null)
  [[ -n $state && $state != Z ]] || fail "the child left too early for the check to mean anything"
  if [[ $gone != yes ]]; then
    fail "the parent ($parent) left, and its session is still attached while its child ($orphan_child) lives"
    "$UROCE" stats --daemon "$UROCE_DAEMON"
  else
    echo "the parent's session ended with the parent; its child is still running"
  fi
fi

echo "== private"
unset UROCE_DAEMON
timeout -k 5 60 "$UROCE" exec --config "$RING" -- "$CHECK" private ||
  fail "a forked child of a process-private runtime was not refused its device cleanly"

((FAILS == 0)) && echo "PASS" && exit 0
exit 1
