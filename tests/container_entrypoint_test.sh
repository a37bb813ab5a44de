#!/usr/bin/env bash
# The container recipe's entrypoint (tools/container/entrypoint.sh) in a
# network namespace that stands for a container with one NIC and one
# address: with no configuration at all it starts `uroce daemon` on that
# interface (kernel:IFNAME, the kernel's address), runs the job's command,
# whose processes each open the first RDMA device and dial the host's IP
# (ibv_rc_pingpong, then rping), stops the daemon, and exits with the job's
# status (also for a job that fails).
#   args: UROCE ENTRYPOINT
set -uo pipefail
UROCE=$1
ENTRY=$2
id=$$
ns=uroce-c$id
ns_peer=uroce-c$id-p
TMP=$(mktemp -d /tmp/uroce-entry-test.XXXXXX)
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  ip netns del "$ns" 2>/dev/null || true
  ip netns del "$ns_peer" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: container_entrypoint_test needs root to make network namespaces"
  exit 1
fi
ip netns add "$ns" && ip netns add "$ns_peer" &&
  ip link add eth0 netns "$ns" type veth peer name eth0 netns "$ns_peer" || {
  echo "FAIL: cannot make network namespaces and a veth pair here"
  exit 1
}
ip -n "$ns" link set lo up
ip -n "$ns" link set eth0 up
ip -n "$ns_peer" link set eth0 up
ip -n "$ns" addr add 10.74.0.1/24 dev eth0
ip -n "$ns" addr add fd00:74::1/64 dev eth0 nodad
[[ -e /etc/uroce/uroce.ini ]] && { echo "FAIL: /etc/uroce/uroce.ini exists here; the test needs none"; exit 1; }

# The job: a server and a client, both on the first RDMA device, the client
# dialing the host's IP; the server is ready once its TCP port listens.
cat > "$TMP/job.sh" <<'EOF'
set -u
wait_port() { for _ in $(seq 100); do ss -ltnH "sport = :$1" | grep -q . && return 0; sleep 0.1; done; return 1; }
ibv_rc_pingpong -g 0 -n 500 -p 18600 > "$1/pp.server" 2>&1 &
s=$!
wait_port 18600 || exit 10
ibv_rc_pingpong -g 0 -n 500 -p 18600 10.74.0.1 > "$1/pp.client" 2>&1 || exit 11
wait $s || exit 12
rping -s -a 10.74.0.1 -p 18601 -C 10 > "$1/rping.server" 2>&1 &
s=$!
for i in $(seq 20); do
  rping -c -a 10.74.0.1 -p 18601 -C 10 -v > "$1/rping.client" 2>&1 && break
  grep -qE "REJECTED|Connection refused|Unexpected CM event" "$1/rping.client" || exit 13
  sleep 0.5
done
wait $s || exit 14
grep -q "rdma-ping-9:" "$1/rping.client" || exit 15
EOF

export UROCE UROCE_DAEMON=$TMP/uroce.sock
unset UROCE_CONFIG UROCE_CONFIG_FILE UROCE_INTERFACE
timeout -k 5 120 ip netns exec "$ns" "$ENTRY" -- bash "$TMP/job.sh" "$TMP" > "$TMP/entry.log" 2>&1
rc=$?
cat "$TMP/entry.log"
if [[ $rc -ne 0 ]]; then
  fail "the job failed through the entrypoint: status $rc"
  for f in pp.server pp.client rping.server rping.client; do [[ -f $TMP/$f ]] && { echo "--- $f"; cat "$TMP/$f"; }; done
else
  echo "ok: ibv_rc_pingpong: $(grep -m1 "iters in" "$TMP/pp.client")"
  echo "ok: rping: $(tail -1 "$TMP/rping.client" | cut -c1-60)"
fi
grep -q "uroce0 on net_af_xdp on eth0 (1 queue), shared with the kernel" "$TMP/entry.log" ||
  grep -q "uroce0 on net_af_packet on eth0" "$TMP/entry.log" || fail "the daemon did not take eth0"
grep -q "addresses 10.74.0.1, fd00:74::1" "$TMP/entry.log" || fail "the daemon did not use the interface's addresses"
grep -q "uroce daemon: stopped; mbufs back" "$TMP/entry.log" || fail "the daemon was not stopped after the job"
[[ -S $UROCE_DAEMON ]] && fail "the control socket is still there"

# A failing job: its status comes back, the daemon stops all the same.
timeout -k 5 60 ip netns exec "$ns" "$ENTRY" -- sh -c 'exit 7' > "$TMP/entry2.log" 2>&1
rc=$?
[[ $rc -eq 7 ]] || { cat "$TMP/entry2.log"; fail "a job's status 7 came back as $rc"; }
grep -q "uroce daemon: stopped" "$TMP/entry2.log" || fail "the daemon was not stopped after a failing job"

[[ $FAILS -eq 0 ]] || { echo "container_entrypoint_test: $FAILS failure(s)"; exit 1; }
echo "container_entrypoint_test: PASS"
