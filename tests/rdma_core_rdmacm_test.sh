#!/usr/bin/env bash
# rdma-core 44's own rdma_cm tests (test_rdmacm, from python3-pyverbs) over
# uroce, as a host with a NIC runs them: a `uroce daemon` on a veth interface
# in a network namespace of this test's own (its peer in a second one, so the
# link is up), and the suite under `uroce exec` attached to it. The suite
# finds the device's kernel interface and address (device/net, `ip addr`),
# opens the device, then forks a passive and an active process for each test
# (multiprocessing's fork): each child attaches to the daemon as a process of
# its own (ibv_fork_init(3)). Every test passes or skips for a reason that
# tests/rdma_core_suite.py knows.
# Needs root (namespaces, the daemon on a kernel interface). Every process runs
# under `timeout`, within Bazel's 300 s for a medium test; the namespaces go
# on every exit path.
#   args: UROCE RUNNER
set -uo pipefail
UROCE=$1
RUNNER=$(readlink -f "$2")
SRC=/usr/share/doc/rdma-core/tests
PYTHON=/usr/bin/python3  # pyverbs is built for Debian's python3
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: rdma_core_rdmacm_test needs root to make network namespaces"
  exit 1
fi
if [[ ! -f $SRC/run_tests.py ]] || ! "$PYTHON" -c 'import pyverbs' 2>/dev/null; then
  echo "FAIL: python3-pyverbs is not installed (tools/setup installs it)"
  exit 1
fi
id=$$
ns_a=uroce-cm$id-a
ns_b=uroce-cm$id-b
if_a=ucm$id-a
if_b=ucm$id-b
TMP=$(mktemp -d /tmp/uroce-rdmacm.XXXXXX)
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then
    pkill -KILL -P "$daemon_pid" 2>/dev/null
    kill -KILL "$daemon_pid" 2>/dev/null
  fi
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A namespace of that name left by a killed run of the same pid goes first.
ip netns del "$ns_a" 2>/dev/null
ip netns del "$ns_b" 2>/dev/null
ip netns add "$ns_a" && ip netns add "$ns_b" &&
  ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b" || {
  echo "FAIL: cannot make network namespaces and a veth pair here"
  exit 1
}
for side in "$ns_a $if_a 1" "$ns_b $if_b 2"; do
  read -r ns ifc n <<<"$side"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$ifc" up
  ip -n "$ns" addr add "10.76.0.$n/24" dev "$ifc"
done
cat > "$TMP/daemon.ini" <<INI
[eal]
lcores = 0
hugepages = no
memory = 256
file_prefix = uroce-rdmacm-test-$id
log_level = *:error
telemetry = no
[daemon]
socket = $TMP/uroce.sock
[endpoint.eth0]
port = kernel:$if_a
INI
ip netns exec "$ns_a" timeout -k 5 280 "$UROCE" daemon --config "$TMP/daemon.ini" > "$TMP/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 200); do
  grep -q "control socket" "$TMP/daemon.log" 2>/dev/null && [[ -S $TMP/uroce.sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.05
done
if ! [[ -S $TMP/uroce.sock ]]; then
  cat "$TMP/daemon.log"
  echo "FAIL: the daemon did not start"
  exit 1
fi

WORK="$TMP/suite"
mkdir -p "$WORK"
cp -r "$SRC" "$WORK/tests"
gunzip -f "$WORK"/tests/*.gz
status=0
UROCE_DAEMON=$TMP/uroce.sock ip netns exec "$ns_a" timeout -k 10 240 \
  "$UROCE" exec -- "$PYTHON" "$RUNNER" "$WORK/tests" uroce0 0 test_rdmacm || status=1
echo "== the daemon"
UROCE_DAEMON=$TMP/uroce.sock "$UROCE" stats --daemon "$TMP/uroce.sock" | head -20
if ((status != 0)); then
  echo "== the daemon's log"
  tail -30 "$TMP/daemon.log"
fi
exit $status
