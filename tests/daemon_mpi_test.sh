#!/usr/bin/env bash
# Open MPI through `uroce daemon`: one mpirun job of four ranks,
# two on each of two "hosts", every rank attached to its host's daemon with
# no uroce configuration of its own, messages on Open MPI's OFI MTL over
# "uroce;ofi_rxm" (`--mca pml cm --mca mtl ofi`, the MTL restricted to
# uroce). A host is a network namespace with a UTS namespace of its own
# (hostname umpi-a, umpi-b); a veth pair joins them, with kernel IPv4
# addresses on both ends for Open MPI's own TCP (mpirun <-> orted), and a
# `uroce daemon` in each namespace whose uplink is that namespace's veth end.
# tests/mpi_two_hosts.c checks the layout (two ranks on each of two hosts),
# ping-pong between the two ranks of each host (through the host's daemon:
# the frames never reach the wire) and between ranks on different hosts
# (across the veth), every byte checked, and MPI_Allreduce sums checked on
# every rank.
# Checks: mpirun exits 0 in time; all four ranks on "uroce;ofi_rxm"
# (mtl_ofi_verbose); each rank attached to the daemon of its own namespace
# (the daemons' logs); every result line of the program; on the wire
# (tcpdump on host A's veth end, decoded by `uroce dump`): RoCE frames
# between the two hosts' addresses, none from a host to itself; both daemons
# alive throughout (one that dies stops the job at once, not at the limit)
# and stopping cleanly.
#
# How mpirun starts ranks in two namespaces (Debian 12's Open MPI 4.1, ORTE):
# a hostfile names the hosts umpi-a and umpi-b, two slots each; mpirun runs
# in namespace A under hostname umpi-a, so ORTE takes umpi-a for its own node
# and starts those ranks itself; for umpi-b it runs its rsh agent (ssh's
# place, `--mca plm_rsh_agent`), tests/daemon_mpi_rsh.sh, which starts the
# orted in namespace B under hostname umpi-b. The orted calls mpirun back
# over TCP on the veth's kernel addresses (`--mca oob_tcp_if_include` the
# veth's subnet, so that ORTE offers only addresses that reach across);
# PMIx traffic between the ranks' hosts rides on that
# connection, each rank talks to its own orted locally. Distinct hostnames
# matter: Open MPI keys its session directories (/tmp/ompi.HOST.UID, shared
# by both namespaces here) and its notion of a node on them.
#
# The uplink (UPLINK, the 6th argument, or $UMPI_UPLINK): af_packet (the
# default, as tests/daemon_test.sh) gives each daemon net_af_packet on its
# veth end with IPv4 addresses of uroce's own (10.78.0.11, .12), beside the
# kernel's (.1, .2) on the same interface; kernel gives `port =
# kernel:IFACE`, the daemon sharing the kernel's interface and addresses
# (net_af_xdp; see start_daemon). Host A's wire is checked with tcpdump in
# af_packet mode only: frames that XDP hands to an AF_XDP socket, and those
# sent from one, bypass the kernel's packet taps, so tcpdump sees none; in
# kernel mode the daemons' uplink counters show that frames crossed.
#
# Needs root (namespaces). Every process runs under `timeout`; cleanup kills
# whatever still runs in the two namespaces and removes them, on every exit.
#   args: UROCE VETH_TOOL MPI_PROGRAM RANK_WRAPPER RSH_AGENT [UPLINK]
set -uo pipefail
abs() {
  [[ -e $1 ]] || { echo "FAIL: $1 does not exist" >&2; exit 1; }
  readlink -f "$1"
}
UROCE=$(abs "$1") && VETH=$(abs "$2") && PROGRAM=$(abs "$3") && WRAPPER=$(abs "$4") && AGENT=$(abs "$5") || exit 1
UPLINK=${6:-${UMPI_UPLINK:-af_packet}}
MPI_LIMIT=180  # a passing run takes 3-15 s on a busy 2-core machine
id=$$
ns_a=umpi-$id-a
ns_b=umpi-$id-b
if_a=umpi$id-a  # interface names: 15 bytes at most
if_b=umpi$id-b
net=10.78.0
TMP=$(mktemp -d /tmp/umpi.XXXXXX)  # short: socket paths have 108 bytes
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# show_log FILE MAX: the file, at most MAX lines of it (a daemon whose memif
# listener breaks can log the same error thousands of times).
show_log() {
  head -n "$2" "$1"
  local n
  n=$(wc -l < "$1")
  [[ $n -le $2 ]] || echo "... ($((n - $2)) more lines in $1)"
}
# Stops everything left in our namespaces (daemons, orted, ranks, tcpdump),
# then removes them.
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local p ns
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in "$ns_a" "$ns_b"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  "$VETH" down "$ns_a" "$ns_b" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: daemon_mpi_test needs root to make network namespaces"
  exit 1
fi
for tool in mpirun orted unshare tcpdump; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (tools/packages.txt)"; exit 1; }
done
if ! out=$("$VETH" up "$ns_a" "$ns_b" "$if_a" "$if_b" 2>&1); then
  echo "$out"
  echo "FAIL: cannot make network namespaces and a veth pair here; this test needs them"
  exit 1
fi
# The kernel's addresses, for Open MPI's TCP between mpirun and the orted.
ip -n "$ns_a" addr add "$net.1/24" dev "$if_a" || { echo "FAIL: cannot address $if_a"; exit 1; }
ip -n "$ns_b" addr add "$net.2/24" dev "$if_b" || { echo "FAIL: cannot address $if_b"; exit 1; }

# start_daemon NAMESPACE IFACE KERNEL_IP UROCE_IP: the namespace's `uroce
# daemon`, control socket $TMP/NAMESPACE.sock (tests/daemon_mpi_rank.sh
# finds it there), log $TMP/NAMESPACE.daemon.log; returns once it is ready.
# Sets DAEMON_IP[NAMESPACE] to the address uroce uses there.
declare -A DAEMON_IP DAEMON_PID
start_daemon() {
  local ns=$1 ifc=$2 kernel_ip=$3 own_ip=$4 uplink
  case $UPLINK in
    # An address of uroce's own beside the kernel's: net_af_packet hands the
    # daemon a copy of every frame and the kernel gets them too; each
    # answers ARP for its own address only.
    af_packet) uplink="port = net_af_packet0,iface=$ifc,qpairs=1
ipv4 = $own_ip" ;;
    # The kernel's interface, shared: uroce takes the kernel's address
    # (UMPI_KERNEL_IO: auto, af_xdp or af_packet).
    kernel) uplink="port = kernel:$ifc
kernel_io = ${UMPI_KERNEL_IO:-auto}"; own_ip=$kernel_ip ;;
    *) echo "FAIL: UMPI_UPLINK=$UPLINK: af_packet or kernel"; exit 1 ;;
  esac
  cat > "$TMP/$ns.ini" <<EOF
[eal]
lcores = 0
hugepages = no
memory = 256
file_prefix = umpi-$id-$ns
log_level = *:error
telemetry = no
[daemon]
socket = $TMP/$ns.sock
[endpoint.eth0]
$uplink
ipv6 =
mtu = 1500
EOF
  ip netns exec "$ns" timeout -k 5 $((MPI_LIMIT + 120)) "$UROCE" daemon --config "$TMP/$ns.ini" \
    > "$TMP/$ns.daemon.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  DAEMON_PID[$ns]=$pid
  DAEMON_IP[$ns]=$own_ip
  for _ in $(seq 100); do
    grep -q "control socket" "$TMP/$ns.daemon.log" 2>/dev/null && [[ -S $TMP/$ns.sock ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$TMP/$ns.daemon.log"
  echo "FAIL: the daemon of $ns did not start ($UPLINK uplink)"
  exit 1
}

echo "== two hosts, a daemon on each ($UPLINK uplink)"
start_daemon "$ns_a" "$if_a" "$net.1" "$net.11"
start_daemon "$ns_b" "$if_b" "$net.2" "$net.12"
ip_a=${DAEMON_IP[$ns_a]}
ip_b=${DAEMON_IP[$ns_b]}
head -1 "$TMP/$ns_a.daemon.log" "$TMP/$ns_b.daemon.log"

# Host A's wire: every RoCE frame that leaves or reaches host A.
tcpdump_pid=""
if [[ $UPLINK == af_packet ]]; then
  ip netns exec "$ns_a" timeout -k 5 $((MPI_LIMIT + 60)) tcpdump -i "$if_a" -U -n -w "$TMP/wire.pcap" \
    udp port 4791 > "$TMP/tcpdump.log" 2>&1 &
  tcpdump_pid=$!
  pids+=("$tcpdump_pid")
  for _ in $(seq 100); do
    grep -q "listening on" "$TMP/tcpdump.log" && break
    sleep 0.1
  done
  grep -q "listening on" "$TMP/tcpdump.log" || { cat "$TMP/tcpdump.log"; echo "FAIL: tcpdump did not start"; exit 1; }
fi

echo "== mpirun -np 4, two ranks on each host"
printf 'umpi-a slots=2\numpi-b slots=2\n' > "$TMP/hostfile"
export UMPI_HOSTS="umpi-a=$ns_a umpi-b=$ns_b"
export UMPI_AGENT_LIMIT=$((MPI_LIMIT + 30))
unset UROCE_CONFIG UROCE_DAEMON
log=$TMP/mpirun.log
start=$(date +%s.%N)
# --allow-run-as-root: CI runs as root. --oversubscribe: four ranks on a
# 2-core machine. --bind-to none: uroce pins its own lcore (EAL), mpirun
# must not bind first. btl self,vader and no osc/ucx: keep Open MPI away from
# verbs devices (`uroce exec` puts uroce's libibverbs.so.1 in front) and from
# TCP between ranks; pml cm uses no btl for point-to-point.
# shellcheck disable=SC2016  # expanded by the inner shell
timeout -k 10 "$MPI_LIMIT" ip netns exec "$ns_a" unshare --uts -- \
  /bin/sh -c 'hostname umpi-a && exec "$@"' sh \
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 --hostfile "$TMP/hostfile" \
  --mca plm rsh --mca plm_rsh_agent "$AGENT" --mca oob_tcp_if_include "$net.0/24" \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include uroce --mca mtl_ofi_verbose 1 \
  --mca btl self,vader --mca osc ^ucx \
  "$WRAPPER" "$UROCE" "$TMP" -- "$PROGRAM" > "$log" 2>&1 &
mpirun_pid=$!
pids+=("$mpirun_pid")
# A daemon that dies leaves its ranks waiting: stop the job at once then,
# rather than at the time limit.
died=""
start_wait=$SECONDS
dumped=""
while kill -0 "$mpirun_pid" 2>/dev/null; do
  # A hang: what each daemon sees while the ranks still run (per process
  # frames, links, CM routing), for whoever reads the log.
  if [[ -z $dumped ]] && (( SECONDS - start_wait > MPI_LIMIT - 15 )); then
    dumped=yes
    for ns in "$ns_a" "$ns_b"; do
      echo "--- uroce stats of $ns before the time limit"
      timeout 10 "$UROCE" stats --daemon "$TMP/$ns.sock" 2>&1
    done
  fi
  for ns in "$ns_a" "$ns_b"; do
    if [[ -z $died ]] && ! kill -0 "${DAEMON_PID[$ns]}" 2>/dev/null; then
      died=$ns
      fail "the daemon of $ns died during the run"
      kill -TERM "$mpirun_pid" 2>/dev/null
    fi
  done
  sleep 0.2
done
wait "$mpirun_pid"
rc=$?
took=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }")
# (without mtl_ofi_verbose's line per provider it skipped)
grep -v 'mtl:ofi: ".*" not in include list' "$log" > "$TMP/mpirun.short"
show_log "$TMP/mpirun.short" 200
echo "mpirun: exit $rc after $took s"
if [[ -n $died ]]; then
  :  # counted above; mpirun was stopped
elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
  fail "mpirun timed out after $MPI_LIMIT s"
elif [[ $rc -ne 0 ]]; then
  fail "mpirun exit $rc"
fi
if [[ -n $tcpdump_pid ]]; then
  kill -INT "$tcpdump_pid" 2>/dev/null
  wait "$tcpdump_pid"
fi

echo "== checks"
provs=$(grep -c 'mtl:ofi:prov: uroce;ofi_rxm$' "$log")
[[ $provs -eq 4 ]] || fail "expected all four ranks on 'uroce;ofi_rxm', found $provs 'mtl:ofi:prov' lines for it"
# Each rank on its host, attached to that host's daemon (its pid in the log).
for ns in "$ns_a" "$ns_b"; do
  host=umpi-a
  [[ $ns == "$ns_b" ]] && host=umpi-b
  n=0
  while read -r rank pid; do
    grep -q "attached pid $pid " "$TMP/$ns.daemon.log" || fail "rank $rank (pid $pid) did not attach to the daemon of $ns"
    grep -q "^layout: rank $rank on $host\$" "$log" || fail "rank $rank in $ns does not report host $host"
    n=$((n + 1))
  done < <(sed -n "s/^daemon_mpi_rank: rank \([0-9]*\) pid \([0-9]*\) on $host in namespace $ns, .*/\1 \2/p" "$log")
  [[ $n -eq 2 ]] || fail "$n ranks started in $ns ($host), not 2"
done
for phase in same-host cross-host; do
  for size in 64 256 1024 4096 16384 65536 262144 1048576; do
    n=$(grep -cE "^$phase ranks [0-9]-[0-9] \(umpi-[ab], umpi-[ab]\): size $size: [0-9]+ round trips verified" "$log")
    [[ $n -eq 2 ]] || fail "$phase: $n pairs verified at $size B, not 2"
  done
done
grep -qE '^same-host ranks [0-9]-[0-9] \((umpi-a, umpi-a|umpi-b, umpi-b)\)' "$log" || fail "no same-host pair on one host"
grep -qE '^cross-host ranks [0-9]-[0-9] \((umpi-a, umpi-b|umpi-b, umpi-a)\)' "$log" || fail "no cross-host pair across hosts"
for rank in 0 1 2 3; do
  grep -q "^rank $rank: allreduce verified: sum 10, 262144 elements\$" "$log" || fail "rank $rank: no verified MPI_Allreduce"
done
grep -q '^mpi_two_hosts: PASS' "$log" || fail "no PASS line from mpi_two_hosts"

# The wire: frames between the hosts, none from a host to itself (two ranks
# of one host talk through their daemon's switch).
if [[ $UPLINK == af_packet ]]; then
  if ! "$UROCE" dump "$TMP/wire.pcap" > "$TMP/wire.txt" 2>&1; then
    fail "uroce dump of host A's wire: $(tail -3 "$TMP/wire.txt")"
  fi
  tail -1 "$TMP/wire.txt"
  # Lines "N  SRC:PORT > DST:PORT  ...": frames between the hosts, from a host
  # to itself, and between any other addresses.
  read -r across self other < <(awk -v a="$ip_a" -v b="$ip_b" '
    $3 == ">" {
      s = $2; d = $4; sub(/:[0-9]+$/, "", s); sub(/:[0-9]+$/, "", d)
      if ((s == a && d == b) || (s == b && d == a)) x++; else if (s == d) y++; else z++
    }
    END { print x + 0, y + 0, z + 0 }' "$TMP/wire.txt")
  [[ $across -gt 0 ]] || fail "no RoCE frame between $ip_a and $ip_b on host A's wire"
  [[ $self -eq 0 ]] || fail "$self frames from a host to itself on the wire: two ranks of one host must talk through their daemon"
  [[ $other -eq 0 ]] || fail "$other frames between other addresses on the wire"
  echo "wire: $across RoCE frames between the hosts, $self from a host to itself, $other others"
else
  echo "wire: not captured (AF_XDP frames bypass tcpdump); the uplinks' counters:"
  for ns in "$ns_a" "$ns_b"; do
    out=$(timeout 30 "$UROCE" stats --daemon "$TMP/$ns.sock" 2>&1)
    grep "^uplink" <<<"$out"
    grep -qE "^uplink rx_frames=[1-9][0-9]* tx_frames=[1-9]" <<<"$out" || fail "the uplink of $ns carried nothing: $out"
  done
fi

# The daemons stop cleanly with every mbuf back.
for ns in "$ns_a" "$ns_b"; do
  if kill -0 "${DAEMON_PID[$ns]}" 2>/dev/null; then
    kill -TERM "${DAEMON_PID[$ns]}"
    wait "${DAEMON_PID[$ns]}" || fail "the daemon of $ns did not stop cleanly"
    # (DPDK's af_xdp driver keeps up to 3072 mbufs in the kernel's rings
    # until the pool goes: the daemon says so; see tests/daemon_kernel_test.)
    grep -qE "mbufs back in the pool: ([0-9]+) of (\1$|32767; the other [0-9]+ were given to the kernel by DPDK's af_xdp driver \(at most 3072\))" \
      "$TMP/$ns.daemon.log" || fail "the daemon of $ns did not get every mbuf back"
  fi
  echo "--- daemon log ($ns)"
  show_log "$TMP/$ns.daemon.log" 40
  # DPDK's complaints (e.g. "EAL: Error: Invalid memory", an rte_free of
  # memory it does not know) are shown, not counted: memif's teardown races
  # inside DPDK can log them (pmd/port_close_test.cc shows such a race).
  grep -q "^EAL: Error\|PANIC" "$TMP/$ns.daemon.log" && echo "WARNING: the daemon of $ns logged DPDK errors (above)"
done

echo "mpirun took $took s"
if [[ $FAILS -ne 0 ]]; then
  echo "$FAILS failure(s)"
  exit 1
fi
echo PASS
