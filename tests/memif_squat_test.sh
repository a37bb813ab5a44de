#!/usr/bin/env bash
# Another user cannot become the peer of a memif pair or of `uroce perf`'s
# side channel. The attacker is uid 65534 (no groups), running
# attack/unix_squat.py; the victim is root, as in CI:
#   1. the attacker binds the paths a pair and perf used to take in /tmp
#      (uroce-memif-UID-HASH(UROCE_PAIR)-ID.sock, uroce-perf-PORT.sock); a
#      root `uroce perf --port memif --role client` with the defaults never
#      connects to them (its sockets are in root's private directory);
#   2. UROCE_RUNTIME_DIR naming the attacker's directory is refused;
#   3. a memif server given socket=PATH without socket-abstract makes a file,
#      not an abstract name the attacker could reach; an orderly exit
#      removes the file;
#   4. a server killed with SIGKILL leaves its socket file; the next server
#      on the same path removes it and starts (a check that this stays so:
#      pmd/port_setup.cc removes a socket nobody answers on).
# Root (setpriv); no network; every process under `timeout`.
#   args: UROCE UNIX_SQUAT_PY
set -uo pipefail
UROCE=$1
SQUAT=$2
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: memif_squat_test needs root (setpriv)"
  exit 1
fi
id=$$
TMP=$(mktemp -d /tmp/uroce-memif-squat.XXXXXX)
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
old_memif=""
old_perf=/tmp/uroce-perf-memif.sock
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do
    pkill -KILL -P "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  [[ -n $old_memif ]] && rm -f "$old_memif"
  [[ -S $old_perf ]] && [[ $(stat -c %u "$old_perf") == 65534 ]] && rm -f "$old_perf"
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
chmod 755 "$TMP"
install -m 0644 "$SQUAT" "$TMP/unix_squat.py"
mkdir -m 0777 "$TMP/evil" && chown 65534:65534 "$TMP/evil"
as_attacker() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
unset XDG_RUNTIME_DIR UROCE_RUNTIME_DIR UROCE_CONFIG UROCE_DAEMON TEST_TMPDIR

echo "== 1. the paths in /tmp a pair and perf used to take"
pair=attack-$id
hash=$(/usr/bin/python3 -c '
import sys
h = 14695981039346656037
for c in sys.argv[1].encode():
    h = ((h ^ c) * 1099511628211) % 2**64
print("%016x" % h)' "$pair")
old_memif=/tmp/uroce-memif-0-$hash-0.sock
rm -f "$old_memif"
[[ -S $old_perf ]] && rm -f "$old_perf"
# Started directly (no function, no subshell): $! is timeout(1), and the
# cleanup kills its child.
setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 60 /usr/bin/python3 "$TMP/unix_squat.py" \
  listen "$old_memif" "$TMP/evil/memif.log" &
pids+=($!)
setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 60 /usr/bin/python3 "$TMP/unix_squat.py" \
  listen "$old_perf" "$TMP/evil/perf.log" &
pids+=($!)
for _ in $(seq 100); do
  grep -q listening "$TMP/evil/memif.log" 2>/dev/null && grep -q listening "$TMP/evil/perf.log" 2>/dev/null && break
  sleep 0.1
done
grep -q listening "$TMP/evil/memif.log" "$TMP/evil/perf.log" || fail "the attacker could not bind its sockets"
UROCE_PAIR=$pair timeout -s KILL 8 "$UROCE" perf --port memif --role client \
  --set eal.file_prefix=uroce-squat-$id-1 > "$TMP/client1.log" 2>&1
if grep -q connection "$TMP/evil/memif.log" "$TMP/evil/perf.log"; then
  fail "root's perf client connected to the attacker: $(cat "$TMP/evil/memif.log" "$TMP/evil/perf.log")"
else
  echo "ok: root's memif client and side channel stayed out of /tmp's shared names"
fi

echo "== 2. a runtime directory of another user is refused"
UROCE_RUNTIME_DIR=$TMP/evil timeout -s KILL 20 "$UROCE" perf --port memif --role client \
  --set eal.file_prefix=uroce-squat-$id-2 > "$TMP/client2.log" 2>&1
rc=$?
if [[ $rc -ne 0 ]] && grep -q "$TMP/evil belongs to uid 65534 with mode 0777" "$TMP/client2.log"; then
  echo "ok: $(grep -o "$TMP/evil belongs.*refusing it" "$TMP/client2.log" | head -1)"
else
  fail "UROCE_RUNTIME_DIR of another user (rc $rc): $(cat "$TMP/client2.log")"
fi

# start_server NAME SOCKET [PORT-ARGS]: a perf memif server until its memif
# socket listens (it waits for its memif peer before anything else). Seen
# with ss(8), not by connecting: DPDK 22.11's memif server panics on a
# connection closed before its handshake ("Error adding fd N epoll_ctl").
start_server() {
  local name=$1 sock=$2 port=$3
  timeout -s KILL 60 "$UROCE" perf --port memif --role server --control "$TMP/$name.control" \
    --set eal.file_prefix=uroce-squat-$id-$name --set "endpoint.a.port=$port" > "$TMP/$name.log" 2>&1 &
  server=$!
  pids+=("$server")
  for _ in $(seq 150); do
    ss -xlH 2>/dev/null | grep -qF " $sock " && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  fail "the $name server's memif socket $sock does not answer: $(cat "$TMP/$name.log")"
  return 1
}

echo "== 3. socket= without socket-abstract is a file, never an abstract name"
if start_server abstract "$TMP/x.sock" "net_memif0,role=server,id=0,socket=$TMP/x.sock"; then
  probe=$(as_attacker timeout 10 /usr/bin/python3 "$TMP/unix_squat.py" connect "$TMP/x.sock" --abstract)
  if [[ $probe == refused* ]] && [[ -S $TMP/x.sock ]]; then
    echo "ok: the abstract name is nobody's ($probe); the socket is a file"
  else
    fail "the attacker reached the server's abstract name ($probe), or there is no file"
  fi
  perf_pid=$(pgrep -P "$server" | head -1)
  kill -TERM "${perf_pid:-$server}"
  wait "$server"
  [[ -e $TMP/x.sock ]] && fail "the memif server's socket outlived its orderly exit"
fi

echo "== 4. a killed server's socket does not keep the next from starting"
port="net_memif0,role=server,id=0,socket=$TMP/y.sock,socket-abstract=no"
if start_server killed "$TMP/y.sock" "$port"; then
  perf_pid=$(pgrep -P "$server" | head -1)
  kill -KILL "${perf_pid:-$server}"
  wait "$server" 2>/dev/null
  for _ in $(seq 50); do [[ -n $perf_pid ]] && kill -0 "$perf_pid" 2>/dev/null || break; sleep 0.1; done
  [[ -n $perf_pid ]] && ! kill -0 "$perf_pid" 2>/dev/null || fail "the first server (pid '$perf_pid') is not gone"
  [[ -S $TMP/y.sock ]] || fail "kill -9 left no socket file (nothing to test)"
  if start_server again "$TMP/y.sock" "$port"; then
    echo "ok: the next server removed the stale socket and started"
    kill -KILL "$(pgrep -P "$server" | head -1)" "$server" 2>/dev/null
  fi
fi

if [[ $FAILS -ne 0 ]]; then
  echo "memif_squat_test: $FAILS failure(s)"
  exit 1
fi
echo "memif_squat_test: PASS"
