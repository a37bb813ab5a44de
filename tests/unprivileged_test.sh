#!/usr/bin/env bash
# uroce with no privileges: every program runs as user nobody (65534) with
# every capability dropped (setpriv: no effective, inheritable or bounding
# capability, no_new_privs), as in a CI container without root:
#   1. a verbs pair (Debian's ibv_rc_pingpong, unmodified) over net_memif,
#      each under `uroce exec` with its own configuration (process-private);
#   2. a libfabric pair (fi_pingpong -p uroce -e msg) the same way;
#   3. `uroce daemon` on an uplink that touches no kernel interface
#      (net_null: its frames go nowhere), and two ibv_rc_pingpong attached
#      to it (`uroce exec` with no configuration of its own).
# The binaries and libraries are copied into a directory nobody can read
# (Bazel's tree is root's). Needs root only to drop to nobody; no network
# beyond 127.0.0.1.
# Arguments: uroce, configs/pair-a.ini, configs/pair-b.ini,
# libibverbs.so.1, liburoce-fi.so.
set -uo pipefail
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: unprivileged_test needs root (to become nobody with setpriv)"
  exit 1
fi
TMP=$(mktemp -d /tmp/uroce-unprivileged.XXXXXX)
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
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
chmod 755 "$TMP"
mkdir -p "$TMP/bin" "$TMP/lib/verbs" "$TMP/lib/fabric"
install -m 0755 "$1" "$TMP/bin/uroce"
install -m 0644 "$2" "$TMP/pair-a.ini"
install -m 0644 "$3" "$TMP/pair-b.ini"
install -m 0755 "$4" "$TMP/lib/verbs/libibverbs.so.1"
install -m 0755 "$5" "$TMP/lib/fabric/liburoce-fi.so"
# What nobody may write: its home, its runtime directory (DPDK's files,
# memif sockets), the outputs.
mkdir -m 0700 "$TMP/home" "$TMP/run" "$TMP/out"
chown 65534:65534 "$TMP/home" "$TMP/run" "$TMP/out"
U=$TMP/bin/uroce

as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- \
    env -i PATH=/usr/bin:/bin HOME="$TMP/home" XDG_RUNTIME_DIR="$TMP/run" \
    UROCE_VERBS_LIB_DIR="$TMP/lib/verbs" UROCE_FABRIC_LIB_DIR="$TMP/lib/fabric" \
    ${UROCE_PAIR:+UROCE_PAIR=$UROCE_PAIR} ${UROCE_DAEMON:+UROCE_DAEMON=$UROCE_DAEMON} "$@"
}
listening() { ss -ltnH "sport = :$1" 2>/dev/null | grep -q .; }
wait_listening() {
  local port=$1 pid=$2 waited=0
  until listening "$port"; do
    sleep 0.1
    waited=$((waited + 1))
    if ! kill -0 "$pid" 2>/dev/null || [[ $waited -gt 600 ]]; then return 1; fi
  done
}

echo "== 0. as nobody, no capability is left"
caps=$(as_nobody grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status)
echo "$caps" | sed 's/^/  /'
if [[ $(as_nobody id -u) != 65534 ]] || echo "$caps" | grep -qv '0000000000000000$'; then
  fail "setpriv left a capability or the uid: $caps"
fi

# pair NAME PROGRAM "SERVER ARGS" "CLIENT ARGS" EXPECT [CONFIG_A CONFIG_B]:
# server first, the client once the server listens; both as nobody.
pair() {
  local name=$1 prog=$2 sargs=$3 cargs=$4 expect=$5 cfg_a=${6:-} cfg_b=${7:-}
  local port=$((20000 + RANDOM % 20000))
  local -a exec_a=("$U" exec) exec_b=("$U" exec)
  [[ -n $cfg_a ]] && exec_a+=(--config "$cfg_a")
  [[ -n $cfg_b ]] && exec_b+=(--config "$cfg_b")
  # shellcheck disable=SC2086  # the argument strings split into words
  as_nobody timeout -k 5 90 "${exec_a[@]}" -- "$prog" $sargs "$port" > "$TMP/out/$name.server" 2>&1 &
  local spid=$!
  pids+=("$spid")
  wait_listening "$port" "$spid"
  # shellcheck disable=SC2086
  as_nobody timeout -k 5 90 "${exec_b[@]}" -- "$prog" $cargs "$port" 127.0.0.1 > "$TMP/out/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -qE -- "$expect" "$TMP/out/$name.client" ||
    ! grep -qE -- "$expect" "$TMP/out/$name.server"; then
    fail "$name: server rc=$src client rc=$crc"
    echo "--- server:"; cat "$TMP/out/$name.server"; echo "--- client:"; cat "$TMP/out/$name.client"
    return 1
  fi
  echo "ok: $name: $(grep -E -- "$expect" "$TMP/out/$name.client" | tail -1 | cut -c1-100)"
}

echo "== 1. a verbs pair, process-private over net_memif"
export UROCE_PAIR="unprivileged-$$-verbs"
pair rc_pingpong ibv_rc_pingpong "-g 0 -c -s 4096 -n 200 -p" "-g 0 -c -s 4096 -n 200 -p" "iters in" \
  "$TMP/pair-a.ini" "$TMP/pair-b.ini"

echo "== 2. a libfabric pair (MSG endpoints), process-private over net_memif"
export UROCE_PAIR="unprivileged-$$-fabric"
pair fi_pingpong fi_pingpong "-p uroce -e msg -c -S 4096 -I 200 -B" "-p uroce -e msg -c -S 4096 -I 200 -P" \
  "^4k +200 +=200 " "$TMP/pair-a.ini" "$TMP/pair-b.ini"
unset UROCE_PAIR

echo "== 3. uroce daemon on net_null, two programs attached"
cat > "$TMP/daemon.ini" <<EOF
[eal]
hugepages = no
log_level = *:error
telemetry = no
file_prefix = uroce-unprivileged-$$
[daemon]
socket = $TMP/run/daemon.sock
[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
EOF
chmod 0644 "$TMP/daemon.ini"
as_nobody timeout -k 5 120 "$U" daemon --config "$TMP/daemon.ini" > "$TMP/out/daemon.log" 2>&1 &
dpid=$!
pids+=("$dpid")
for _ in $(seq 100); do [[ -S $TMP/run/daemon.sock ]] && break; sleep 0.1; done
if [[ ! -S $TMP/run/daemon.sock ]]; then
  fail "the daemon did not start as nobody"
  cat "$TMP/out/daemon.log"
else
  export UROCE_DAEMON=$TMP/run/daemon.sock
  pair daemon_rc_pingpong ibv_rc_pingpong "-g 0 -c -s 4096 -n 200 -p" "-g 0 -c -s 4096 -n 200 -p" "iters in"
  stats=$(as_nobody timeout 20 "$U" stats --daemon 2>&1)
  echo "$stats" | grep -E '^links' | sed 's/^/  /'
  grep -qE 'links now=[0-9]+ made=[1-9]' <<<"$stats" || fail "no local link between the two: $stats"
  unset UROCE_DAEMON
fi
kill -TERM "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null

[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
