#!/bin/bash
# Debian's ibv_devinfo and ibv_devices, unmodified, over uroce's
# libibverbs.so.1: uroce devices from the configuration, port state and MTU,
# RoCEv2 GIDs from the port's IPv4 and IPv6 addresses.
set -uo pipefail
UROCE="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
expect() {  # expect FILE TEXT: a fixed-text line
  grep -qF -- "$2" "$1" || fail "'$2' missing from $(basename "$1")"
}

cat > "$TMP/ring.ini" <<INI
[eal]
log_level = *:error
telemetry = no
[endpoint.a]
port = ring:devinfo:a
ipv4 = 10.99.0.1
ipv6 = fd00:99::1
[endpoint.b]
port = ring:devinfo:b
ipv4 = 10.99.0.2
mtu = 9000
INI

timeout 60 "$UROCE" exec --config "$TMP/ring.ini" -- ibv_devinfo -v > "$TMP/devinfo" 2>&1 || fail "ibv_devinfo -v exit $?"
cat "$TMP/devinfo"
expect "$TMP/devinfo" $'hca_id:\turoce0'
expect "$TMP/devinfo" $'hca_id:\turoce1'
expect "$TMP/devinfo" "PORT_ACTIVE (4)"
expect "$TMP/devinfo" $'link_layer:\t\tEthernet'
expect "$TMP/devinfo" $'active_mtu:\t\t1024 (3)'   # MTU 1500, like rxe
expect "$TMP/devinfo" $'active_mtu:\t\t4096 (5)'   # MTU 9000
expect "$TMP/devinfo" $'GID[  0]:\t\t::ffff:10.99.0.1, RoCE v2'
expect "$TMP/devinfo" $'GID[  1]:\t\tfd00:99::1, RoCE v2'
expect "$TMP/devinfo" $'GID[  0]:\t\t::ffff:10.99.0.2, RoCE v2'
expect "$TMP/devinfo" "atomic_cap:			ATOMIC_HCA (1)"
[[ $(grep -c "GID\[" "$TMP/devinfo") -eq 3 ]] || fail "expected exactly 3 GIDs"

timeout 60 "$UROCE" exec --config "$TMP/ring.ini" -- ibv_devinfo -l > "$TMP/list" 2>&1 || fail "ibv_devinfo -l exit $?"
expect "$TMP/list" "2 HCAs found:"

timeout 60 "$UROCE" exec --config "$TMP/ring.ini" -- ibv_devinfo -d uroce1 > "$TMP/one" 2>&1 || fail "ibv_devinfo -d exit $?"
expect "$TMP/one" $'hca_id:\turoce1'
grep -q "uroce0" "$TMP/one" && fail "-d uroce1 printed uroce0"

# The process leaves no EAL runtime directory behind (EAL 22.11 would leave
# one per process, for ever): the library removes it at exit. With telemetry
# on (the default), EAL makes it for its socket.
prefix="uroce-devinfo-test-$$"
sed "s/^telemetry = no$/file_prefix = $prefix/" "$TMP/ring.ini" > "$TMP/prefix.ini"
grep -q "^file_prefix = $prefix$" "$TMP/prefix.ini" || fail "the test could not set file_prefix"
if [[ $(id -u) -eq 0 ]]; then rundir="/var/run/dpdk/$prefix"; else rundir="${XDG_RUNTIME_DIR:-/tmp}/dpdk/$prefix"; fi
timeout 60 "$UROCE" exec --config "$TMP/prefix.ini" -- ibv_devinfo -d uroce0 > "$TMP/prefix" 2>&1 ||
  fail "ibv_devinfo with a file prefix exit $?"
expect "$TMP/prefix" "PORT_ACTIVE (4)"  # it opened the device, so the library started EAL
[[ -e $rundir ]] && fail "EAL's runtime directory $rundir is left after the program ended"

# No configuration and no daemon: no devices, one clear message that says how
# to start a daemon, the program's own error.
lib=$(dirname "$(readlink -f "$(dirname "$UROCE")/../api/verbs/libibverbs.so.1" 2>/dev/null || true)")
# A sanitizer build of the library needs its runtime preloaded into Debian's
# program (as `uroce exec` does); nothing in a normal build.
runtime=$(ldd "$lib/libibverbs.so.1" 2>/dev/null | awk '/lib[at]san\.so/ {print $3; exit}')
out=$(env -u UROCE_CONFIG UROCE_CONFIG= UROCE_DAEMON="/tmp/uroce-no-daemon-$$.sock" LD_LIBRARY_PATH="$lib" \
        ${runtime:+LD_PRELOAD=$runtime ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0} timeout 30 ibv_devinfo 2>&1)
rc=$?
echo "$out"
[[ $rc -ne 0 ]] || fail "ibv_devinfo without UROCE_CONFIG exited 0"
grep -q "UROCE_CONFIG is not set" <<<"$out" || fail "no message about UROCE_CONFIG"
grep -q "no uroce daemon at /tmp/uroce-no-daemon-$$.sock" <<<"$out" || fail "no message about the missing daemon"
grep -q "uroce daemon --config" <<<"$out" || fail "the message does not say how to start a daemon"
grep -q "No IB devices found" <<<"$out" || fail "ibv_devinfo did not see an empty list"
[[ $(grep -c "UROCE_CONFIG" <<<"$out") -eq 1 ]] || fail "the message was not printed once"

# A configuration with a bad key: no devices, the key named.
printf '[eal]\nbogus = 1\n' > "$TMP/bad.ini"
out=$(timeout 30 "$UROCE" exec --config "$TMP/bad.ini" -- ibv_devinfo 2>&1)
grep -q "bogus" <<<"$out" || fail "a bad key was not named: $out"

[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
