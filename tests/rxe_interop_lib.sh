# Shared by the uroce <-> kernel rxe interop tests (sourced, after
# rxe_vm_lib.sh): boots the guest (tools/rxe_vm), writes uroce's
# configuration for the tap, and runs one program on each side.
#
# uroce runs on the host side of the guest's tap through net_af_packet, with
# its own addresses (10.77.0.10 / fd77::10); the programs' TCP side channel
# uses the host kernel's address on the same tap (10.77.0.1) or the guest's
# (10.77.0.2). uroce's GID table: index 0 its IPv4 address, 1 its IPv6 one.
#
# Every run keeps its evidence: at exit the guest is stopped and the capture
# of the tap (both directions: uroce's af_packet port has qdisc_bypass=0 so
# that tcpdump sees what it sends) is decoded with `uroce dump`, which checks
# every RoCE frame's ICRC with uroce's own parser; a bad frame fails the test.
# On failure the capture (LABEL.pcap: tshark, or `uroce dump LABEL.pcap`), the
# dump, the guest console and each side's output are kept in
# TEST_UNDECLARED_OUTPUTS_DIR.

# interop_start LABEL MTU: boots the guest with eth0 and the tap at MTU.
interop_start() {
  label=$1
  local mtu=$2
  state=$tmp/vm
  ok=0
  trap interop_cleanup EXIT
  local env_lines
  env_lines=$(rxe_vm start --state "$state" --lifetime 900 --mtu "$mtu") || fail "the guest did not start (see above)"
  eval "$env_lines"

  # A port MTU above 1500 needs af_packet ring frames that hold a whole RoCE
  # frame at path MTU 4096 and tile the ring's blocks (pmd/port_setup.cc says
  # why; uroce refuses to start otherwise).
  local frames=""
  [[ $mtu -gt 1500 ]] && frames=",framesz=4352,blocksz=69632"
  cfg=$tmp/uroce.ini
  cat >"$cfg" <<INI
[eal]
hugepages = no
log_level = *:warning
file_prefix = uroce-interop-$$
telemetry = no

[engine]
progress = inline

[endpoint.a]
port = net_af_packet0,iface=$RXE_VM_TAP,qpairs=1,qdisc_bypass=0$frames
ipv4 = 10.77.0.10
ipv6 = fd77::10
mtu = $mtu
INI

  local devinfo
  devinfo=$(rxe_vm exec --state "$state" -- ibv_devinfo -v -d rxe0) || fail "ibv_devinfo failed in the guest"
  rxe_v4=$(gid_index "$devinfo" "::ffff:$RXE_VM_GUEST_IP")
  rxe_v6=$(gid_index "$devinfo" "$RXE_VM_GUEST_IP6")
  [[ -n $rxe_v4 && -n $rxe_v6 ]] || fail "rxe0 has no RoCE v2 GIDs for $RXE_VM_GUEST_IP / $RXE_VM_GUEST_IP6"
  uroce_v4=0
  uroce_v6=1
  port=18700
  passed=()
  capture_check=
}

interop_cleanup() {
  local status=$?
  trap - EXIT
  local saved=$tmp/saved
  mkdir -p "$saved"
  rxe_vm stop --state "$state" --save-to "$saved" --label "$label" >/dev/null
  local dump_ok=1
  if [[ -f $saved/$label.pcap ]]; then
    "$uroce" dump "$saved/$label.pcap" >"$saved/$label.dump.txt" 2>&1 || dump_ok=0
    echo "capture: $(tail -n 1 "$saved/$label.dump.txt")"
    if [[ $dump_ok -eq 0 ]]; then
      echo "FAIL: uroce dump found bad RoCE frames in the capture:" >&2
      grep -iE "bad|malformed" "$saved/$label.dump.txt" | head -n 20 >&2
    fi
  else
    echo "FAIL: no capture was saved" >&2
    dump_ok=0
  fi
  # A test's own check of the decoded capture (capture_check FUNCTION).
  if [[ $dump_ok -eq 1 && $ok -eq 1 && -n ${capture_check:-} ]]; then
    "$capture_check" "$saved/$label.dump.txt" || dump_ok=0
  fi
  if [[ $status -ne 0 || $ok -ne 1 || $dump_ok -ne 1 ]]; then
    cp "$saved"/* "$tmp"/*.uroce "$tmp"/*.rxe "$artifacts"/ 2>/dev/null
    echo "kept the capture, its dump, the guest console and both sides' output in $artifacts" >&2
    [[ $status -ne 0 ]] && exit "$status"
    exit 1
  fi
  exit 0
}

in_ns() { ip netns exec "$RXE_VM_NETNS" "$@"; }

# perftest takes its GID index with -x, rdma-core's examples with -g.
gid_flag() { [[ $1 == ib_* ]] && echo -x || echo -g; }

check_case() {  # name expect rxe_status uroce_status direction
  local name=$1 expect=$2 status=$3 ustatus=$4 direction=$5
  if [[ $status -ne 0 || $ustatus -ne 0 ]] || ! grep -qE "$expect" "$tmp/$name.rxe" ||
    ! grep -qE "$expect" "$tmp/$name.uroce"; then
    echo "--- uroce side:"; cat "$tmp/$name.uroce"; echo "--- rxe side:"; cat "$tmp/$name.rxe"
    fail "$name ($direction): rxe status $status, uroce status $ustatus"
  fi
  echo "ok: $name ($direction): $(grep -E "$expect" "$tmp/$name.rxe" | tail -1 | cut -c1-100)"
  passed+=("$name ($direction)")
}

# perftest measures its clock rate before it reports and gives up ("Can't
# produce a report", exit 1) when the samples scatter, which a TCG guest's
# clock sometimes does. That says nothing about the exchange itself, so such
# a run is made once more. True when the last run of NAME failed that way.
perftest_clock_failed() {  # name
  [[ $status -ne 0 || $ustatus -ne 0 ]] && grep -qs "Can't produce a report" "$tmp/$1.rxe" "$tmp/$1.uroce"
}

# run_case RUNNER NAME ...: RUNNER (setting status and ustatus) once, or
# twice when perftest could not measure its clock the first time.
run_case() {
  local runner=$1 name=$2
  shift
  "$runner" "$@"
  if perftest_clock_failed "$name"; then
    echo "retry: $name: perftest could not measure its clock rate (\"Can't produce a report\")"
    "$runner" "$@"
  fi
}

# uroce_server NAME EXPECT PROGRAM "ARGS FOR BOTH SIDES" GUEST_GID UROCE_GID:
# uroce serves; the guest's rxe is the client (TCP to the host kernel's address).
uroce_server() {
  local status ustatus
  run_case uroce_server_run "$@"
  check_case "$1" "$2" "$status" "$ustatus" "rxe client -> uroce server"
}

# One run of uroce_server; sets status (rxe side) and ustatus (uroce side).
uroce_server_run() {
  local name=$1 prog=$3 args=$4 ggid=$5 ugid=$6
  local flag
  flag=$(gid_flag "$prog")
  port=$((port + 1))
  in_ns timeout -k 5 120 "$uroce" exec --config "$cfg" -- $prog $args -p $port $flag $ugid \
    >"$tmp/$name.uroce" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do in_ns ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  rxe_vm exec --state "$state" --timeout 110 -- \
    "timeout 100 $prog -d rxe0 $args -p $port $flag $ggid $RXE_VM_HOST_IP" >"$tmp/$name.rxe" 2>&1
  status=$?
  wait "$pid"
  ustatus=$?
}

# rxe_server NAME EXPECT PROGRAM ARGS GUEST_GID UROCE_GID: the guest's rxe
# serves, uroce is the client (TCP to the guest's address).
rxe_server() {
  local status ustatus
  run_case rxe_server_run "$@"
  check_case "$1" "$2" "$status" "$ustatus" "uroce client -> rxe server"
}

# One run of rxe_server; sets status (rxe side) and ustatus (uroce side).
rxe_server_run() {
  local name=$1 prog=$3 args=$4 ggid=$5 ugid=$6
  local flag
  flag=$(gid_flag "$prog")
  port=$((port + 1))
  rxe_vm spawn --state "$state" --job "$name" --timeout 100 -- "$prog -d rxe0 $args -p $port $flag $ggid" ||
    fail "$name: cannot start the server in the guest"
  # The server listens once it has opened rxe0; under TCG that takes a moment.
  # (/proc/net/tcp: local port in hex, state 0A = LISTEN; the guest has no ss.)
  local hex
  hex=$(printf '%04X' "$port")
  for _ in $(seq 50); do
    rxe_vm exec --state "$state" --timeout 10 -- "grep -q ':$hex 00000000:0000 0A' /proc/net/tcp" && break
    sleep 0.2
  done
  in_ns timeout -k 5 120 "$uroce" exec --config "$cfg" -- $prog $args -p $port $flag $ugid "$RXE_VM_GUEST_IP" \
    >"$tmp/$name.uroce" 2>&1
  ustatus=$?
  rxe_vm wait --state "$state" --job "$name" --timeout 110 >"$tmp/$name.rxe" 2>&1
  status=$?
}

# Both directions of one case.
both_ways() {  # name expect program args ip_version(4|6)
  local name=$1 expect=$2 prog=$3 args=$4 v=$5
  local g u
  if [[ $v == 4 ]]; then g=$rxe_v4 u=$uroce_v4; else g=$rxe_v6 u=$uroce_v6; fi
  uroce_server "${name}_v${v}_us" "$expect" "$prog" "$args" "$g" "$u"
  rxe_server "${name}_v${v}_rs" "$expect" "$prog" "$args" "$g" "$u"
}

# rping (rdma_cm, both sides' librdmacm; uroce's under `uroce exec`): the
# connection is made by IB CM MADs to QP1 (RDMA IP CM service, IBTA Annex
# A11), no TCP side channel. The server validates nothing itself; the client
# checks every byte it gets back (-V) and both print each ping (-v). The
# client is retried while the server is not listening yet (the CM answers
# REJ "invalid service ID": RDMA_CM_EVENT_REJECTED).
rping_client() {  # name side(rxe|uroce) address args
  local name=$1 side=$2 addr=$3 args=$4 attempt status
  for attempt in 1 2 3 4 5; do
    if [[ $side == rxe ]]; then
      rxe_vm exec --state "$state" --timeout 70 -- "timeout 60 rping -c -a $addr -p $port $args" \
        >"$tmp/$name.rxe" 2>&1
    else
      in_ns timeout -k 5 70 "$uroce" exec --config "$cfg" -- rping -c -a "$addr" -p "$port" $args \
        >"$tmp/$name.uroce" 2>&1
    fi
    status=$?
    [[ $status -eq 0 ]] && return 0
    grep -q "REJECTED" "$tmp/$name.$side" || return "$status"
    sleep 1
  done
  return "$status"
}

# rping_both_ways NAME "ARGS" IP_VERSION: uroce serves an rxe client, then
# rxe serves a uroce client; ARGS must make the client ping 10 times (-C 10).
rping_both_ways() {
  local name=$1 args=$2 v=$3 status ustatus uaddr gaddr
  if [[ $v == 4 ]]; then uaddr=10.77.0.10 gaddr=$RXE_VM_GUEST_IP; else uaddr=fd77::10 gaddr=$RXE_VM_GUEST_IP6; fi
  local expect="ping data: rdma-ping-9: "

  local n="${name}_v${v}_us"
  port=$((port + 1))
  # -d: rping says "rdma_listen" just before it listens.
  in_ns timeout -k 5 120 "$uroce" exec --config "$cfg" -- rping -s -a "$uaddr" -p "$port" $args -d \
    >"$tmp/$n.uroce" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q rdma_listen "$tmp/$n.uroce" && break; sleep 0.1; done
  rping_client "$n" rxe "$uaddr" "$args"
  status=$?
  wait "$pid"
  ustatus=$?
  check_case "$n" "$expect" "$status" "$ustatus" "rxe client -> uroce server"

  n="${name}_v${v}_rs"
  port=$((port + 1))
  rxe_vm spawn --state "$state" --job "$n" --timeout 100 -- "rping -s -a $gaddr -p $port $args" ||
    fail "$n: cannot start rping in the guest"
  rping_client "$n" uroce "$gaddr" "$args"
  ustatus=$?
  rxe_vm wait --state "$state" --job "$n" --timeout 110 >"$tmp/$n.rxe" 2>&1
  status=$?
  check_case "$n" "$expect" "$status" "$ustatus" "uroce client -> rxe server"
}

interop_pass() {
  ok=1
  echo "PASS: $1; cases:"
  printf '  %s\n' "${passed[@]}"
}
