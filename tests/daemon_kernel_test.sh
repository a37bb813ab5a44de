#!/usr/bin/env bash
# `uroce daemon` on the kernel's own interface: two
# network namespaces ("hosts") joined by a veth pair, each interface with the
# kernel's IPv4 and IPv6 addresses; a daemon in each with
# `port = kernel:IFNAME`, so uroce uses the kernel's addresses and MAC:
#   1. af_xdp: the XDP program is attached; ib_write_bw across over the IPv4
#      and the IPv6 GID, rping over IPv6 (neighbours from the kernel's table,
#      flushed first), while ping and a TCP transfer (checksummed) run
#      through the same interfaces: no ping lost, every byte arrives; STATS'
#      xdp line counts the RoCE frames the program steered;
#   2. kill -9 of a daemon leaves its program attached, and ping still
#      works; a new daemon replaces the stale program; SIGTERM detaches it;
#   3. kernel_io = af_packet: rping across, and the kernel sends no ICMP port
#      unreachable for the RoCE frames it also sees;
#   4. auto with somebody else's XDP program on the interface: the daemon
#      leaves it, says so, and falls back to af_packet; rping across;
#   5. two uplinks in one daemon (a second veth pair to a third namespace):
#      UDP 4791 that A routes from B to C is not taken by A's XDP program;
#      programs see uroce0 and uroce1; ibv_rc_pingpong from uroce0 to
#      uroce1's address (between the switches, on no wire); ib_write_bw
#      over uroce1, and rping to
#      each peer (rdma_cm picks the device the host's route leads through);
#   6. another user (uid 65534) holding UDP port 4791 on a wildcard or the
#      host's address before the daemon starts: the daemon refuses to start
#      and names the holder.
# Needs root (namespaces, XDP). Every process runs under `timeout`; the
# namespaces go on every exit path. No assertion on speed.
#   args: UROCE OTHER_XDP_OBJECT
set -uo pipefail
UROCE=$1
OTHER_XDP=$2
id=$$
ns_a=uroce-k$id-a
ns_b=uroce-k$id-b
ns_c=uroce-k$id-c
if_a=uk$id-a
if_b=uk$id-b
TMP=$(mktemp -d /tmp/uroce-kernel-test.XXXXXX)
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
source "$(dirname "$0")/pair_lib.sh"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  # Each pid is timeout(1): its program first (SIGKILL is not passed on).
  for p in "${pids[@]}"; do
    pkill -KILL -P "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  ip netns del "$ns_c" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: daemon_kernel_test needs root to make network namespaces and attach XDP programs"
  exit 1
fi
ip netns add "$ns_a" && ip netns add "$ns_b" &&
  ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b" || {
  echo "FAIL: cannot make network namespaces and a veth pair here"
  exit 1
}
A=(ip netns exec "$ns_a")
B=(ip netns exec "$ns_b")
for side in "$ns_a $if_a 1" "$ns_b $if_b 2"; do
  read -r ns ifc n <<<"$side"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$ifc" up
  ip -n "$ns" addr add "10.75.0.$n/24" dev "$ifc"
  ip -n "$ns" addr add "fd00:75::$n/64" dev "$ifc" nodad
done

# write_config NAME SIDE IFACE KERNEL_IO
write_config() {
  cat > "$TMP/$1.ini" <<EOF
[eal]
lcores = 0
hugepages = no
memory = 256
file_prefix = uroce-kernel-test-$id-$1
log_level = *:error
telemetry = no
[daemon]
socket = $TMP/$1.sock
[endpoint.eth0]
port = kernel:$3
kernel_io = $4
EOF
}

# start_daemon NAME NAMESPACE-ARRAY-NAME KERNEL_IO: waits for its log line.
start_daemon() {
  local name=$1 io=$3
  local -n in_ns=$2
  local ifc=$if_a
  [[ $2 == B ]] && ifc=$if_b
  write_config "$name" "$2" "$ifc" "$io"
  "${in_ns[@]}" timeout -k 5 300 "$UROCE" daemon --config "$TMP/$name.ini" > "$TMP/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  # $! is timeout(1); the daemon is its child (kill -9 must reach it).
  eval "${name}_pid=$pid"
  for _ in $(seq 100); do
    if grep -q "control socket" "$TMP/$name.log" 2>/dev/null && [[ -S $TMP/$name.sock ]]; then
      eval "${name}_daemon=$(pgrep -P "$pid" | head -1)"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$TMP/$name.log"
  fail "daemon $name ($io) did not start"
  return 1
}

stop_daemon() {  # NAME: SIGTERM, must exit 0 within 10 s
  local pid
  pid=$(eval echo "\$${1}_pid")
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "daemon $1 did not stop on SIGTERM"; kill -KILL "$pid"; fi
  # $pid is timeout(1) (ip netns exec execs it): the daemon's own status.
  wait "$pid" 2>/dev/null
  local status=$?
  [[ $status -eq 0 ]] || fail "daemon $1 exited $status on SIGTERM: $(tail -3 "$TMP/$1.log")"
}

xdp_prog() { ip -n "$1" link show "$2" | grep -o 'prog/xdp id [0-9]* name [a-z_]*' | awk '{print $5}'; }

# rdma NAME LIMIT EXPECT SERVER-ARGS -- CLIENT-ARGS: a program (the first
# word of SERVER-ARGS) in B attached to daemon b, its client in A attached
# to daemon a; both must exit 0 and the client print EXPECT.
rdma() {
  local name=$1 limit=$2 expect=$3
  shift 3
  local server=() client=()
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  UROCE_DAEMON=$TMP/b.sock "${B[@]}" timeout -k 5 "$limit" "$UROCE" exec -- "${server[@]}" > "$TMP/$name.server" 2>&1 &
  local spid=$!
  # perftest's server is ready when it listens on its TCP port; an rdma_cm
  # client that came too early is rejected (nobody listens yet) and tries
  # again.
  local port="" attempt crc
  for a in "${server[@]}"; do [[ $a =~ ^[0-9]{5}$ ]] && port=$a; done
  if [[ -n $port ]]; then
    for _ in $(seq 100); do
      "${B[@]}" ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  for attempt in $(seq 20); do
    UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout -k 5 "$limit" "$UROCE" exec -- "${client[@]}" > "$TMP/$name.client" 2>&1
    crc=$?
    [[ -n $port ]] && break
    cm_client_should_retry "$name" "$crc" "$spid" || break
  done
  [[ $crc -ne 0 ]] && kill -TERM "$spid" 2>/dev/null
  wait "$spid"
  local src=$?
  pair_verdict "$name" "$src" "$crc" "$expect"
}

echo "== 1. af_xdp in both namespaces"
start_daemon a A af_xdp || exit 1
start_daemon b B af_xdp || exit 1
for pair in "$ns_a $if_a a" "$ns_b $if_b b"; do
  read -r ns ifc name <<<"$pair"
  grep -q "uroce0 on net_af_xdp on $ifc" "$TMP/$name.log" || fail "daemon $name is not on net_af_xdp: $(cat "$TMP/$name.log")"
  [[ $(xdp_prog "$ns" "$ifc") == uroce_steer ]] || fail "no uroce_steer XDP program on $ifc: $(ip -n "$ns" link show "$ifc")"
done
grep -q "addresses 10.75.0.1, fd00:75::1" "$TMP/a.log" || fail "daemon a does not use the kernel's addresses: $(cat "$TMP/a.log")"
mac_a=$(ip -n "$ns_a" -br link show "$if_a" | awk '{print $3}')
grep -q "MAC $mac_a" "$TMP/a.log" || fail "daemon a does not use the interface's MAC $mac_a"
ip -n "$ns_a" neigh flush all
ip -n "$ns_b" neigh flush all

# Beside RoCE: ping (0.05 s apart, for ~6 s) and a TCP transfer of 64 MiB,
# checksummed at both ends.
"${A[@]}" timeout 30 ping -q -i 0.05 -c 120 10.75.0.2 > "$TMP/ping.log" 2>&1 &
ping_pid=$!
pids+=("$ping_pid")
"${B[@]}" timeout 60 python3 -c '
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.75.0.2", 5201)); s.listen(1); c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 16)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest())' > "$TMP/tcp.server" 2>&1 &
tcp_server=$!
pids+=("$tcp_server")
for _ in $(seq 50); do "${B[@]}" ss -ltnH "sport = :5201" | grep -q . && break; sleep 0.1; done
"${A[@]}" timeout 60 python3 -c '
import hashlib, socket, time
h = hashlib.sha256(); block = bytes(range(256)) * 256; s = socket.create_connection(("10.75.0.2", 5201))
for i in range(1024):
    b = block[i % 256:] + block[:i % 256]; s.sendall(b); h.update(b); time.sleep(0.004)
s.close(); print(1024 * len(block), h.hexdigest())' > "$TMP/tcp.client" 2>&1 &
tcp_client=$!
pids+=("$tcp_client")

rdma write_bw_ipv4 60 "65536  *2000" ib_write_bw -d uroce0 -x 0 -s 65536 -n 2000 -p 18515 -- \
  ib_write_bw -d uroce0 -x 0 -s 65536 -n 2000 -p 18515 10.75.0.2
rdma write_bw_ipv6 60 "65536  *2000" ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000 -p 18516 -- \
  ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000 -p 18516 10.75.0.2
rdma rping_ipv6 60 "rdma-ping-9:" rping -s -a fd00:75::2 -C 10 -v -- rping -c -a fd00:75::2 -C 10 -v

wait "$tcp_client"; tcp_rc=$?
wait "$tcp_server"
if [[ $tcp_rc -ne 0 ]] || [[ "$(cat "$TMP/tcp.client")" != "$(cat "$TMP/tcp.server")" ]] || ! [[ -s $TMP/tcp.client ]]; then
  fail "the TCP transfer beside RoCE: client '$(cat "$TMP/tcp.client")' server '$(cat "$TMP/tcp.server")'"
else
  echo "ok: TCP transfer beside RoCE: $(cat "$TMP/tcp.server")"
fi
wait "$ping_pid"
grep -q " 0% packet loss" "$TMP/ping.log" || fail "ping beside RoCE lost packets: $(cat "$TMP/ping.log")"
echo "ok: ping beside RoCE: $(grep 'packet loss' "$TMP/ping.log")"
UROCE_DAEMON=$TMP/a.sock "$UROCE" stats --daemon "$TMP/a.sock" > "$TMP/stats.a" 2>&1
grep -q "neighbor_answers=[1-9]" "$TMP/stats.a" || fail "daemon a answered no neighbour question from the kernel's table: $(cat "$TMP/stats.a")"
# The XDP program took RoCE for A's addresses, all of it to A's one queue's
# socket and to A's MAC.
grep -qE "^xdp device=uroce0 steered=[1-9][0-9]* not_ours=[0-9]+ no_socket=0 bad_mac=0 " "$TMP/stats.a" ||
  fail "daemon a's XDP program steered nothing, or dropped RoCE: $(grep '^xdp' "$TMP/stats.a")"
echo "ok: $(grep '^xdp' "$TMP/stats.a")"

echo "== 2. kill -9 leaves the program; a new daemon replaces it; SIGTERM detaches"
[[ -n $a_daemon ]] || fail "no pid for daemon a"
kill -KILL "$a_daemon"
wait "$a_pid" 2>/dev/null
[[ $(xdp_prog "$ns_a" "$if_a") == uroce_steer ]] || fail "the killed daemon's program is gone (expected it left behind)"
"${A[@]}" timeout 10 ping -q -c 3 -i 0.2 10.75.0.2 > "$TMP/ping2.log" 2>&1 ||
  fail "ping with a stale uroce program on the interface: $(cat "$TMP/ping2.log")"
start_daemon a A af_xdp
grep -q "uroce0 on net_af_xdp" "$TMP/a.log" || fail "the new daemon did not replace the stale program: $(cat "$TMP/a.log")"
rdma rping_after_restart 60 "rdma-ping-4:" rping -s -a 10.75.0.2 -C 5 -v -- rping -c -a 10.75.0.2 -C 5 -v
stop_daemon a
[[ -z $(xdp_prog "$ns_a" "$if_a") ]] || fail "SIGTERM left the XDP program attached"
# DPDK 22.11's af_xdp driver does not take back the buffers it gave the
# kernel (its fill ring, sends not completed) when the port closes: the
# daemon counts them apart (at most 2048 + 1024 for one queue), and every
# other buffer must be back.
grep -qE "mbufs back in the pool: ([0-9]+) of 32767(; the other [0-9]+ were given to the kernel by DPDK's af_xdp driver \(at most 3072\)|$)" \
  "$TMP/a.log" || fail "daemon a: $(grep 'mbufs back' "$TMP/a.log")"

echo "== 3. kernel_io = af_packet"
# ICMP destination unreachable messages namespace A's kernel sent (the
# OutDestUnreachs column of /proc/net/snmp's Icmp lines, found by name).
icmp_unreach() {
  "${A[@]}" awk '/^Icmp:/ { if (!h) { for (i = 2; i <= NF; i++) if ($i == "OutDestUnreachs") c = i; h = 1 } else print $c }' \
    /proc/net/snmp
}
before=$(icmp_unreach)
start_daemon a A af_packet
grep -q "uroce0 on net_af_packet on $if_a" "$TMP/a.log" || fail "daemon a is not on net_af_packet: $(cat "$TMP/a.log")"
rdma rping_af_packet 60 "rdma-ping-9:" rping -s -a 10.75.0.2 -C 10 -v -- rping -c -a 10.75.0.2 -C 10 -v
rdma write_bw_af_packet 60 "65536  *500" ib_write_bw -d uroce0 -x 0 -s 65536 -n 500 -p 18517 -- \
  ib_write_bw -d uroce0 -x 0 -s 65536 -n 500 -p 18517 10.75.0.2
after=$(icmp_unreach)
[[ $before == "$after" ]] || fail "the kernel sent $((after - before)) ICMP destination unreachable beside af_packet"
stop_daemon a
grep -q "mbufs back in the pool: \([0-9]*\) of \1" "$TMP/a.log" || fail "daemon a: $(grep 'mbufs back' "$TMP/a.log")"

echo "== 4. somebody else's XDP program: auto falls back to af_packet"
ip -n "$ns_a" link set dev "$if_a" xdp obj "$OTHER_XDP" sec xdp || fail "cannot attach the foreign XDP program"
start_daemon a A auto
grep -q "already runs XDP program .* (other_pass)" "$TMP/a.log" || fail "no word of the foreign program: $(cat "$TMP/a.log")"
grep -q "uroce0 on net_af_packet on $if_a" "$TMP/a.log" || fail "daemon a did not fall back to af_packet"
rdma rping_fallback 60 "rdma-ping-4:" rping -s -a 10.75.0.2 -C 5 -v -- rping -c -a 10.75.0.2 -C 5 -v
stop_daemon a
[[ $(xdp_prog "$ns_a" "$if_a") == other_pass ]] || fail "the foreign XDP program was touched"
ip -n "$ns_a" link set dev "$if_a" xdp off

echo "== 5. two uplinks in one daemon"
if_a2=uk$id-a2
if_c=uk$id-c
ip netns add "$ns_c" && ip link add "$if_a2" netns "$ns_a" type veth peer name "$if_c" netns "$ns_c" ||
  fail "cannot make the third namespace"
C=(ip netns exec "$ns_c")
ip -n "$ns_c" link set lo up
ip -n "$ns_a" link set "$if_a2" up
ip -n "$ns_c" link set "$if_c" up
ip -n "$ns_a" addr add 10.75.1.1/24 dev "$if_a2"
ip -n "$ns_c" addr add 10.75.1.2/24 dev "$if_c"
write_config a A "$if_a" af_xdp
printf '[endpoint.second]\nport = kernel:%s\nkernel_io = af_xdp\n' "$if_a2" >> "$TMP/a.ini"
"${A[@]}" timeout -k 5 300 "$UROCE" daemon --config "$TMP/a.ini" > "$TMP/a.log" 2>&1 &
a_pid=$!
pids+=("$a_pid")
for _ in $(seq 100); do grep -q "uroce1 on" "$TMP/a.log" && break; sleep 0.1; done
# RoCE for an address that is not the uplink's stays the kernel's: A routes
# B's UDP 4791 datagrams to C's address (daemon c not started yet, so C's
# kernel delivers them to a plain socket), and A's XDP program on if_a
# passes them on to A's kernel instead of taking them.
"${A[@]}" sysctl -q net.ipv4.ip_forward=1
ip -n "$ns_b" route add 10.75.1.0/24 via 10.75.0.1
ip -n "$ns_c" route add 10.75.0.0/24 via 10.75.1.1
rm -f "$TMP/fwd.ready" "$TMP/fwd.count"
"${C[@]}" timeout 30 /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.75.1.2", 4791)); s.settimeout(2); open(sys.argv[1] + ".ready", "w").close(); n = 0
while True:
    try: s.recv(65536); n += 1
    except socket.timeout: break
open(sys.argv[1] + ".count", "w").write(str(n))
' "$TMP/fwd" > "$TMP/fwd.log" 2>&1 &
fwd_rx=$!
pids+=("$fwd_rx")
for _ in $(seq 100); do [[ -e $TMP/fwd.ready ]] && break; sleep 0.1; done
"${B[@]}" timeout 30 /usr/bin/python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(200): s.sendto(b"forwarded %d" % i, ("10.75.1.2", 4791)); time.sleep(0.002)
' || fail "cannot send to 10.75.1.2:4791 from B"
wait "$fwd_rx"
forwarded=$(cat "$TMP/fwd.count" 2>/dev/null || echo none)
stats=$(UROCE_DAEMON=$TMP/a.sock timeout 30 "$UROCE" stats --daemon "$TMP/a.sock" 2>&1)
if [[ $forwarded == 200 ]] && grep -qE "^xdp device=uroce0 steered=[0-9]+ not_ours=(2[0-9][0-9]|[3-9][0-9]{2}|[0-9]{4,}) " <<<"$stats"; then
  echo "ok: 200 UDP 4791 datagrams routed through A to C: $(grep '^xdp device=uroce0' <<<"$stats")"
else
  fail "UDP 4791 routed through A: C received $forwarded of 200; $(grep '^xdp' <<<"$stats") $(cat "$TMP/fwd.log")"
fi
ip -n "$ns_b" route del 10.75.1.0/24 via 10.75.0.1
ip -n "$ns_c" route del 10.75.0.0/24 via 10.75.1.1
"${A[@]}" sysctl -q net.ipv4.ip_forward=0
write_config c C "$if_c" af_xdp
"${C[@]}" timeout -k 5 300 "$UROCE" daemon --config "$TMP/c.ini" > "$TMP/c.log" 2>&1 &
c_pid=$!
pids+=("$c_pid")
for _ in $(seq 100); do
  grep -q "uroce1 on" "$TMP/a.log" && grep -q "control socket" "$TMP/c.log" && break
  sleep 0.1
done
grep -q "uroce0 on net_af_xdp on $if_a " "$TMP/a.log" && grep -q "uroce1 on net_af_xdp on $if_a2 " "$TMP/a.log" ||
  fail "daemon a does not have both uplinks: $(cat "$TMP/a.log")"
grep -q "UDP port 4791" "$TMP/a.log" && fail "daemon a's second uplink warned about its own UDP guard: $(cat "$TMP/a.log")"
devices=$(UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout 30 "$UROCE" exec -- ibv_devices 2>&1)
grep -q "uroce0" <<<"$devices" && grep -q "uroce1" <<<"$devices" || fail "ibv_devices through daemon a: $devices"
# ib_write_bw over uroce1 from A to C, rping to C (through uroce1, by the
# route) and to B (through uroce0).
UROCE_DAEMON=$TMP/c.sock "${C[@]}" timeout -k 5 60 "$UROCE" exec -- ib_write_bw -d uroce0 -x 0 -s 65536 -n 500 \
  -p 18518 > "$TMP/wbw2.server" 2>&1 &
wsrv=$!
for _ in $(seq 100); do "${C[@]}" ss -ltnH "sport = :18518" | grep -q . && break; sleep 0.1; done
if UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout -k 5 60 "$UROCE" exec -- ib_write_bw -d uroce1 -x 0 -s 65536 -n 500 \
  -p 18518 10.75.1.2 > "$TMP/wbw2.client" 2>&1 && grep -q "65536  *500" "$TMP/wbw2.client"; then
  echo "ok: ib_write_bw over uroce1: $(grep "65536  *500" "$TMP/wbw2.client")"
else
  fail "ib_write_bw over uroce1: $(tail -5 "$TMP/wbw2.client")"
fi
wait "$wsrv"
# Two processes of host A, one on each uplink, through each other's
# address: the frames cross between the daemon's two switches, never onto
# either wire (the host's own addresses, as the kernel loops them).
cross_before=$(UROCE_DAEMON=$TMP/a.sock timeout 30 "$UROCE" stats --daemon "$TMP/a.sock" 2>&1 |
  grep -oE "^uplink rx_frames=[0-9]+ tx_frames=[0-9]+" | sed 's/.*tx_frames=//' | awk '{ s += $1 } END { print s + 0 }')
UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout -k 5 60 "$UROCE" exec -- ibv_rc_pingpong -d uroce1 -g 0 -n 500 \
  -p 18519 > "$TMP/cross.server" 2>&1 &
xsrv=$!
for _ in $(seq 100); do "${A[@]}" ss -ltnH "sport = :18519" | grep -q . && break; sleep 0.1; done
if UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout -k 5 60 "$UROCE" exec -- ibv_rc_pingpong -d uroce0 -g 0 -n 500 \
  -p 18519 127.0.0.1 > "$TMP/cross.client" 2>&1 && wait "$xsrv"; then
  echo "ok: ibv_rc_pingpong from uroce0 to uroce1's address: $(grep "iters in" "$TMP/cross.client")"
else
  fail "ibv_rc_pingpong from uroce0 to uroce1's address: $(tail -3 "$TMP/cross.client") / $(tail -3 "$TMP/cross.server")"
fi
stats=$(UROCE_DAEMON=$TMP/a.sock timeout 30 "$UROCE" stats --daemon "$TMP/a.sock" 2>&1)
cross_after=$(grep -oE "^uplink rx_frames=[0-9]+ tx_frames=[0-9]+" <<<"$stats" | sed 's/.*tx_frames=//' | awk '{ s += $1 } END { print s + 0 }')
grep -qE "^switch local_frames=[0-9]+ cross_frames=([1-9][0-9]{3,}) .*device=uroce0" <<<"$stats" ||
  fail "uroce0's switch did not hand the pair's frames to uroce1's: $(grep '^switch' <<<"$stats")"
echo "the uplinks sent $((cross_after - cross_before)) frames meanwhile"
[[ $((cross_after - cross_before)) -lt 100 ]] || fail "the pair's frames went onto a wire ($cross_before -> $cross_after)"
for peer in "C 10.75.1.2 c" "B 10.75.0.2 b"; do
  read -r ns_name addr dsock <<<"$peer"
  local_ns=("${C[@]}")
  [[ $ns_name == B ]] && local_ns=("${B[@]}")
  UROCE_DAEMON=$TMP/$dsock.sock "${local_ns[@]}" timeout -k 5 60 "$UROCE" exec -- rping -s -a "$addr" -C 5 \
    > "$TMP/r2.server" 2>&1 &
  rsrv=$!
  ok_r=0
  for _ in $(seq 20); do
    if UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout -k 5 30 "$UROCE" exec -- rping -c -a "$addr" -C 5 -v \
      > "$TMP/r2.client" 2>&1; then ok_r=1; break; fi
    grep -qE "REJECTED|Connection refused|Unexpected CM event" "$TMP/r2.client" || break
    sleep 0.5
  done
  wait "$rsrv"
  if [[ $ok_r -eq 1 ]] && grep -q "rdma-ping-4:" "$TMP/r2.client"; then
    echo "ok: rping from A to $addr through daemon a's uplinks"
  else
    fail "rping from A to $addr: $(tail -3 "$TMP/r2.client")"
  fi
done
stats=$(UROCE_DAEMON=$TMP/a.sock timeout 30 "$UROCE" stats --daemon "$TMP/a.sock" 2>&1)
grep -qE "^uplink rx_frames=[1-9][0-9]* .*device=uroce1 name=second" <<<"$stats" || fail "uroce1's uplink carried nothing: $stats"
grep -qE "^xdp device=uroce1 steered=[1-9][0-9]* " <<<"$stats" || fail "uroce1's XDP program steered nothing: $stats"
stop_daemon a
stop_daemon c
stop_daemon b

echo "== 6. another user holding UDP 4791 first: the daemon refuses to start"
# Whoever holds port 4791 in the uplink's namespace gets, from the kernel,
# every RoCE datagram to the host (af_packet shows the kernel every frame).
# An unprivileged user (uid 65534, no groups) binds it before the daemon
# starts; the daemon must refuse to start and name the holder, and the
# squatter must receive nothing.
chmod 755 "$TMP"
mkdir "$TMP/squat" && chown 65534:65534 "$TMP/squat"
for squat in "0.0.0.0 af_packet" ":: auto" "10.75.0.1 af_packet"; do
  read -r addr io <<<"$squat"
  rm -f "$TMP/squat/s.ready" "$TMP/squat/s.count" "$TMP/squat/s.tmp"
  "${A[@]}" setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 40 /usr/bin/python3 -c '
import os, socket, sys
addr, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
if ":" in addr: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
s.bind((addr, 4791)); s.settimeout(0.2); open(out + ".ready", "w").close(); n = 0
while True:
    try: s.recv(65536); n += 1
    except socket.timeout: pass
    # Written whole, then renamed: a reader never sees a half-written count.
    with open(out + ".tmp", "w") as f: f.write(str(n))
    os.replace(out + ".tmp", out + ".count")
' "$addr" "$TMP/squat/s" > "$TMP/squat.log" 2>&1 &
  squatter=$!
  pids+=("$squatter")
  for _ in $(seq 100); do [[ -e $TMP/squat/s.ready ]] && break; sleep 0.1; done
  [[ -e $TMP/squat/s.ready ]] || fail "the squatter could not bind $addr:4791: $(cat "$TMP/squat.log")"
  squatter_pid=$(pgrep -P "$squatter" -f python3 | head -1)
  write_config a A "$if_a" "$io"
  "${A[@]}" timeout -k 5 60 "$UROCE" daemon --config "$TMP/a.ini" > "$TMP/a.log" 2>&1 &
  a_pid=$!
  pids+=("$a_pid")
  for _ in $(seq 150); do kill -0 "$a_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$a_pid" 2>/dev/null; then
    fail "daemon a ($io) started while uid 65534 held $addr:4791: $(cat "$TMP/a.log")"
    # The attack itself: RoCE to the host reaches the squatter.
    UROCE_DAEMON=$TMP/a.sock "${A[@]}" timeout 20 "$UROCE" exec -- ibv_devices > /dev/null 2>&1
    stop_daemon a
  else
    wait "$a_pid"
    rc=$?
    if [[ $rc -ne 0 ]] && grep -q "UDP port 4791 (IPv[46]) is held by uid 65534 (pid $squatter_pid python3)" "$TMP/a.log"; then
      echo "ok: daemon ($io) refused $addr:4791 held by another user: $(grep -o 'UDP port 4791.*python3)' "$TMP/a.log")"
    else
      fail "daemon a ($io, squatter on $addr pid $squatter_pid) exited $rc without naming the holder: $(cat "$TMP/a.log")"
    fi
  fi
  kill "$squatter" 2>/dev/null
  wait "$squatter" 2>/dev/null
  [[ $(cat "$TMP/squat/s.count" 2>/dev/null || echo 0) == 0 ]] ||
    fail "the squatter on $addr:4791 received $(cat "$TMP/squat/s.count") datagrams"
done

if [[ $FAILS -ne 0 ]]; then
  echo "--- daemon a:"; cat "$TMP/a.log"; echo "--- daemon b:"; cat "$TMP/b.log"
  echo "daemon_kernel_test: $FAILS failure(s)"
  exit 1
fi
echo "daemon_kernel_test: PASS"
