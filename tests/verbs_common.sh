# Shared by the verbs tests: run Debian's unmodified verbs programs over
# uroce (`uroce exec`), two processes joined by net_memif (configs/pair-*.ini
# as they are: a pair of their own through UROCE_PAIR), the TCP side channel
# on 127.0.0.1.
set -uo pipefail

UROCE="$1"
PAIR_A="$2"
PAIR_B="$3"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
FAILS=0
# More `uroce exec` flags for both sides of run_pair (e.g. --impair SPEC).
EXEC_FLAGS=()
# A pair name per test run and pair: the configurations leave the memif
# socket out, and UROCE_PAIR picks the file both ends use.
PAIR_BASE="verbs-$$-$RANDOM"
PAIRS=0

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
source "$(dirname "${BASH_SOURCE[0]}")/pair_lib.sh"

# Configs for the next pair of processes (the files unchanged) and the
# UROCE_PAIR that gives it a memif socket of its own.
make_pair_configs() {
  PAIRS=$((PAIRS + 1))
  cp "$PAIR_A" "$TMP/a-$PAIRS.ini"
  cp "$PAIR_B" "$TMP/b-$PAIRS.ini"
  export UROCE_PAIR="$PAIR_BASE-$PAIRS"
}

# True once something listens on TCP port $1 (without connecting to it).
listening() { ss -ltnH "sport = :$1" 2>/dev/null | grep -q .; }

# run_pair NAME TIMEOUT PROGRAM "SERVER ARGS" "CLIENT ARGS" [EXPECT]
# Server (memif server side, pair-a) first; the client once the server
# listens on its TCP port. Both must exit 0 within TIMEOUT seconds, and the
# client's output must show EXPECT (default: "iters in").
run_pair() {
  local name="$1" limit="$2" prog="$3" sargs="$4" cargs="$5" expect="${6:-iters in}"
  local port=$((20000 + (RANDOM % 20000)))
  make_pair_configs
  local a="$TMP/a-$PAIRS.ini" b="$TMP/b-$PAIRS.ini"
  timeout -k 5 "$limit" "$UROCE" exec --config "$a" ${EXEC_FLAGS[@]+"${EXEC_FLAGS[@]}"} -- "$prog" -p "$port" $sargs > "$TMP/$name.server" 2>&1 &
  local spid=$!
  wait_for_server "$port" "$spid" "$limit"
  timeout -k 5 "$limit" "$UROCE" exec --config "$b" ${EXEC_FLAGS[@]+"${EXEC_FLAGS[@]}"} -- "$prog" -p "$port" $cargs 127.0.0.1 > "$TMP/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  pair_verdict "$name" "$src" "$crc" "$expect" server
}
