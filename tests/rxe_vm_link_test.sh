#!/usr/bin/env bash
# Smoke test (b) of the rxe guest harness: the link between the host's network
# namespace and the guest carries what the interop tests will need, proven
# without uroce. Uses the start / exec / spawn / wait / stop interface that the
# interop tests will use.
#
# What it proves, and why this way: one netdev takes one rxe device, so kernel
# rxe cannot talk to a second rxe of its own over this link, and uroce's verbs
# library does not exist yet. So the guest's real `ibv_rc_pingpong` client talks
# to a stand-in on the host (rxe_vm_pingpong_peer.py) that plays only the TCP
# half of the server: the QP addresses cross the tap over TCP exactly as they
# will with the real server, then the guest's rxe sends RC SEND frames to the
# made-up QPN at the host's address. Nothing there speaks RoCE, so the client
# retries until the guest's time limit ends it (status 124; rxe retries without
# end at retry_cnt 7). The capture must hold those frames, for IPv4 and for
# IPv6 GIDs, each with the made-up QPN, and `uroce dump` must find their ICRCs
# right. Also checked: ping both ways of addressing, and that exec returns the
# guest command's output and exit status.
# Arguments: rxe_vm.py, rxe_vm_pingpong_peer.py, uroce.
set -uo pipefail
harness=$1 peer=$2 uroce=$3
source "$(dirname "$0")/rxe_vm_lib.sh"
command -v tshark >/dev/null || fail "tshark is not installed (tools/setup installs it)"
command -v ping >/dev/null || fail "ping is not installed (Debian package iputils-ping)"
export HOME=$tmp  # tshark keeps a profile under $HOME

state=$tmp/vm
ok=0
cleanup() {
  # Always power off and remove the namespace; keep the artifacts on failure.
  if [[ $ok -eq 1 ]]; then
    rxe_vm stop --state "$state"
  else
    rxe_vm stop --state "$state" --save-to "$artifacts" --label link
  fi
}
trap cleanup EXIT

# --lifetime: should this script die without stopping it, qemu still ends.
env_lines=$(rxe_vm start --state "$state" --lifetime 600) || fail "the guest did not start (see above)"
eval "$env_lines"
echo "$env_lines"
in_ns() { ip netns exec "$RXE_VM_NETNS" "$@"; }

# exec: output and exit status come back.
out=$(rxe_vm exec --state "$state" -- 'echo hello from $(uname -r); exit 7')
status=$?
[[ $status -eq 7 ]] || fail "exec returned status $status, expected the guest's 7"
[[ $out == "hello from "* ]] || fail "exec returned '$out'"

in_ns ping -c 2 -W 5 "$RXE_VM_GUEST_IP" || fail "no ping reply from $RXE_VM_GUEST_IP"
in_ns ping -6 -c 2 -W 5 "$RXE_VM_GUEST_IP6" || fail "no ping reply from $RXE_VM_GUEST_IP6"

devinfo=$(rxe_vm exec --state "$state" -- ibv_devinfo -v -d rxe0) ||
  fail "ibv_devinfo failed in the guest"

# try FAMILY GUEST_ADDR HOST_ADDR QPN: one made-up connection, see above. RoCE
# uses the FAMILY's addresses (the GIDs); the QP numbers go over IPv4 TCP either
# way, as with the real programs, whose servers listen on 0.0.0.0 only.
try() {
  local family=$1 guest_addr=$2 host_addr=$3 qpn=$4 idx peer_out client_out status
  idx=$(gid_index "$devinfo" "$([[ $family == 4 ]] && echo "::ffff:")$guest_addr")
  [[ -n $idx ]] || fail "no RoCE v2 GID for $guest_addr in rxe0's table"
  peer_out=$tmp/peer$family.out
  in_ns timeout 60 python3 "$peer" "$RXE_VM_HOST_IP" 18515 "$host_addr" "$qpn" 0x123 30 \
    >"$peer_out" 2>&1 &
  local peer_pid=$!
  for _ in $(seq 50); do grep -q listening "$peer_out" && break; sleep 0.1; done
  grep -q listening "$peer_out" || fail "the pingpong stand-in did not start: $(cat "$peer_out")"
  rxe_vm spawn --state "$state" --job rc$family --timeout 5 -- \
    ibv_rc_pingpong -d rxe0 -g "$idx" -n 1 -s 64 "$RXE_VM_HOST_IP" ||
    fail "spawning ibv_rc_pingpong in the guest failed"
  client_out=$(rxe_vm wait --state "$state" --job rc$family --timeout 30)
  status=$?
  echo "$client_out"
  wait "$peer_pid" || fail "the stand-in failed: $(cat "$peer_out")"
  cat "$peer_out"
  [[ $status -eq 124 ]] ||
    fail "ibv_rc_pingpong (IPv$family) ended with status $status, expected 124 (killed at its time limit while retrying)"
  grep -q "remote address: .*QPN $(printf '0x%06x' "$qpn")" <<<"$client_out" ||
    fail "the client did not take the stand-in's QP address over TCP"
}
try 4 "$RXE_VM_GUEST_IP" "$RXE_VM_HOST_IP" 0xabc04
try 6 "$RXE_VM_GUEST_IP6" "$RXE_VM_HOST_IP6" 0xabc06

# Stop now: tcpdump closes the capture file when the guest is gone.
rxe_vm stop --state "$state" --save-to "$tmp/saved" --label link ||
  fail "stopping the guest failed"
capture=$tmp/saved/link.pcap
[[ -s $capture ]] || fail "no capture was kept"

# Not ICMP: the host kernel answers each frame with "port unreachable", which
# quotes the frame's headers, and the filter would count those too.
count() {
  tshark -r "$capture" -Y "($1) && !icmp && !icmpv6" 2>/dev/null | wc -l
}
# RC SEND Only (opcode 4) to the made-up QPNs, from the guest to the host.
v4=$(count "ip.src == $RXE_VM_GUEST_IP && ip.dst == $RXE_VM_HOST_IP && udp.dstport == 4791 && infiniband.bth.opcode == 4 && infiniband.bth.destqp == 0xabc04")
v6=$(count "ipv6.src == $RXE_VM_GUEST_IP6 && ipv6.dst == $RXE_VM_HOST_IP6 && udp.dstport == 4791 && infiniband.bth.opcode == 4 && infiniband.bth.destqp == 0xabc06")
echo "RC SEND frames on the tap: $v4 over IPv4, $v6 over IPv6"
[[ $v4 -ge 2 ]] || fail "expected RC SENDs (first and retries) over IPv4 in the capture, found $v4"
[[ $v6 -ge 2 ]] || fail "expected RC SENDs (first and retries) over IPv6 in the capture, found $v6"
summary=$("$uroce" dump "$capture" | tail -n 1) ||
  fail "uroce dump finds bad frames in the capture: $summary"
echo "uroce dump: $summary"
roce=$(sed -n 's/.*roce \([0-9]*\),.*/\1/p' <<<"$summary")
[[ ${roce:-0} -ge $((v4 + v6)) ]] || fail "uroce dump sees $roce RoCE frames, tshark $((v4 + v6))"
ok=1
echo "PASS: ping both ways, TCP over the tap, rxe RC frames over IPv4 and IPv6 captured with right ICRCs"
