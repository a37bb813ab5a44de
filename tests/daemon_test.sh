#!/usr/bin/env bash
# `uroce daemon`: one host device shared by every process. A network
# namespace stands for a host; its uplink is one end of a
# veth pair (net_af_packet), whose other end is in a second namespace. In the
# host namespace:
#   1. a second daemon on the same socket refuses to start;
#   2. programs with no configuration of their own (`uroce exec -- PROG`)
#      see the daemon's device: ibv_devices, and ibv_devinfo -v with the
#      uplink's IPv4 and IPv6 addresses as RoCE v2 GIDs;
#   3. two processes talk through the host's own address: ibv_rc_pingpong
#      over IPv4 and IPv6 GIDs, ib_write_bw and ib_read_lat (perftest), each
#      pair linked straight by the daemon (its stats say so), and a pair
#      that takes no links (UROCE_LOCAL_LINKS=no) through the switch;
#   4. rdma_cm between two processes on the host (rping IPv4/IPv6, ucmatose,
#      rdma_server/rdma_client), and a REQ nobody listens for rejected;
#   5. two hosts, a daemon in each namespace: rping across the veth (ARP
#      answered by each daemon for its own address, and asked by the
#      client's daemon in its own words);
#   6. kill -9 of one of four processes: its local peer (connected to it)
#      ends within 2 s with its work flushed, the other two finish (over
#      their link), and the daemon releases the killed one and its link
#      within a second;
#      the same for rping (rdma_cm: DISCONNECTED) and fi_pingpong (a
#      libfabric endpoint's QP);
#   7. the wire cannot speak as the host: root in the peer namespace writes
#      RoCE frames with the host's own source addresses (and with addresses
#      no host has) to a QPN of an attached process; the daemon counts them
#      (STATS drops line) and the process gets none;
#   8. a client claiming pid 1 in its ATTACH shows in STATS with its real
#      pid, uid and gid (SO_PEERCRED);
#   9. a member of the daemon's group (uid 65534) attaches at most
#      max_processes_per_uid times, holds at most 4 sessions waiting to
#      attach, listens on at most max_listens_per_uid ports, keeps at most
#      max_peers_per_uid PEER records, cannot lock root out of STATS, sees
#      only its own processes there, and cannot poison the LAN's neighbour
#      tables (its ARP request with another sender MAC leaves as the
#      switch's own question);
#  10. a released slot is not handed out again for slot_quarantine_ms
#      (260 attach/detach steps never get it), and free slots are drawn at
#      random;
#  11. SIGTERM to the daemon during a long run: both processes stop within
#      seconds (their QPs flushed to the error state), the daemon exits 0 with
#      every mbuf back in its pool and its socket removed.
# Needs root (namespaces). Every process runs under `timeout`; the namespaces
# go on every exit path. No assertion on speed.
#   args: UROCE VETH_TOOL [RAWSEND [SLOT_WALK [FLOOD [INJECTOR]]]]  (default:
#   the scripts in attack/ beside this script's source; without INJECTOR,
#   attack/frame_injector.cc built, the ARP poisoning case is skipped)
set -uo pipefail
UROCE=$1
VETH=$2
RAWSEND=${3:-$(dirname "$(readlink -f "$0")")/attack/rawsend.py}
SLOT_WALK=${4:-$(dirname "$(readlink -f "$0")")/attack/slot_walk.py}
FLOOD=${5:-$(dirname "$(readlink -f "$0")")/attack/daemon_flood.py}
INJECTOR=${6:-}
id=$$
ns=uroce-d$id-h
ns_peer=uroce-d$id-p
if_h=ud$id-h
if_p=ud$id-p
TMP=$(mktemp -d /tmp/uroce-daemon-test.XXXXXX)  # short: socket paths have 108 bytes
SOCK=$TMP/uroce.sock
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
source "$(dirname "$0")/pair_lib.sh"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  "$VETH" down "$ns" "$ns_peer" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: daemon_test needs root to make network namespaces"
  exit 1
fi
if ! out=$("$VETH" up "$ns" "$ns_peer" "$if_h" "$if_p" 2>&1); then
  echo "$out"
  echo "FAIL: cannot make network namespaces and a veth pair here; this test needs them"
  exit 1
fi

cat > "$TMP/daemon.ini" <<EOF
[eal]
lcores = 0
hugepages = no
memory = 256
file_prefix = uroce-daemon-test-$id
log_level = *:error
telemetry = no
[daemon]
socket = $SOCK
max_processes_per_uid = 4
max_peers_per_uid = 100
[endpoint.eth0]
port = net_af_packet0,iface=$if_h,qpairs=1
ipv4 = 10.76.0.1
ipv6 = fd00:76::1
mtu = 1500
EOF

# A command in the host namespace. An array, not a function: started with &,
# $! is then the program itself (ip netns exec and timeout exec it), so that
# signals reach it.
IN_NS=(ip netns exec "$ns")
export UROCE_DAEMON=$SOCK
unset UROCE_CONFIG

start_daemon() {
  "${IN_NS[@]}" timeout -k 5 300 "$UROCE" daemon --config "$TMP/daemon.ini" > "$TMP/daemon.log" 2>&1 &
  daemon_pid=$!
  pids+=("$daemon_pid")
  for _ in $(seq 100); do
    grep -q "control socket" "$TMP/daemon.log" 2>/dev/null && [[ -S $SOCK ]] && return 0
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$TMP/daemon.log"
  echo "FAIL: the daemon did not start"
  exit 1
}

# True once something in the host namespace listens on TCP port $1.
listening() { "${IN_NS[@]}" ss -ltnH "sport = :$1" 2>/dev/null | grep -q .; }
# Waits (at most $2 s) until TCP port $1 listens; false if it never does.
wait_listening() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    listening "$1" && return 0
    sleep 0.1
  done
  return 1
}

# run_pair NAME LIMIT EXPECT PROGRAM ARGS... : server, then the client once
# the server listens; both must exit 0 within LIMIT s and print EXPECT.
run_pair() {
  local name=$1 limit=$2 expect=$3 prog=$4
  shift 4
  local port=$((20000 + RANDOM % 20000))
  "${IN_NS[@]}" timeout -k 5 "$limit" "$UROCE" exec -- "$prog" -p "$port" "$@" > "$TMP/$name.server" 2>&1 &
  local spid=$!
  wait_for_server "$port" "$spid" "$limit"
  "${IN_NS[@]}" timeout -k 5 "$limit" "$UROCE" exec -- "$prog" -p "$port" "$@" 127.0.0.1 > "$TMP/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  pair_verdict "$name" "$src" "$crc" "$expect" server
}

echo "== the daemon; a second one on the same socket refuses"
start_daemon
out=$("${IN_NS[@]}" timeout 30 "$UROCE" daemon --config "$TMP/daemon.ini" 2>&1)
rc=$?
[[ $rc -ne 0 ]] || fail "a second daemon started on the same socket"
grep -q "another uroce daemon is running on $SOCK" <<<"$out" || fail "no clear message from the second daemon: $out"
[[ -S $SOCK ]] || fail "the second daemon removed the first one's socket"
mode=$(stat -c %a "$SOCK")
[[ $mode == 660 ]] || fail "the control socket's mode is $mode, not 660"

echo "== programs without a configuration see the daemon's device"
out=$("${IN_NS[@]}" timeout 60 "$UROCE" exec -- ibv_devices 2>&1) || fail "ibv_devices: $out"
grep -q "uroce0" <<<"$out" || fail "ibv_devices does not list uroce0: $out"
out=$("${IN_NS[@]}" timeout 60 "$UROCE" exec -- ibv_devinfo -v 2>&1) || fail "ibv_devinfo -v: $out"
grep -qE "GID\[ *0\]:.*::ffff:10.76.0.1, RoCE v2" <<<"$out" || fail "no IPv4 GID in ibv_devinfo -v"
grep -qE "GID\[ *1\]:.*fd00:76::1, RoCE v2" <<<"$out" || fail "no IPv6 GID in ibv_devinfo -v"
# The device's files (tools/device_files.h) for a program attached to the
# daemon: from its DEVICES answer, in the program's own mount namespace.
out=$("${IN_NS[@]}" timeout 30 "$UROCE" exec --device-files=yes -- sh -c \
  'cat /sys/class/infiniband/uroce0/ports/1/gids/0 /sys/class/infiniband/uroce0/ports/1/gid_attrs/types/1; ls /dev/infiniband' 2>&1) ||
  fail "device files under the daemon: $out"
grep -q "^0000:0000:0000:0000:0000:ffff:0a4c:0001$" <<<"$out" || fail "no IPv4 GID in the presented sysfs: $out"
grep -q "^RoCE v2$" <<<"$out" || fail "no GID type in the presented sysfs: $out"
grep -q "^uverbs0$" <<<"$out" || fail "no /dev/infiniband/uverbs0: $out"

echo "== a program stopped and continued while it waits for the daemon's answer still attaches"
# signal(7): after a stop and SIGCONT (job control, a debugger attaching),
# a wait on a socket with a receive timeout fails with EINTR; the daemon's
# answer must still be waited for. The daemon is stopped so that the
# program is certainly waiting when it is stopped and continued.
daemon_process=""
for p in $(pgrep -f -- "daemon --config $TMP/daemon.ini"); do
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == uroce ]] && daemon_process=$p
done
[[ -n $daemon_process ]] || fail "cannot find the daemon's process"
rm -f "$TMP/attach.pid" "$TMP/attach.go"
"${IN_NS[@]}" timeout 60 "$UROCE" exec -- sh -c 'echo $$ > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done; exec ibv_devinfo' \
  sh "$TMP/attach.pid" "$TMP/attach.go" > "$TMP/attach.log" 2>&1 &
attacher=$!
for _ in $(seq 100); do [[ -s $TMP/attach.pid ]] && break; sleep 0.1; done
client=$(cat "$TMP/attach.pid" 2>/dev/null)
if [[ -n $client && -n $daemon_process ]]; then
  kill -STOP "$daemon_process"
  touch "$TMP/attach.go"
  # Until it waits for the answer: poll(2) (7) or recvmsg(2) (47), x86-64.
  waiting=no
  for _ in $(seq 200); do
    read -r call _ < "/proc/$client/syscall" 2>/dev/null
    if [[ $call == 7 || $call == 47 ]]; then waiting=yes; break; fi
    sleep 0.05
  done
  kill -STOP "$client"
  sleep 0.2
  kill -CONT "$client"
  sleep 0.2
  kill -CONT "$daemon_process"
  wait "$attacher"
  rc=$?
  [[ $waiting == yes ]] || fail "the program never waited for the daemon's answer (test set-up)"
  [[ $rc -eq 0 ]] && grep -q "hca_id:.*uroce0" "$TMP/attach.log" ||
    fail "a program stopped and continued while attaching lost the device (exit $rc): $(head -c 600 "$TMP/attach.log")"
else
  fail "the attaching program did not start, or the daemon was not found: $(head -c 600 "$TMP/attach.log")"
  touch "$TMP/attach.go"
  wait "$attacher"
fi

echo "== two processes through the host's own address"
run_pair rc_pingpong_v4 60 "iters in" ibv_rc_pingpong -g 0 -n 500
run_pair rc_pingpong_v6 60 "iters in" ibv_rc_pingpong -g 1 -n 500 -s 8000
run_pair write_bw 90 "remote address:" ib_write_bw -x 0 -n 200 -s 65536
run_pair read_lat 90 "remote address:" ib_read_lat -x 0 -n 200
# Each pair's frames went through the switch only until the daemon linked
# the two processes straight (host/local_links.h); links close with them.
out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1) || fail "uroce stats --daemon: $out"
grep -qE "^links now=0 made=([4-9]|[1-9][0-9]+) " <<<"$out" || fail "the pairs were not linked straight: $(grep links <<<"$out")"
# Processes that take no links (UROCE_LOCAL_LINKS=no) send UNLINK back: the
# daemon closes the link for both, and its switch carries all their frames.
local_frames() { grep -oE "^switch local_frames=[0-9]+" <<<"$1" | sed 's/.*=//'; }
switched_before=$(local_frames "$out")
UROCE_LOCAL_LINKS=no run_pair rc_pingpong_no_links 60 "iters in" ibv_rc_pingpong -g 0 -n 500
out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1) || fail "uroce stats --daemon: $out"
switched=$(( $(local_frames "$out") - switched_before ))
echo "without links: the switch moved $switched frames; $(grep '^links' <<<"$out")"
grep -qE "^links now=0 .* declined=1$" <<<"$out" || fail "the declined link was not closed: $(grep links <<<"$out")"
[[ $switched -ge 2000 ]] || fail "the switch moved $switched frames of a pair that takes no links (expected >= 2000)"

# run_cm_pair NAME LIMIT EXPECT "SERVER COMMAND" "CLIENT COMMAND": rdma_cm on
# both sides, no TCP: the client starts again while the server has not
# listened yet (the daemon rejects a REQ nobody listens for), up to 20 times.
# A client of several connections (ucmatose -c 4) whose first REQ was
# rejected can have a later REQ, resent while it was giving up, reach the
# server once it listens: the server accepts it, its REP finds the client
# gone, and the server ends with REJECTED (invalid communication ID). Then
# the whole pair starts again, up to three times.
run_cm_pair() {
  local name=$1 limit=$2 expect=$3 scmd=$4 ccmd=$5 attempt crc src pair_try
  for pair_try in 1 2 3; do
    # shellcheck disable=SC2086  # the commands are word lists
    "${IN_NS[@]}" timeout -k 5 "$limit" "$UROCE" exec -- $scmd > "$TMP/$name.server" 2>&1 &
    local spid=$!
    for attempt in $(seq 20); do
      # shellcheck disable=SC2086
      "${IN_NS[@]}" timeout -k 5 "$limit" "$UROCE" exec -- $ccmd > "$TMP/$name.client" 2>&1
      crc=$?
      cm_client_should_retry "$name" "$crc" "$spid" || break
    done
    # A client that failed for good leaves a server that would wait its whole
    # limit: end it.
    [[ $crc -ne 0 ]] && kill -TERM "$spid" 2>/dev/null
    wait "$spid"
    src=$?
    if [[ $src -eq 0 || $attempt -eq 1 ]] || ! grep -q REJECTED "$TMP/$name.server"; then break; fi
    echo "$name: the server took a REQ of a client that had given up; the pair starts again"
  done
  pair_verdict "$name" "$src" "$crc" "$expect" "" " (client attempts: $attempt, pair attempts: $pair_try)"
}

echo "== rdma_cm between two processes through the host's own address"
cport=$((20000 + RANDOM % 20000))
run_cm_pair rping_v4 90 "ping data: rdma-ping-19: " "rping -s -a 10.76.0.1 -p $cport -C 20 -S 64 -V" \
  "rping -c -a 10.76.0.1 -p $cport -C 20 -S 64 -V -v"
run_cm_pair rping_v6 90 "ping data: rdma-ping-19: " "rping -s -a fd00:76::1 -p $((cport + 1)) -C 20 -S 4000 -V" \
  "rping -c -a fd00:76::1 -p $((cport + 1)) -C 20 -S 4000 -V -v"
run_cm_pair ucmatose 90 "return status 0" "ucmatose -b 10.76.0.1 -p $((cport + 2)) -c 4 -C 20 -S 1000" \
  "ucmatose -s 10.76.0.1 -p $((cport + 2)) -c 4 -C 20 -S 1000"
run_cm_pair rdma_server_client 90 "rdma_client: end 0" "rdma_server -s 10.76.0.1 -p $((cport + 3))" \
  "rdma_client -s 10.76.0.1 -p $((cport + 3))"
# A REQ nobody listens for is rejected at once by the daemon.
out=$("${IN_NS[@]}" timeout 30 "$UROCE" exec -- rping -c -a 10.76.0.1 -p $((cport + 4)) -C 1 -v 2>&1)
grep -qE "REJECTED|Connection refused|Unexpected CM event|error" <<<"$out" || fail "no reject for a port nobody listens on: $out"

echo "== two hosts: a daemon in each namespace, across the veth"
sed -e "s|iface=$if_h|iface=$if_p|" -e "s|10.76.0.1|10.76.0.2|" -e "s|fd00:76::1|fd00:76::2|" \
  -e "s|socket = .*|socket = $TMP/peer.sock|" -e "s|file_prefix = .*|file_prefix = uroce-daemon-test-$id-p|" \
  "$TMP/daemon.ini" > "$TMP/peer.ini"
IN_PEER=(ip netns exec "$ns_peer" env UROCE_DAEMON="$TMP/peer.sock")
"${IN_PEER[@]}" timeout -k 5 120 "$UROCE" daemon --config "$TMP/peer.ini" > "$TMP/peer-daemon.log" 2>&1 &
peer_daemon=$!
pids+=("$peer_daemon")
for _ in $(seq 100); do
  grep -q "control socket" "$TMP/peer-daemon.log" 2>/dev/null && [[ -S $TMP/peer.sock ]] && break
  sleep 0.1
done
[[ -S $TMP/peer.sock ]] || fail "the second host's daemon did not start: $(cat "$TMP/peer-daemon.log")"
# rping from the second host to a server on the first: ARP through both
# daemons (each answers for its own address), CM and data over the wire.
"${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- rping -s -a 10.76.0.1 -p $((cport + 5)) -C 20 -S 1000 -V \
  > "$TMP/cross.server" 2>&1 &
spid=$!
for attempt in $(seq 20); do
  "${IN_PEER[@]}" timeout -k 5 60 "$UROCE" exec -- rping -c -a 10.76.0.1 -p $((cport + 5)) -C 20 -S 1000 -V -v \
    > "$TMP/cross.client" 2>&1
  crc=$?
  [[ $crc -eq 0 ]] && break
  grep -qE "REJECTED|Connection refused|Unexpected CM event" "$TMP/cross.client" || break
  sleep 0.5
done
[[ $crc -ne 0 ]] && kill -TERM "$spid" 2>/dev/null
wait "$spid"
src=$?
if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -q "ping data: rdma-ping-19: " "$TMP/cross.client"; then
  fail "rping across two hosts: server rc=$src client rc=$crc"
  cat "$TMP/cross.server" "$TMP/cross.client"
else
  echo "ok: rping across two hosts, each behind its daemon"
fi
out=$(timeout 30 "$UROCE" stats --daemon "$TMP/peer.sock" 2>&1)
grep -qE "^uplink rx_frames=[1-9]" <<<"$out" || fail "the second host's uplink carried nothing: $out"
grep -qE "neighbor_answers=[1-9]" <<<"$out" || fail "the second host's daemon answered no ARP: $out"
# The client's ARP request left as the daemon's own question, not its bytes.
grep -qE "^drops device=uroce0 .* neighbor_rebuilt=[1-9]" <<<"$out" || fail "the second host's daemon asked no ARP itself: $out"
kill -TERM "$peer_daemon"
wait "$peer_daemon" || fail "the second host's daemon did not stop cleanly: $(cat "$TMP/peer-daemon.log")"

echo "== kill -9 of one of four processes: its local peer's QP fails at once, the others carry on"
# Two ibv_rc_pingpong pairs: the server of the second (the victim) is killed
# mid-run. Its client, connected to it through the daemon, must end within
# 2 s with its work flushed (the daemon tells it: PEER_GONE). Without that it
# ended by retry exhaustion (0.7-0.9 s after the kill here, ibv_rc_pingpong's
# timeout 14 and retry count 7), or would wait for ever for a message when
# no send of its own was outstanding. The first pair must carry on: its
# link's frame counts grow after the kill (it runs until stopped, so that
# the stats are read while it runs, however fast it goes).
port=$((20000 + RANDOM % 20000))
vport=$((port + 1))
# The programs' own pids (uroce exec execs them): by their exact command line.
prog_pid() { pgrep -x -f "$1" | head -1; }
"${IN_NS[@]}" timeout -k 5 90 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$port" > "$TMP/kill.server" 2>&1 &
spid=$!
"${IN_NS[@]}" timeout -k 5 90 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$vport" > "$TMP/victim.log" 2>&1 &
victim=$!
pids+=("$victim")
wait_listening "$port" 30 && wait_listening "$vport" 30 || fail "the servers did not start"
"${IN_NS[@]}" timeout -k 5 90 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$port" 127.0.0.1 > "$TMP/kill.client" 2>&1 &
cpid=$!
"${IN_NS[@]}" timeout -k 5 90 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$vport" 127.0.0.1 \
  > "$TMP/peer.client" 2>&1 &
peer_client=$!
pids+=("$peer_client")
sleep 1
victim_pid=$(prog_pid "ibv_rc_pingpong -g 0 -n 100000000 -p $vport")
peer_client_pid=$(prog_pid "ibv_rc_pingpong -g 0 -n 100000000 -p $vport 127.0.0.1")
other_pids="$(prog_pid "ibv_rc_pingpong -g 0 -n 100000000 -p $port") $(prog_pid "ibv_rc_pingpong -g 0 -n 100000000 -p $port 127.0.0.1")"
[[ -n $victim_pid ]] && kill -KILL "$victim_pid" 2>/dev/null || { fail "no victim process to kill"; victim_pid=none; }
killed_at=$(date +%s.%N)
# How fast the daemon releases the victim, and how fast its local peer ends.
released="" peer_ended=""
for _ in $(seq 250); do
  now=$(date +%s.%N)
  [[ -z $released ]] && grep -q "released pid $victim_pid " "$TMP/daemon.log" && released=$now
  [[ -z $peer_ended ]] && ! kill -0 "$peer_client" 2>/dev/null && peer_ended=$now
  [[ -n $released && -n $peer_ended ]] && break
  sleep 0.02
done
since_kill() { awk "BEGIN { printf \"%.2f\", $1 - $killed_at }"; }
if [[ -n $released ]]; then
  echo "released $(since_kill "$released") s after kill -9"
  awk "BEGIN { exit !($released - $killed_at > 1.0) }" && fail "the daemon took more than a second to release the killed process"
else
  fail "the daemon did not release the killed process"
fi
if [[ -z $peer_ended ]]; then
  fail "the killed process's local peer did not end within 5 s of the kill"
  kill -KILL "$peer_client_pid" "$peer_client" 2>/dev/null
fi
wait "$peer_client"
peer_rc=$?
if [[ -n $peer_ended ]]; then
  took=$(since_kill "$peer_ended")
  echo "the killed process's local peer ended $took s after kill -9 (exit $peer_rc)"
  awk "BEGIN { exit !($took > 2.0) }" && fail "the killed process's local peer took $took s to end (more than 2 s)"
fi
# Its work flushed (IBV_WC_WR_FLUSH_ERR), not failed by retry exhaustion
# (IBV_WC_RETRY_EXC_ERR).
[[ $peer_rc -ne 0 && $peer_rc -ne 124 && $peer_rc -ne 137 ]] || fail "the killed process's local peer exited $peer_rc"
grep -q "Failed status Work Request Flushed Error" "$TMP/peer.client" ||
  fail "the killed process's local peer did not see its work flushed: $(cat "$TMP/peer.client")"
grep -q "lost their peer on this host" "$TMP/peer.client" || fail "the local peer was not told its peer is gone"
grep -q "told pid $peer_client_pid (ibv_rc_pingpong) that 1 of its QPs lost their peer in pid $victim_pid" \
  "$TMP/daemon.log" || fail "the daemon did not tell the killed process's local peer"
out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1) || fail "uroce stats --daemon: $out"
echo "$out"
grep -q "process pid=$victim_pid " <<<"$out" && fail "uroce stats still lists the killed process"
for p in $other_pids; do
  grep -q "process pid=$p .* peers=1 " <<<"$out" || fail "uroce stats does not list pid $p of the other pair, with its QP's peer"
done
# The other pair talks over its own link; the killed one's is gone.
grep -qE "^link device=uroce0 slots=[0-9]+,[0-9]+ frames=[1-9][0-9]*,[1-9][0-9]*$" <<<"$out" ||
  fail "the other pair's frames do not go over a local link"
grep -q "^links now=1 " <<<"$out" || fail "the killed process's link was not closed"
link_frames() { grep -oE "^link device=uroce0 slots=[0-9]+,[0-9]+ frames=[0-9]+" <<<"$1" | sed 's/.*frames=//'; }
before=$(link_frames "$out")
sleep 0.5
after=$(link_frames "$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1)")
echo "the other pair's link: $before -> $after frames one way in 0.5 s"
[[ -n $before && -n $after && $after -gt $before ]] || fail "the other pair did not carry on after the kill"
kill -0 "$cpid" 2>/dev/null && kill -0 "$spid" 2>/dev/null || fail "the other pair ended after the kill"
for p in $other_pids; do kill -TERM "$p" 2>/dev/null; done
wait "$cpid" 2>/dev/null
wait "$spid" 2>/dev/null

# kill_server_expect_client_end NAME SERVER_PID CLIENT_PID CLIENT_LOG: kill -9
# of the server; its client must end within 5 s (it is told, not timed out).
kill_server_expect_client_end() {
  local name=$1 server=$2 client=$3 log=$4 ended=""
  kill -KILL "$server"
  killed_at=$(date +%s.%N)
  for _ in $(seq 250); do
    kill -0 "$client" 2>/dev/null || { ended=$(date +%s.%N); break; }
    sleep 0.02
  done
  if [[ -z $ended ]]; then
    fail "$name's client did not end within 5 s of its server's kill -9: $(tail -3 "$log")"
    kill -KILL "$client" 2>/dev/null
  else
    echo "$name's client ended $(since_kill "$ended") s after its server's kill -9"
  fi
  wait "$client" 2>/dev/null
}

echo "== kill -9 of an rdma_cm server: its client gets DISCONNECTED at once"
# rping ignores flushed completions and waits for RDMA_CM_EVENT_DISCONNECTED
# (the kernel's rdma_cm sends DREQ for a process that exits): the client's
# connection manager must end the connection itself when the daemon says
# the peer's process is gone, or the client waits for ever.
rport=$((20000 + RANDOM % 20000))
"${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- rping -s -a 10.76.0.1 -p "$rport" -C 10000000 > "$TMP/rkill.server" 2>&1 &
pids+=("$!")
rclient=""
for attempt in $(seq 20); do
  "${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- rping -c -a 10.76.0.1 -p "$rport" -C 10000000 -v \
    > "$TMP/rkill.client" 2>&1 &
  rclient=$!
  pids+=("$rclient")
  sleep 1
  kill -0 "$rclient" 2>/dev/null && grep -q "ping data" "$TMP/rkill.client" && break
  wait "$rclient" 2>/dev/null  # rejected before the server listened: again
done
rserver_pid=$(prog_pid "rping -s -a 10.76.0.1 -p $rport -C 10000000")
if [[ -z $rserver_pid ]] || ! kill -0 "$rclient" 2>/dev/null; then
  fail "the rping pair did not get going: $(tail -3 "$TMP/rkill.client")"
else
  # The server's connection through the switch: a REQ (and the RTU) in, a
  # REP out, never a REQ of its own.
  out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1) || fail "uroce stats --daemon: $out"
  grep -qE "^cm pid=$rserver_pid sent=req:0,mra:[0-9]+,rej:[0-9]+,rep:[1-9][0-9]*,rtu:0,.* received=req:[1-9][0-9]*,.*rtu:[1-9]" \
    <<<"$out" || fail "no cm line with rping's server's REQ, REP and RTU: $(grep "^cm pid=$rserver_pid " <<<"$out")"
  kill_server_expect_client_end rping "$rserver_pid" "$rclient" "$TMP/rkill.client"
  grep -q "DISCONNECT EVENT" "$TMP/rkill.client" || fail "rping's client saw no DISCONNECTED: $(tail -3 "$TMP/rkill.client")"
fi

echo "== kill -9 of a libfabric server: its client's endpoint fails at once"
# The same for a libfabric FI_EP_MSG endpoint, whose QP the connection
# manager connects past verbs: the client's QP is known to the daemon too
# (PEER), so it moves to the error state and the connection ends (FI_SHUTDOWN)
# when the daemon says the server's process is gone; fi_pingpong sees its
# work fail and exits. Before, nothing told it: it waited for retry
# exhaustion.
fport=$((20000 + RANDOM % 20000))
"${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- fi_pingpong -p uroce -e msg -S 64 -I 100000000 -B "$fport" \
  > "$TMP/fkill.server" 2>&1 &
pids+=("$!")
wait_listening "$fport" 30 || fail "fi_pingpong's server did not start"
"${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- fi_pingpong -p uroce -e msg -S 64 -I 100000000 -P "$fport" 127.0.0.1 \
  > "$TMP/fkill.client" 2>&1 &
fclient=$!
pids+=("$fclient")
sleep 2
fserver_pid=$(prog_pid "fi_pingpong -p uroce -e msg -S 64 -I 100000000 -B $fport")
if [[ -z $fserver_pid ]] || ! kill -0 "$fclient" 2>/dev/null; then
  fail "the fi_pingpong pair did not get going: $(tail -3 "$TMP/fkill.client")"
else
  kill_server_expect_client_end fi_pingpong "$fserver_pid" "$fclient" "$TMP/fkill.client"
  grep -q "lost their peer on this host" "$TMP/fkill.client" ||
    fail "fi_pingpong's client was not told its peer was gone: $(tail -3 "$TMP/fkill.client")"
fi

echo "== the wire cannot speak as the host"
# An attached process that sends nothing: an ibv_rc_pingpong server waiting
# for its client (its QP exists from before it listens).
port=$((20000 + RANDOM % 20000))
"${IN_NS[@]}" timeout -k 5 60 "$UROCE" exec -- ibv_rc_pingpong -g 0 -p "$port" > "$TMP/wire.server" 2>&1 &
wire_server=$!
pids+=("$wire_server")
wait_listening "$port" 30 || fail "the attacked process did not start"
wire_pid=$(prog_pid "ibv_rc_pingpong -g 0 -p $port")
# field NAME LINE: the value of NAME= in LINE (0 if it has none).
field() { local v; v=$(grep -oE "(^| )$1=[^ ]+" <<<"$2" | head -1 | sed 's/.*=//'); echo "${v:-0}"; }
out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1)
victim_line=$(grep "^process pid=$wire_pid " <<<"$out")
drops_before=$(grep "^drops device=uroce0 " <<<"$out")
qpns=$(field qpns "$victim_line")
victim_qpn=$(printf "0x%06x" $(( ${qpns%-*} + 5 )))
host_mac=$(ip -n "$ns" -br link show dev "$if_h" | awk '{print $3}')
peer_mac=$(ip -n "$ns_peer" -br link show dev "$if_p" | awk '{print $3}')
if [[ -z $victim_line || $qpns == 0 || -z $host_mac || -z $peer_mac ]]; then
  fail "no attached process, lease or MACs to attack: '$victim_line' '$host_mac' '$peer_mac'"
else
  # Root on the other end of the veth (the wire) sends as the host: 20
  # frames from 10.76.0.1 and 20 from fd00:76::1, to those addresses; then
  # 10 from 127.0.0.1 (RFC 1122 3.2.1.3: never on a wire).
  wire_send() { ip netns exec "$ns_peer" /usr/bin/python3 "$RAWSEND" roce "$if_p" --src-mac "$peer_mac" \
    --dst-mac "$host_mac" --qpn "$victim_qpn" "$@" >/dev/null || fail "rawsend.py $*"; }
  wire_send --src-ip 10.76.0.1 --dst-ip 10.76.0.1 --count 20
  wire_send --src-ip fd00:76::1 --dst-ip fd00:76::1 --count 20
  wire_send --src-ip 127.0.0.1 --dst-ip 10.76.0.1 --count 10
  sleep 0.5
  out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1)
  drops_after=$(grep "^drops device=uroce0 " <<<"$out")
  echo "to QPN $victim_qpn of pid $wire_pid: $drops_after"
  own=$(( $(field wire_own_source "$drops_after") - $(field wire_own_source "$drops_before") ))
  bad=$(( $(field wire_bad_source "$drops_after") - $(field wire_bad_source "$drops_before") ))
  [[ -n $drops_after && $own -eq 40 ]] || fail "40 frames from the host's own addresses, counted: '$drops_after'"
  [[ -n $drops_after && $bad -eq 10 ]] || fail "10 frames from 127.0.0.1, counted: '$drops_after'"
  got=$(( $(field tx_frames "$(grep "^process pid=$wire_pid " <<<"$out")") - $(field tx_frames "$victim_line") ))
  [[ $got -eq 0 ]] || fail "the attacked process was handed $got of the frames from the wire"
fi
kill -TERM "$wire_pid" 2>/dev/null
wait "$wire_server" 2>/dev/null

echo "== a process is who the kernel says, not who it claims"
# ATTACH names a pid and a program; the daemon takes the pid, uid and gid
# from the connection (SO_PEERCRED). A client claiming pid 1 shows in STATS
# with its real pid and uid.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1]); s.send(b"ATTACH pid=1 program=liar")
print(s.recv(16384).split(b"\n")[0].decode(), flush=True)
time.sleep(5)' "$SOCK" > "$TMP/liar.out" 2>&1 &
liar=$!
pids+=("$liar")
for _ in $(seq 50); do [[ -s $TMP/liar.out ]] && break; sleep 0.1; done
out=$(timeout 30 "$UROCE" stats --daemon "$SOCK" 2>&1)
line=$(grep "^process .* program=liar " <<<"$out")
if [[ $line == "process pid=$liar "* && $line == *" uid=0 gid=0" ]]; then
  echo "ok: the liar shows as pid $liar, uid 0 ($(cat "$TMP/liar.out"))"
else
  fail "STATS takes the claimed pid or shows no credentials: '$line' (client: $(cat "$TMP/liar.out"))"
fi
kill "$liar" 2>/dev/null
wait "$liar" 2>/dev/null

echo "== a member of the daemon's group cannot take more than its share"
# uid 65534, in the socket's group (gid 65534 here), against
# max_processes_per_uid = 4 (daemon.ini): at most 4 processes, at most 4
# sessions waiting to attach, never root locked out of STATS, at most
# max_listens_per_uid (256) CM ports, and STATS shows it its own processes
# only.
chmod 711 "$TMP"
chgrp 65534 "$SOCK"
install -m 0644 "$FLOOD" "$TMP/daemon_flood.py"
as_member() { setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 60 /usr/bin/python3 "$TMP/daemon_flood.py" "$SOCK" "$@"; }
timeout 60 /usr/bin/python3 "$TMP/daemon_flood.py" "$SOCK" hold 20 > "$TMP/holder.out" 2>&1 &
holder=$!
pids+=("$holder")
for _ in $(seq 50); do [[ -s $TMP/holder.out ]] && break; sleep 0.1; done
flood=$(as_member attach 10 2>&1)
if [[ $flood == "attached 4 refused 6 sees_uids 65534" ]]; then
  echo "ok: $flood"
else
  fail "a group member's 10 attaches (root's holder: $(cat "$TMP/holder.out")): '$flood'"
fi
as_member idle 20 4 > "$TMP/idle.out" 2>&1 &
idler=$!
pids+=("$idler")
sleep 1
if out=$(timeout 10 "$UROCE" stats --daemon "$SOCK" 2>&1) && grep -q "^daemon sessions=" <<<"$out"; then
  echo "ok: root's STATS while a group member holds idle sessions: $(grep '^daemon' <<<"$out")"
else
  fail "root's STATS while a group member holds idle sessions: $out"
fi
wait "$idler"
[[ $(cat "$TMP/idle.out") == "open 4 refused 0 closed 16" ]] || fail "idle sessions of one uid: '$(cat "$TMP/idle.out")'"
listens=$(as_member listen 300 2>&1)
[[ $listens == "listening 256 refused 44" ]] && echo "ok: CM ports: $listens" || fail "CM ports of one uid: '$listens'"
# PEER records cost the daemon memory: max_peers_per_uid = 100 (daemon.ini).
peers=$(as_member peer 300 10.76.0.1 2>&1)
[[ $peers == "records 100" ]] && echo "ok: PEER records: $peers of 300" || fail "PEER records of one uid: '$peers'"
# ARP poisoning: the member writes an ARP request for the peer with its own
# sender MAC into its port. The peer's kernel merges the sender's pair into
# its table (RFC 826), so the request must leave as the switch's own, with
# the uplink's MAC; the peer must never learn the host's address at the
# forged one. (The peer's interface gets an address for this case only.)
if [[ -n $INJECTOR ]]; then
  install -m 0755 "$INJECTOR" "$TMP/frame_injector"
  ip -n "$ns_peer" addr add 10.76.0.2/24 dev "$if_p"
  poison=$(/usr/bin/python3 "$RAWSEND" arp - --src-mac "$host_mac" --dst-mac ff:ff:ff:ff:ff:ff --op request \
    --sender-mac 02:66:66:66:66:66 --sender-ip 10.76.0.1 --target-ip 10.76.0.2)
  injected=$(setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 60 "$TMP/frame_injector" "$SOCK" \
    "$poison" 3 2>&1)
  neigh=$(ip -n "$ns_peer" neigh show 10.76.0.1 dev "$if_p")
  if [[ $injected != "sent 3 slot "* ]]; then
    fail "the member's frame injector: '$injected'"
  elif grep -qi "02:66:66:66:66:66" <<<"$neigh"; then
    fail "a member's ARP request poisoned the peer's neighbour table: '$neigh'"
  elif ! grep -qi "lladdr $host_mac" <<<"$neigh"; then
    fail "the peer did not learn the host's address from the switch's question: '$neigh'"
  else
    echo "ok: a member's forged ARP request left as the switch's own; the peer has '$neigh'"
  fi
  ip -n "$ns_peer" addr del 10.76.0.2/24 dev "$if_p"
  ip -n "$ns_peer" neigh flush dev "$if_p"
else
  echo "skipped: ARP poisoning (no frame injector given)"
fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

echo "== a released slot is nobody's for a while, and slots are drawn at random"
# A process that ended leaves its QPNs and CM IDs (its slot) to whoever gets
# the slot next, and with them its peers' late retransmissions. Attaching and
# detaching 260 times must not reach the slot just released (a round robin
# gave it back within 253 steps).
walk=$(timeout 120 /usr/bin/python3 "$SLOT_WALK" "$SOCK" 260 2>&1)
victim=$(awk '/^victim/ { print $2 }' <<<"$walk")
got=$(sed -n 's/^got //p' <<<"$walk")
if [[ -z $victim || $victim == None ]]; then
  fail "the first attach failed: $walk"
elif grep -qw "$victim" <<<"$got"; then
  fail "slot $victim, released a moment ago, was handed out again: $(tr '\n' ' ' <<<"$walk" | cut -c1-300)"
else
  echo "ok: slot $victim not handed out again in 260 attaches ($(grep refused <<<"$walk"), $(wc -w <<<"$got") granted)"
fi
# The walk put every slot in quarantine (10 s, the default): wait it out.
sleep 10.5

echo "== SIGTERM to the daemon during a run"
port=$((20000 + RANDOM % 20000))
"${IN_NS[@]}" timeout -k 5 120 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$port" > "$TMP/term.server" 2>&1 &
spid=$!
wait_listening "$port" 30 || fail "the server did not start"
"${IN_NS[@]}" timeout -k 5 120 "$UROCE" exec -- ibv_rc_pingpong -g 0 -n 100000000 -p "$port" 127.0.0.1 > "$TMP/term.client" 2>&1 &
cpid=$!
sleep 2
kill -TERM "$daemon_pid"
stopped_at=$(date +%s)
drc=0
wait "$daemon_pid" || drc=$?
[[ $drc -eq 0 ]] || fail "the daemon exited $drc after SIGTERM"
wait "$cpid"
crc=$?
wait "$spid"
src=$?
took=$(( $(date +%s) - stopped_at ))
echo "the programs ended ${took} s after SIGTERM (exit $src, $crc)"
[[ $crc -ne 124 && $crc -ne 137 && $src -ne 124 && $src -ne 137 ]] || fail "a program hung after the daemon stopped"
[[ $took -le 30 ]] || fail "the programs took $took s to end after the daemon stopped"
grep -q "is gone: every QP moves to the error state" "$TMP/term.client" || fail "the client did not notice the daemon go"
grep -qE "mbufs back in the pool: ([0-9]+) of \1$" "$TMP/daemon.log" || fail "the daemon's mbufs did not all come back"
[[ ! -e $SOCK ]] || fail "the daemon left its socket behind"

echo "--- daemon log"
cat "$TMP/daemon.log"
[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
