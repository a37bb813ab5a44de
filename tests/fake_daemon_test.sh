#!/usr/bin/env bash
# Another user answering on a daemon socket cannot configure a root program.
# An unprivileged user (uid 65534, no groups) runs a fake daemon
# (attack/fake_daemon.py) on a socket in a directory of its own, whose
# DEVICES answer names an interface "../../../../../../../../../../tmp/PWNED-ID" (root's
# `uroce exec` would create it outside its scratch tree) and whose ATTACH
# grant asks EAL to load a shared object (`args = -d canary_driver.so`,
# `allow_driver_load = yes`); the object creates a file when loaded. Root
# runs `uroce exec -- ibv_devinfo` against it:
#   1. as is: the program refuses the daemon (its socket is uid 65534's;
#      made root's, its listener is still uid 65534's: SO_PEERCRED), no
#      directory is made outside the scratch tree, nothing is loaded;
#   2. with UROCE_DAEMON_UID=65534 (the user trusts that uid as its daemon):
#      the DEVICES name is still refused and so is the grant; nothing made,
#      nothing loaded.
# Root (setpriv, mount namespaces); no network.
#   args: UROCE FAKE_DAEMON_PY CANARY_SO
set -uo pipefail
UROCE=$1
FAKE=$2
CANARY=$3
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: fake_daemon_test needs root (setpriv, uroce exec's device files)"
  exit 1
fi
id=$$
TMP=$(mktemp -d /tmp/uroce-fake-daemon-test.XXXXXX)
EVIL=/tmp/uroce-evil.$id
PWNED=/tmp/PWNED-$id
CANARY_FILE=/tmp/CANARY-$id
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
fake_pid=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  # $fake_pid is timeout(1) (setpriv execs it): its child first, since
  # SIGKILL is not passed on.
  if [[ -n $fake_pid ]]; then
    pkill -KILL -P "$fake_pid" 2>/dev/null
    kill -KILL "$fake_pid" 2>/dev/null
  fi
  rm -rf "$TMP" "$EVIL" "$PWNED" "$CANARY_FILE" "${LIBDIR:-}"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# What the attacker may read: its own copies (the runfiles are under root's
# home, which uid 65534 cannot enter).
chmod 755 "$TMP"
# The shared object sits where EAL agrees to load from (DPDK refuses a path
# through a world-writable directory such as /tmp): an attacker's home, say.
LIBDIR=$(mktemp -d "${TEST_TMPDIR:-/run}/uroce-canary.XXXXXX")
chmod 755 "$LIBDIR"
install -m 0755 "$CANARY" "$LIBDIR/canary_driver.so"
install -m 0644 "$FAKE" "$TMP/fake_daemon.py"
mkdir -m 0755 "$EVIL" && chown 65534:65534 "$EVIL"
gid=00000000000000000000ffff0a4d0001
printf 'device uroce0 netdev=../../../../../../../../../../tmp/PWNED-%s gids=%s\n' "$id" "$gid" > "$TMP/devices"
cat > "$TMP/grant" <<GRANT
OK slot=1
; handed out by uroce daemon: slot 1
[eal]
hugepages = no
log_level = *:error
telemetry = no
allow_driver_load = yes
args = -d $LIBDIR/canary_driver.so
[engine]
progress = inline
[endpoint.eth0]
port = shm:daemon:0
gids = 10.77.0.1
mac = 02:00:00:00:77:01
mtu = 1500
loopback = no
qpn_range = 65536+65536
neighbors = 10.77.0.1=02:00:00:00:77:01
link_timeout_ms = 10000
GRANT
chmod 644 "$TMP/devices" "$TMP/grant"
setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 120 /usr/bin/python3 "$TMP/fake_daemon.py" \
  "$EVIL/uroce.sock" "$TMP/devices" "$TMP/grant" "$EVIL/log" > "$TMP/fake.out" 2>&1 &
fake_pid=$!
for _ in $(seq 100); do [[ -S $EVIL/uroce.sock ]] && break; sleep 0.1; done
[[ -S $EVIL/uroce.sock ]] || { echo "FAIL: the fake daemon did not start: $(cat "$TMP/fake.out")"; exit 1; }

# run CASE [ENV...]: root's uroce exec -- ibv_devinfo against the fake daemon.
run() {
  local name=$1
  shift
  env UROCE_DAEMON="$EVIL/uroce.sock" UROCE_CANARY="$CANARY_FILE" "$@" \
    timeout -k 5 60 "$UROCE" exec -- ibv_devinfo > "$TMP/$name.out" 2>&1
  echo "rc=$?" >> "$TMP/$name.out"
  [[ -e $PWNED ]] && fail "$name: root made $PWNED, outside its scratch tree"
  [[ -e $CANARY_FILE ]] && fail "$name: the program loaded the fake daemon's shared object"
  grep -q uroce0 "$TMP/$name.out" && fail "$name: the program lists the fake daemon's device: $(cat "$TMP/$name.out")"
}

echo "== 1. a daemon of another user is refused"
run refused
if grep -q "$EVIL/uroce.sock belongs to uid 65534, not root or this user" "$TMP/refused.out"; then
  echo "ok: $(grep -o "$EVIL/uroce.sock belongs.*refusing it" "$TMP/refused.out" | head -1)"
else
  fail "no refusal of the fake daemon's socket: $(cat "$TMP/refused.out")"
fi
# The same socket file made root's (as a socket mounted into a container
# may be): who listens on it still counts (SO_PEERCRED).
chown 0:0 "$EVIL/uroce.sock"
run refused_by_credentials
if grep -q "uroce daemon at $EVIL/uroce.sock is run by uid 65534 (pid [0-9]*), not root or this user" \
  "$TMP/refused_by_credentials.out"; then
  echo "ok: $(grep -o 'uroce daemon at.*refusing its configuration' "$TMP/refused_by_credentials.out" | head -1)"
else
  fail "no refusal of the fake daemon by its credentials: $(cat "$TMP/refused_by_credentials.out")"
fi
chown 65534:65534 "$EVIL/uroce.sock"

echo "== 2. trusted by uid (UROCE_DAEMON_UID=65534): its names and its grant are still refused"
run trusted UROCE_DAEMON_UID=65534
if grep -q "refusing the configuration it handed out: line [0-9]* is not what uroce daemon writes: 'allow_driver_load = yes'" \
  "$TMP/trusted.out"; then
  echo "ok: $(grep -o 'refusing the configuration.*' "$TMP/trusted.out" | head -1)"
else
  fail "the fake daemon's grant was not refused: $(cat "$TMP/trusted.out")"
fi
grep -q "request: DEVICES" "$EVIL/log" || fail "uroce exec did not ask the trusted fake daemon for its devices: $(cat "$EVIL/log")"
grep -q "request: ATTACH" "$EVIL/log" || fail "the program did not attach to the trusted fake daemon: $(cat "$EVIL/log")"

if [[ $FAILS -ne 0 ]]; then
  echo "--- fake daemon's log:"; cat "$EVIL/log"
  echo "fake_daemon_test: $FAILS failure(s)"
  exit 1
fi
echo "fake_daemon_test: PASS"
