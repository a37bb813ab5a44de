#!/usr/bin/env bash
# Kernel rxe in the qemu guest (tools/rxe_vm) against two processes behind
# ONE `uroce daemon`, at the same time.
#
# On a 2-core machine qemu's TCG guest needs a CPU of its own most of the
# time. A daemon that busy-polls (or wakes every 50 us) and two busy-polling
# host programs take both CPUs: the guest stalls for seconds (the daemon's
# stats show no frame from it for 4 s) and a host program ends by
# "transport retry counter exceeded" once both pairs run. So the daemon
# sleeps when idle (16 us doubling up to idle_us, default 1000) and the
# host's ibv_rc_pingpong waits for completions with -e (rping always does).
# The pings take 1.4 s, well inside a pair's run (about 2.7 s), so that this
# test's proof that they overlapped the pairs holds; a run takes about 21 s.
# RXE_DAEMON_LCORES and RXE_DAEMON_IDLE_US set the daemon's lcores (default
# 0) and idle_us.
#
# The daemon runs in the guest's network namespace on the tap itself
# (`port = kernel:$RXE_VM_TAP`): it takes the tap's MAC and the host kernel's
# addresses on it (10.77.0.1, fd77::1), steers RoCEv2 (UDP 4791) to itself and
# leaves everything else (ARP, ND, ICMP, the programs' TCP side channel) to the
# kernel. Two host programs attach to it with no configuration of their own
# (`UROCE_DAEMON=SOCK uroce exec -- PROGRAM`), each the server of a pair whose
# client is the guest's kernel rxe:
#   pair 1  ibv_rc_pingpong -c (every byte checked), 4 KiB messages, IPv6 GID
#           (fd77::1 <-> fd77::2), QP numbers over TCP to 10.77.0.1;
#   pair 2  rping -V (rdma_cm on both sides: uroce's librdmacm and connection
#           manager through the daemon's switch against the kernel's rdma_cm;
#           RDMA READ, WRITE and SEND, every byte checked), IPv4 GID.
# Both must finish successfully and overlap in time: `uroce stats --daemon`,
# sampled while they run, must list both processes attached in two samples
# between which BOTH processes' frame counters grew (so both moved RoCE frames
# at the same time, not merely stayed attached); each side's start and end
# times are printed too. While RoCE runs, the guest's kernel answers ping
# (IPv4 and IPv6) from the host namespace and the host kernel answers the
# guest's ping to 10.77.0.1, the address it shares with the daemon: no reply
# lost. Then SIGTERM stops the daemon: exit status 0, its XDP program gone,
# every mbuf back in the pool (apart from af_xdp's, see below).
#
# kernel_io = af_xdp, not auto: XDP works on a tap. The tun driver runs XDP
# programs natively (`ip link` shows "xdp", not "xdpgeneric") on the frames
# qemu writes to the tap (which the host kernel receives), and AF_XDP binds
# to its single queue in copy mode (tun has no zero-copy) and sends through
# it to qemu. Should that stop working, the daemon fails here with the
# reason instead of falling back to af_packet unseen.
#
# The capture (tcpdump on the tap, kept on failure) holds ARP, ND, ICMP and
# TCP but no RoCE frame at all, in either direction: the XDP program
# redirects received RoCE frames to the AF_XDP socket before the kernel's
# packet taps run, and AF_XDP sends straight to the driver (no packet taps
# either). `uroce dump` of it must count 0 RoCE frames: none leaked into the
# kernel's stack.
#
# Every step has a time limit (their sum is checked against Bazel's
# TEST_TIMEOUT and is qemu's lifetime); the guest, the daemon and every host
# process are stopped on every exit path. On failure the capture, the guest
# console, the daemon's log, its stats samples and each side's output are
# kept in TEST_UNDECLARED_OUTPUTS_DIR.
# Arguments: rxe_vm.py, uroce.
set -uo pipefail
harness=$1 uroce=$2
source "$(dirname "$0")/rxe_vm_lib.sh"
command -v ping >/dev/null || fail "ping is not installed (Debian package iputils-ping)"
command -v ss >/dev/null || fail "ss is not installed (Debian package iproute2)"
uroce=$(realpath "$uroce")

# Time limits (s).
boot_limit=90       # ready in 4-6 s here
exec_limit=30       # one short guest command (ibv_devinfo, spawning a job)
exec_margin=30      # the harness waits this much beyond a guest command's limit
daemon_limit=20     # the daemon's start-up
ready_limit=20      # both host servers listening
run_limit=180       # both pairs, run side by side (each ~10-20 s here)
stop_limit=50       # guest power-off, then the supervisor's kill
slack=40            # the shell around it all
guest_grace=20      # each guest client, once its host side ended
# Guest commands: ibv_devinfo, three spawns, the ping job's wait; the
# clients' waits come after the host sides' run_limit.
bound=$((boot_limit + 5 * (exec_limit + exec_margin) + daemon_limit + exec_limit + ready_limit +
  run_limit + 2 * (guest_grace + exec_margin) + 15 + stop_limit + slack))
echo "time bound of this test: $bound s (Bazel's: ${TEST_TIMEOUT:-none} s)"
if [[ -n ${TEST_TIMEOUT:-} && $bound -gt $TEST_TIMEOUT ]]; then
  fail "the time limits add up to $bound s, more than Bazel's $TEST_TIMEOUT s: raise the target's timeout in tests/BUILD"
fi

# The daemon's socket: a short path (a unix socket's is at most 107 bytes,
# and Bazel's TEST_TMPDIR can be long).
sockdir=$(mktemp -d /tmp/uroce-rxe-daemon.XXXXXX)
sock=$sockdir/uroce.sock
state=$tmp/vm
out=$tmp/out  # each side's output, the daemon's log, the stats samples
mkdir -p "$out"
ok=0
daemon_pid=
pids=()
cleanup() {
  local status=$?
  trap - EXIT
  # Our background processes: each a subshell or timeout(1), which passes
  # SIGTERM on to its program; then SIGKILL for whatever is left.
  local p
  for p in "${pids[@]}" $daemon_pid; do
    pkill -TERM -P "$p" 2>/dev/null
    kill -TERM "$p" 2>/dev/null
  done
  sleep 1
  for p in "${pids[@]}" $daemon_pid; do
    pkill -KILL -P "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  if [[ $ok -eq 1 && $status -eq 0 ]]; then
    rxe_vm stop --state "$state"
  else
    rxe_vm stop --state "$state" --save-to "$artifacts" --label daemon
    cp "$out"/* "$artifacts"/ 2>/dev/null
    echo "kept the capture, the guest console, the daemon's log and stats samples and each side's output in $artifacts" >&2
  fi
  rm -rf "$sockdir"
  [[ $status -ne 0 ]] && exit "$status"
  [[ $ok -eq 1 ]] || exit 1
  exit 0
}
trap cleanup EXIT

env_lines=$(rxe_vm start --state "$state" --boot-timeout "$boot_limit" --lifetime "$bound") ||
  fail "the guest did not start (see above)"
eval "$env_lines"
in_ns() { ip netns exec "$RXE_VM_NETNS" "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$t0" 'BEGIN { printf "%.1f", a - b }'; }  # seconds since t0
before() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

devinfo=$(rxe_vm exec --state "$state" --timeout "$exec_limit" -- ibv_devinfo -v -d rxe0) ||
  fail "ibv_devinfo failed in the guest"
rxe_v4=$(gid_index "$devinfo" "::ffff:$RXE_VM_GUEST_IP")
rxe_v6=$(gid_index "$devinfo" "$RXE_VM_GUEST_IP6")
[[ -n $rxe_v4 && -n $rxe_v6 ]] || fail "rxe0 has no RoCE v2 GIDs for $RXE_VM_GUEST_IP / $RXE_VM_GUEST_IP6"

# --- the daemon, on the tap -------------------------------------------------
cat >"$out/daemon.ini" <<INI
[eal]
lcores = ${RXE_DAEMON_LCORES:-0}
hugepages = no
memory = 256
file_prefix = uroce-rxe-daemon-$$
log_level = *:error
telemetry = no

[daemon]
socket = $sock
idle_us = ${RXE_DAEMON_IDLE_US:-1000}

[endpoint.tap]
port = kernel:$RXE_VM_TAP
kernel_io = af_xdp
INI
# $! is timeout(1): ip netns exec execs it (not the in_ns function, which
# would make $! a subshell that SIGTERM kills while the daemon runs on: that
# read as "the daemon exited 143"); the daemon is timeout's child, and
# timeout passes SIGTERM on, and the daemon's exit status back.
ip netns exec "$RXE_VM_NETNS" timeout -k 5 "$bound" "$uroce" daemon --config "$out/daemon.ini" >"$out/daemon.log" 2>&1 &
daemon_pid=$!
started=0
for _ in $(seq $((daemon_limit * 10))); do
  if grep -q "control socket" "$out/daemon.log" && [[ -S $sock ]]; then started=1; break; fi
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
[[ $started -eq 1 ]] || fail "the daemon did not start within $daemon_limit s: $(cat "$out/daemon.log")"
cat "$out/daemon.log"
grep -q "uroce0 on net_af_xdp on $RXE_VM_TAP" "$out/daemon.log" ||
  fail "the daemon is not on net_af_xdp on $RXE_VM_TAP: $(cat "$out/daemon.log")"
grep -q "MAC $RXE_VM_HOST_MAC, addresses $RXE_VM_HOST_IP, $RXE_VM_HOST_IP6;" "$out/daemon.log" ||
  fail "the daemon does not use the tap's MAC $RXE_VM_HOST_MAC and addresses $RXE_VM_HOST_IP, $RXE_VM_HOST_IP6"
xdp_line=$(ip -n "$RXE_VM_NETNS" link show "$RXE_VM_TAP" | grep -o 'prog/xdp id [0-9]* name [a-z_]*')
[[ $xdp_line == *" name uroce_steer" ]] ||
  fail "no uroce_steer XDP program on $RXE_VM_TAP: $(ip -n "$RXE_VM_NETNS" link show "$RXE_VM_TAP")"
echo "XDP on $RXE_VM_TAP: $(ip -n "$RXE_VM_NETNS" -d link show "$RXE_VM_TAP" | grep -o '\bxdp[a-z]*\b' | head -1), $xdp_line"

# The device the programs see through the daemon: its GIDs are the tap's
# addresses (the kernel's).
in_daemon() { UROCE_DAEMON=$sock in_ns "$@"; }
udevinfo=$(in_daemon timeout -k 5 "$exec_limit" "$uroce" exec -- ibv_devinfo -v 2>&1) ||
  fail "ibv_devinfo through the daemon: $udevinfo"
uroce_v4=$(gid_index "$udevinfo" "::ffff:$RXE_VM_HOST_IP")
uroce_v6=$(gid_index "$udevinfo" "$RXE_VM_HOST_IP6")
[[ -n $uroce_v4 && -n $uroce_v6 ]] ||
  fail "uroce0 through the daemon has no RoCE v2 GIDs for $RXE_VM_HOST_IP / $RXE_VM_HOST_IP6: $udevinfo"
echo "GIDs: rxe0 IPv4 $rxe_v4, IPv6 $rxe_v6; uroce0 (daemon) IPv4 $uroce_v4, IPv6 $uroce_v6"

# --- two host servers behind the daemon, two guest clients, side by side ----
rc_port=18801
rping_port=18802
rc_args="-c -e -s 4096 -n 1500 -p $rc_port"
rping_args="-C 1500 -S 512 -V -v -p $rping_port"

# host_side NAME PROGRAM ARGS...: a server attached to the daemon, in the
# background; its start and end times and exit status land in $out/NAME.*.
host_side() {
  local name=$1
  shift
  (
    now >"$out/$name.start"
    in_daemon timeout -k 5 "$run_limit" "$uroce" exec -- "$@" >"$out/$name.uroce" 2>&1
    rc=$?
    now >"$out/$name.end"
    echo "$rc" >"$out/$name.status"
  ) &
  pids+=($!)
}

host_side rc ibv_rc_pingpong $rc_args -g "$uroce_v6"
# -d: rping says "rdma_listen" just before it listens (line-buffered by
# stdbuf, so that the line is in the file at once).
host_side rping stdbuf -oL rping -s -a "$RXE_VM_HOST_IP" $rping_args -d
deadline=$((SECONDS + ready_limit))
until in_ns ss -ltnH "sport = :$rc_port" | grep -q . && grep -qs rdma_listen "$out/rping.uroce"; do
  if [[ -e $out/rc.status || -e $out/rping.status ]]; then  # one ended already: failed
    in_ns ss -xlp >"$out/unix_sockets.txt" 2>&1
    show() { echo "--- $1, host (uroce through the daemon), status $(cat "$out/$1.status" 2>/dev/null || echo none):"; tail -n 20 "$out/$1.uroce"; }
    show rc
    show rping
    echo "--- daemon:"
    cat "$out/daemon.log"
    fail "a host server ended before the guest's clients started"
  fi
  [[ $SECONDS -lt $deadline ]] || fail "the host servers were not ready within $ready_limit s:
--- ibv_rc_pingpong: $(cat "$out/rc.uroce")
--- rping: $(cat "$out/rping.uroce")"
  sleep 0.1
done

# The daemon's view, every 0.5 s while the pairs run.
(
  while :; do
    echo "=== $(now)"
    UROCE_DAEMON=$sock timeout 5 "$uroce" stats --daemon "$sock" 2>&1
    sleep 0.5
  done
) >"$out/stats.txt" &
stats_pid=$!
pids+=("$stats_pid")

# The guest's clients. rping's is retried while the host's rping is not
# listening yet (uroce's connection manager rejects the REQ: REJECTED).
rxe_vm spawn --state "$state" --job rc --timeout "$run_limit" -- \
  "ibv_rc_pingpong -d rxe0 -g $rxe_v6 $rc_args $RXE_VM_HOST_IP" ||
  fail "cannot start ibv_rc_pingpong in the guest"
rxe_vm spawn --state "$state" --job rping --timeout "$run_limit" -- "
  i=0
  while :; do
    rping -c -a $RXE_VM_HOST_IP $rping_args >/tmp/rping.out 2>&1
    rc=\$?
    cat /tmp/rping.out
    [ \$rc -eq 0 ] && exit 0
    i=\$((i + 1))
    [ \$i -lt 5 ] && grep -q REJECTED /tmp/rping.out || exit \$rc
    echo '(rejected: the server did not listen yet; again)'
    sleep 1
  done" || fail "cannot start rping in the guest"
echo "both guest clients started at $(now)"

# Beside RoCE: the guest's kernel answers ping over the tap (its addresses
# are its own), and the host kernel answers the guest's ping to 10.77.0.1,
# the address it shares with the daemon.
ping_start=$(now)
in_ns timeout 30 ping -q -c 8 -i 0.2 -W 5 "$RXE_VM_GUEST_IP" >"$out/ping4.txt" 2>&1 &
ping4_pid=$!
in_ns timeout 30 ping -6 -q -c 8 -i 0.2 -W 5 "$RXE_VM_GUEST_IP6" >"$out/ping6.txt" 2>&1 &
ping6_pid=$!
pids+=("$ping4_pid" "$ping6_pid")
rxe_vm spawn --state "$state" --job ping --timeout "$exec_limit" -- "ping -c 3 -W 5 $RXE_VM_HOST_IP" ||
  fail "cannot start ping in the guest"
wait "$ping4_pid"
ping4_status=$?
wait "$ping6_pid"
ping6_status=$?
ping_end=$(now)
rxe_vm wait --state "$state" --job ping --timeout "$exec_limit" >"$out/ping_guest.txt" 2>&1
guest_ping_status=$?

# Both pairs end: first the host sides (each under run_limit), then the
# guest's clients, which end with them (a client whose server failed would
# retry for ever: kernel rxe treats retry_cnt 7 as unlimited, so it gets
# guest_grace s, not run_limit, and the test fails sooner).
for _ in $(seq $((run_limit * 10 + 50))); do
  [[ -e $out/rc.status && -e $out/rping.status ]] && break
  sleep 0.1
done
rxe_vm wait --state "$state" --job rc --timeout "$guest_grace" >"$out/rc.rxe" 2>&1
rc_status=$?
rxe_vm wait --state "$state" --job rping --timeout "$guest_grace" >"$out/rping.rxe" 2>&1
rping_status=$?
kill "$stats_pid" 2>/dev/null
wait "$stats_pid" 2>/dev/null

# --- the verdict ------------------------------------------------------------
show() {  # NAME: both sides' output
  echo "--- $1, host (uroce through the daemon), status $(cat "$out/$1.status" 2>/dev/null || echo none):"
  tail -n 20 "$out/$1.uroce"
  echo "--- $1, guest (rxe):"
  tail -n 20 "$out/$1.rxe"
}
check_pair() {  # NAME GUEST_STATUS EXPECT DESCRIPTION
  local name=$1 gstatus=$2 expect=$3 what=$4
  local hstatus
  hstatus=$(cat "$out/$name.status" 2>/dev/null || echo "none (still running)")
  if [[ $gstatus -ne 0 || $hstatus != 0 ]] || ! grep -qE "$expect" "$out/$name.rxe" ||
    ! grep -qE "$expect" "$out/$name.uroce"; then
    show "$name"
    echo "FAIL: $what: guest status $gstatus, host status $hstatus" >&2
    return 1
  fi
  echo "ok: $what: host side at $(since "$(cat "$out/$name.start")")-$(since "$(cat "$out/$name.end")") s;" \
    "$(grep -E "$expect" "$out/$name.rxe" | tail -1 | cut -c1-80)"
}
t0=$(cat "$out/rc.start")
pairs_ok=1
check_pair rc "$rc_status" "1500 iters in" "ibv_rc_pingpong -c 4 KiB x 1500, IPv6 GIDs, rxe client -> uroce server" ||
  pairs_ok=0
check_pair rping "$rping_status" "ping data: rdma-ping-1499: " "rping -V 512 B x 1500, IPv4, rxe client -> uroce server" ||
  pairs_ok=0
[[ $pairs_ok -eq 1 ]] || fail "the pairs did not both succeed (above); the daemon's log:
$(cat "$out/daemon.log")"

# Overlap, from the daemon's own counters: consecutive stats samples in which
# both programs are attached and both one's frames received and sent grew.
overlap=$(awk '
  /^=== / { if (n) samples(); t = $2; n = 1; delete f; next }
  /^process / {
    prog = ""; fr = 0
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      if (kv[1] == "program") prog = kv[2]
      if (kv[1] == "rx_frames" || kv[1] == "tx_frames") fr += kv[2]
    }
    f[prog] = fr
  }
  function samples() {
    both = ("ibv_rc_pingpong" in f) && ("rping" in f)
    if (both) seen++
    if (both && pboth && f["ibv_rc_pingpong"] > prc && f["rping"] > prp) {
      grew++
      if (!first) first = sprintf("%.1f-%.1f", pt, t)
    }
    pboth = both; prc = f["ibv_rc_pingpong"]; prp = f["rping"]; pt = t
  }
  END { if (n) samples(); printf "%d %d %s\n", seen, grew, first }
' "$out/stats.txt")
read -r both_seen both_grew both_first <<<"$overlap"
grep -q '^process ' "$out/stats.txt" || fail "no stats sample listed any process: $(head -n 20 "$out/stats.txt")"
[[ ${both_seen:-0} -ge 2 ]] ||
  fail "uroce stats --daemon never listed both processes attached in two samples (in $both_seen); see stats.txt"
[[ ${both_grew:-0} -ge 1 ]] ||
  fail "no two stats samples in which both processes' frame counters grew: the pairs did not run at the same time"
echo "ok: the daemon listed both processes in $both_seen samples; both moved frames between $both_grew pairs of" \
  "consecutive samples (the first at $(since "${both_first%-*}")-$(since "${both_first#*-}") s)"
grep '^process ' "$out/stats.txt" | awk '!seen[$3]++' | sed 's/^/  /'

# ping beside RoCE: its time span lies inside both pairs'.
for v in 4 6; do
  st=ping${v}_status
  if [[ ${!st} -ne 0 ]] || ! grep -q " 0% packet loss" "$out/ping$v.txt"; then
    fail "ping -$v from the host to the guest beside RoCE: status ${!st}: $(cat "$out/ping$v.txt")"
  fi
  echo "ok: the guest answers ping -$v beside RoCE: $(grep 'packet loss' "$out/ping$v.txt")"
done
[[ $guest_ping_status -eq 0 ]] && grep -q " 0% packet loss" "$out/ping_guest.txt" ||
  fail "ping from the guest to $RXE_VM_HOST_IP beside RoCE: status $guest_ping_status: $(cat "$out/ping_guest.txt")"
echo "ok: the host kernel answers the guest's ping to $RXE_VM_HOST_IP: $(grep 'packet loss' "$out/ping_guest.txt")"
for name in rc rping; do
  before "$ping_end" "$(cat "$out/$name.end")" ||
    fail "the pings ($ping_start-$ping_end) did not end before $name did ($(cat "$out/$name.end")): no proof they ran beside RoCE"
done
echo "ok: the pings ran at $(since "$ping_start")-$(since "$ping_end") s, while both pairs did"

# --- SIGTERM: the daemon exits 0 and leaves the tap as it was ----------------
kill -TERM "$daemon_pid"
for _ in $(seq 150); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$daemon_pid" 2>/dev/null && fail "the daemon did not stop within 15 s of SIGTERM"
wait "$daemon_pid"
daemon_status=$?
daemon_pid=
[[ $daemon_status -eq 0 ]] || fail "the daemon exited with status $daemon_status on SIGTERM: $(tail -n 5 "$out/daemon.log")"
ip -n "$RXE_VM_NETNS" link show "$RXE_VM_TAP" | grep -q 'prog/xdp' &&
  fail "the daemon left its XDP program on $RXE_VM_TAP"
# DPDK 22.11's af_xdp driver does not take back the buffers it gave the
# kernel (its fill ring, sends not completed): the daemon counts them apart
# (at most 2048 + 1024 for one queue); every other buffer must be back.
grep -qE "mbufs back in the pool: ([0-9]+) of 32767(; the other [0-9]+ were given to the kernel by DPDK's af_xdp driver \(at most 3072\)|$)" \
  "$out/daemon.log" || fail "the daemon lost mbufs: $(grep -E 'mbufs back|stopped' "$out/daemon.log")"
grep -E "released pid|mbufs back" "$out/daemon.log"

# --- the capture: no RoCE frame reached the kernel's stack ------------------
rxe_vm stop --state "$state" --save-to "$out" --label daemon >/dev/null
[[ -f $out/daemon.pcap ]] || fail "no capture was saved"
"$uroce" dump "$out/daemon.pcap" >"$out/daemon.dump.txt" 2>&1 || fail "uroce dump found bad frames in the capture"
summary=$(tail -n 1 "$out/daemon.dump.txt")
[[ $summary =~ ^frames\ [1-9][0-9]*,\ roce\ 0, ]] ||
  fail "the capture of the tap holds RoCE frames (the XDP program let them through to the kernel): $summary"
echo "ok: capture of the tap: $summary (RoCE went to uroce's AF_XDP socket, not through the kernel)"
ok=1
echo "PASS: kernel rxe in the guest and two processes behind one uroce daemon on the tap (af_xdp), at the same time"
