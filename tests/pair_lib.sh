# Shared by the shell tests that run a server program and a client program
# against each other (verbs_common.sh and the tests that source it,
# daemon_test.sh, daemon_kernel_test.sh): waiting for the server, starting an
# rdma_cm client again that came too early, and the verdict on the pair;
# the verdict on a `uroce perf --verify` pair (tap_test.sh, vhost_test.sh,
# veth_test.sh); two network namespaces joined by a veth pair
# (fi_pingpong_veth_test.sh, verbs_veth_test.sh). For wait_for_server,
# cm_client_should_retry and pair_verdict the caller
# defines `fail` (counts a failure) and `listening PORT`, and keeps the
# outputs in $TMP/NAME.server and $TMP/NAME.client.

# wait_for_server PORT SERVER_PID LIMIT_S: returns once something listens on
# PORT, the server has exited, or LIMIT_S seconds have passed.
wait_for_server() {
  local port=$1 spid=$2 limit=$3 waited=0
  until listening "$port"; do
    sleep 0.1
    waited=$((waited + 1))
    if ! kill -0 "$spid" 2>/dev/null || [[ $waited -gt $((limit * 10)) ]]; then break; fi
  done
}

# cm_client_should_retry NAME CLIENT_RC SERVER_PID: true (after half a
# second) when the client failed only because the server had not listened
# yet: rdma_cm's connection was rejected while the server still runs.
cm_client_should_retry() {
  local name=$1 crc=$2 spid=$3
  [[ $crc -ne 0 ]] || return 1
  kill -0 "$spid" 2>/dev/null || return 1
  grep -qE "REJECTED|Connection refused|Unexpected CM event" "$TMP/$name.client" || return 1
  sleep 0.5
}

# pair_verdict NAME SERVER_RC CLIENT_RC EXPECT [server] [NOTE]: "ok" with the
# client's last line that shows EXPECT when both exited 0 and the client's
# output (with `server`, the server's too) shows it; otherwise a failure
# (NOTE added to it) and both outputs.
pair_verdict() {
  local name=$1 src=$2 crc=$3 expect=$4 check_server=${5:-} note=${6:-}
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -q -- "$expect" "$TMP/$name.client" ||
    { [[ $check_server == server ]] && ! grep -q -- "$expect" "$TMP/$name.server"; }; then
    fail "$name: server rc=$src client rc=$crc$note"
    echo "--- server:"; cat "$TMP/$name.server"; echo "--- client:"; cat "$TMP/$name.client"
    return 1
  fi
  echo "ok: $name: $(grep -- "$expect" "$TMP/$name.client" | tail -1 | cut -c1-100)"
}

# perf_pair_verdict DIR CLIENT_LOG SERVER_LOG CLIENT_RC SERVER_RC: the end of
# a `uroce perf --verify` pair whose logs are DIR/CLIENT_LOG and
# DIR/SERVER_LOG. Prints both, then ends the test (exit 1) unless both sides
# exited 0, the client verified every byte, and each side's shutdown line
# says every mbuf came back to its pools.
perf_pair_verdict() {
  local dir=$1 client=$2 server=$3 crc=$4 src=$5
  echo "--- $client"; cat "$dir/$client"
  echo "--- $server"; cat "$dir/$server"
  [[ $crc -eq 0 && $src -eq 0 ]] || { echo "FAIL: client exit $crc, server exit $src"; exit 1; }
  grep -q 'every byte verified' "$dir/$client" || { echo "FAIL: not verified"; exit 1; }
  for log in "$client" "$server"; do
    grep -qE 'mbufs back in the pools: ([0-9]+) of \1;' "$dir/$log" || { echo "FAIL: $log: mbufs leaked"; exit 1; }
  done
}

# veth_namespaces_up TEST VETH NS_A NS_B IF_A IF_B: two network namespaces
# joined by a veth pair (tools/veth), with the kernel's own addresses
# 10.79.0.1 and 10.79.0.2 on its ends for the programs' TCP side channel.
# Ends the test (exit 1) where that cannot be done: not root, or no
# namespaces allowed here.
veth_namespaces_up() {
  local test=$1 veth=$2 ns_a=$3 ns_b=$4 if_a=$5 if_b=$6 out
  if [[ $(id -u) -ne 0 ]]; then
    echo "FAIL: $test needs root to make network namespaces"
    exit 1
  fi
  if ! out=$("$veth" up "$ns_a" "$ns_b" "$if_a" "$if_b" 2>&1); then
    echo "$out"
    echo "FAIL: cannot make network namespaces and a veth pair here; this test needs them"
    exit 1
  fi
  ip -n "$ns_a" addr add 10.79.0.1/24 dev "$if_a"
  ip -n "$ns_b" addr add 10.79.0.2/24 dev "$if_b"
}
