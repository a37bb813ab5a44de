#!/usr/bin/env bash
# uroce inside virtual machines: two qemu guests (tools/rxe_vm,
# TCG) on one virtual network, as two cloud VMs of one subnet, each a VM with
# uroce installed from its release tarball and `uroce daemon` serving uroce0
# to unmodified programs (`uroce exec -- PROGRAM`).
#
# MODE (4th argument) says what the guests are:
#   pci     both uroce, uroce0 = DPDK's net_virtio PCI PMD on each guest's
#           second virtio-net NIC (uio_pci_generic, 2 MiB hugepages; Debian's
#           kernel has no vfio no-IOMMU mode); eth0 stays the kernel's
#           (TCP side channels, mpirun's remote shell); guest B's daemon
#           has `mac = 02:75:72:77:01:03`, not its NIC's own address;
#   kernel  both uroce, uroce0 = the guest's only NIC shared with its kernel
#           (port = kernel:eth0: net_af_xdp where XDP loads, else
#           net_af_packet; the guest's daemon log says which);
#   rxe     guest A uroce (pci), guest B the kernel's Soft-RoCE (rxe0 on its
#           eth0): the mixed cloud case.
# Cases (uroce-uroce modes): ibv_rc_pingpong -c (every byte checked),
# ib_write_bw, ib_read_bw and rping -V, each twice: over the IPv4 GID /
# address with the server in guest A, over IPv6 with the server in guest B;
# fi_pingpong -c -e msg (uroce, server in A) and -e rdm ("uroce;ofi_rxm",
# server in B); Open MPI across the two
# guests, mpirun in guest A starting guest B's orted through a remote shell
# (ssh's place, tools/rxe_vm/guest_rsh.sh): one rank per guest
# (mpi_pingpong, every byte checked; pci mode) and two per guest
# (mpi_two_hosts: layout, ping-pong on a host and across, checked
# MPI_Allreduce), OFI MTL on "uroce;ofi_rxm". Mixed mode: ibv_rc_pingpong -c
# and ib_send_bw, the same two ways. UROCE_VM_ALL_WAYS=1 (by hand) runs every
# program both ways over both families, and every MPI job in both modes.
# Every RoCE frame the guests exchanged (tcpdump on the host side of the tap
# that carries them) is decoded with `uroce dump`: no bad ICRC, no malformed
# frame, and at least one RoCE frame. A guest that cannot start uroce's
# daemon fails the test with the guest's own error (console and daemon log
# are printed and kept as artifacts); nothing is skipped.
# Every guest command runs under a time limit; on failure the captures and
# consoles are kept in TEST_UNDECLARED_OUTPUTS_DIR.
#   args: rxe_vm.py UROCE_TARBALL UROCE MODE MPI_PINGPONG MPI_TWO_HOSTS
set -uo pipefail
harness=$1 tarball=$(realpath "$2") uroce=$(realpath "$3") mode=$4
mpi_pingpong=$(realpath "$5") mpi_two_hosts=$(realpath "$6")
source "$(dirname "$0")/rxe_vm_lib.sh"
case $mode in pci | kernel | rxe) ;; *) fail "mode '$mode': pci, kernel or rxe" ;; esac
t_start=$SECONDS

netns=uvm-$$-$RANDOM
declare -A state kind
vms=()
cleanup() {
  local rc=$? vm save=()
  [[ $rc -ne 0 ]] && save=(--save-to "$artifacts")
  for vm in "${vms[@]}"; do
    rxe_vm stop --state "${state[$vm]}" --label "$mode-$vm" "${save[@]}" 2>/dev/null
    # The captures are checked (below) or kept; the state goes.
  done
  rxe_vm net-down --netns "$netns"
  exit "$rc"
}
trap cleanup EXIT

echo "== network: namespace $netns, one bridge (10.77.0.1, fd77::1 on the host side)"
rxe_vm net-up --netns "$netns" >/dev/null || fail "net-up"

# boot NAME KIND NIC N [ARG...]: guest N's eth0 is 10.77.0.N / fd77::N, its
# DPDK NIC 10.77.0.(10+N) / fd77::(10+N); ARGs go to rxe_vm start.
boot() {
  local vm=$1 k=$2 nic=$3 n=$4 t0=$SECONDS
  shift 4
  state[$vm]=$tmp/$vm kind[$vm]=$k
  vms+=("$vm")
  rxe_vm start --state "${state[$vm]}" --netns "$netns" --bridge rxebr0 --tap "uvm$vm" \
    --kind "$k" --nic "$nic" --hostname "$vm" --boot-timeout 240 --lifetime 1500 \
    --guest-ip "10.77.0.$n/24" --guest-ip6 "fd77::$n/64" --guest-mac "52:54:00:77:00:0$n" \
    --dpdk-ip "10.77.0.$((10 + n))" --dpdk-ip6 "fd77::$((10 + n))" \
    --dpdk-mac "52:54:00:77:01:0$n" --uroce-tarball "$tarball" \
    --extra "$mpi_pingpong" --extra "$mpi_two_hosts" "$@" >"$tmp/$vm.env" ||
    fail "guest $vm ($k, nic $nic) did not start (its console is above and in $artifacts)"
  echo "guest $vm: $k, nic $nic, ready after $((SECONDS - t0)) s"
}

# gx VM LIMIT SCRIPT: runs SCRIPT in the guest (its output on stdout).
gx() {
  rxe_vm exec --state "${state[$1]}" --timeout "$2" -- "$3"
}

# In a uroce guest programs run under `uroce exec`; rxe's are plain.
run_prefix() {
  [[ ${kind[$1]} == uroce ]] && echo "uroce exec --" || echo ""
}
dev_of() {
  [[ ${kind[$1]} == uroce ]] && echo uroce0 || echo rxe0
}

declare -A gid4 gid6 roce4 roce6 ip4
# learn VM N NIC: its GID indexes (ibv_devinfo -v) and RoCE addresses.
learn() {
  local vm=$1 n=$2 nic=$3 info a4 a6
  ip4[$vm]=10.77.0.$n
  if [[ ${kind[$vm]} == uroce && $nic == pci ]]; then
    a4=10.77.0.$((10 + n)) a6=fd77::$((10 + n))
  else
    a4=10.77.0.$n a6=fd77::$n
  fi
  roce4[$vm]=$a4 roce6[$vm]=$a6
  info=$(gx "$vm" 60 "$(run_prefix "$vm") ibv_devinfo -v -d $(dev_of "$vm")") ||
    fail "$vm: ibv_devinfo: $info"
  gid4[$vm]=$(gid_index "$info" "::ffff:$a4")
  gid6[$vm]=$(gid_index "$info" "$a6")
  [[ -n ${gid4[$vm]} && -n ${gid6[$vm]} ]] ||
    fail "$vm: no RoCE v2 GID for $a4 / $a6 in: $info"
  grep -q PORT_ACTIVE <<<"$info" || fail "$vm: port not active: $info"
  echo "guest $vm: $(dev_of "$vm") GIDs ${gid4[$vm]} (::ffff:$a4), ${gid6[$vm]} ($a6)"
}

# Waits (in the guest) until a TCP port listens: /proc/net/tcp{,6}, state
# 0A. The guests have no ss.
wait_listen() {  # vm port
  local hex
  hex=$(printf '%04X' "$2")
  gx "$1" 40 "i=0; until grep -q ':$hex [0-9A-F]*:[0-9A-F]* 0A' /proc/net/tcp /proc/net/tcp6; do
    i=\$((i + 1)); [ \$i -gt 300 ] && exit 1; sleep 0.1; done" >/dev/null
}

passed=()
port=18600
# UROCE_VM_CASES=REGEX runs only the cases whose names match (by hand, while
# working on one; the test itself runs them all and says so at the end).
selected() {
  [[ -z ${UROCE_VM_CASES:-} || $1 =~ $UROCE_VM_CASES ]]
}
# pair NAME EXPECT SERVER CLIENT "SERVER ARGS" "CLIENT ARGS" [tcp|none]: the
# server in one guest (a job), the client in the other; both must exit 0
# and print a line matching EXPECT. tcp: the client starts once the
# server's TCP side channel listens on $port.
pair() {
  local name=$1 expect=$2 s=$3 c=$4 sargs=$5 cargs=$6 ready=${7:-tcp}
  local t0=$SECONDS srv cli sst cst
  selected "$name" || return 0
  rxe_vm spawn --state "${state[$s]}" --job "$name" --timeout 150 -- \
    "$(run_prefix "$s") $sargs" || fail "$name: cannot start the server in $s"
  if [[ $ready == tcp ]]; then
    wait_listen "$s" "$port" || fail "$name: the server in $s never listened on TCP $port"
  else
    # rdma_cm servers (rping -d) say "rdma_listen" once they listen.
    gx "$s" 60 "i=0; until grep -q rdma_listen /tmp/jobs/$name.out 2>/dev/null; do
      i=\$((i + 1)); [ \$i -gt 500 ] && exit 1; sleep 0.1; done" >/dev/null ||
      fail "$name: the server in $s never listened"
  fi
  cli=$(gx "$c" 160 "timeout 150 $(run_prefix "$c") $cargs 2>&1")
  cst=$?
  srv=$(rxe_vm wait --state "${state[$s]}" --job "$name" --timeout 160 2>&1)
  sst=$?
  if [[ $sst -ne 0 || $cst -ne 0 ]] || ! grep -qE "$expect" <<<"$srv" || ! grep -qE "$expect" <<<"$cli"; then
    echo "--- server ($s):"; echo "$srv"; echo "--- client ($c):"; echo "$cli"
    fail "$name: server in $s exited $sst, client in $c exited $cst"
  fi
  echo "ok: $name: server $s, client $c, $((SECONDS - t0)) s: $(grep -E "$expect" <<<"$cli" | tail -1 | cut -c1-90)"
  passed+=("$name")
  port=$((port + 1))
}

# Each program runs twice: over IPv4 with the server in guest a, and over
# IPv6 with the server in guest b. So each program crosses both families and
# both directions; the two guests are alike, and the other two of the four
# combinations would repeat them (UROCE_VM_ALL_WAYS=1 runs all four, by hand).
ways() {
  if [[ -n ${UROCE_VM_ALL_WAYS:-} ]]; then
    echo 4:a:b 4:b:a 6:a:b 6:b:a
  else
    echo 4:a:b 6:b:a
  fi
}

# verbs_case NAME EXPECT PROGRAM GIDFLAG "ARGS"
verbs_case() {
  local name=$1 expect=$2 prog=$3 flag=$4 args=$5 way v s c sg cg
  for way in $(ways); do
    IFS=: read -r v s c <<<"$way"
    if [[ $v == 4 ]]; then
      sg=${gid4[$s]} cg=${gid4[$c]}
    else
      sg=${gid6[$s]} cg=${gid6[$c]}
    fi
    pair "${name}_v${v}_$s" "$expect" "$s" "$c" \
      "$prog -d $(dev_of "$s") $args -p $port $flag $sg" \
      "$prog -d $(dev_of "$c") $args -p $port $flag $cg ${ip4[$s]}"
  done
}

# rping: rdma_cm on both sides, addresses are the RoCE addresses.
rping_case() {
  local way v s c a
  for way in $(ways); do
    IFS=: read -r v s c <<<"$way"
    if [[ $v == 4 ]]; then a=${roce4[$s]}; else a=${roce6[$s]}; fi
    pair "rping_v${v}_$s" "ping data" "$s" "$c" "rping -s -a $a -p $port -C 10 -S 4000 -V -v -d" \
      "rping -c -a $a -p $port -C 10 -S 4000 -V -v" rdma_cm
  done
}

# Open MPI: mpirun in the first guest, the second reached by its remote shell.
mpi_case() {  # name ranks program expect
  local name=$1 np=$2 prog=$3 expect=$4 t0=$SECONDS out st
  selected "$name" || return 0
  out=$(gx "${vms[0]}" 320 "timeout -k 10 300 mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -np $np --map-by node --hostfile /tmp/hostfile \
    --mca plm rsh --mca plm_rsh_agent /usr/lib/uroce-vm/guest_rsh.sh \
    --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include uroce --mca mtl_ofi_verbose 1 \
    --mca btl self,vader --mca osc ^ucx -x FI_LOG_LEVEL=warn uroce exec -- $prog 2>&1")
  st=$?
  out=$(grep -v 'not in include list' <<<"$out")
  if [[ $st -ne 0 ]] || ! grep -qE "$expect" <<<"$out" || grep -qiE "signal|ORTE_ERROR" <<<"$out"; then
    echo "$out" | grep -v "round trips verified" | tail -n 60
    local vm
    for vm in "${vms[@]}"; do
      echo "--- guest $vm: uroce stats --daemon, and the daemon's log"
      gx "$vm" 30 "uroce stats --daemon /run/uroce/uroce.sock; tail -n 20 /tmp/uroce-daemon.log"
    done
    fail "$name: mpirun exited $st"
  fi
  # Every rank's OFI MTL on uroce (mtl_ofi_verbose names the provider).
  local provs
  provs=$(grep -c 'mtl:ofi:prov: uroce;ofi_rxm$' <<<"$out")
  [[ $provs -eq $np ]] || { echo "$out" | grep "mtl:ofi" | head; fail "$name: $provs of $np ranks on 'uroce;ofi_rxm'"; }
  grep -E "allreduce|PASS|layout" <<<"$out" | head -n 12
  echo "ok: $name: $np ranks on uroce;ofi_rxm, $((SECONDS - t0)) s"
  passed+=("$name")
}

if [[ $mode == rxe ]]; then
  boot a uroce pci 2
  boot b rxe pci 3
  learn a 2 pci
  learn b 3 pci
  verbs_case rc_pingpong "[0-9]+ iters in" ibv_rc_pingpong -g "-c -n 100 -s 4096"
  verbs_case send_bw "^ +65536 +20 " ib_send_bw -x "-n 20 -s 65536 -F"
else
  boot a uroce "$mode" 2
  if [[ $mode == pci ]]; then
    # Guest B's daemon is configured with a MAC that is not its NIC's own
    # (`mac = 02:...`): the NIC (virtio-net filters unicast) must be given
    # it, or nothing sent to guest B arrives.
    boot b uroce "$mode" 3 --daemon-mac 02:75:72:77:01:03
  else
    boot b uroce "$mode" 3
  fi
  learn a 2 "$mode"
  learn b 3 "$mode"
  for vm in a b; do
    gx "$vm" 30 "grep -E 'uroce0|af_xdp|af_packet' /tmp/uroce-daemon.log | head -n 3" | sed "s/^/guest $vm: /"
  done
  verbs_case rc_pingpong "[0-9]+ iters in" ibv_rc_pingpong -g "-c -n 100 -s 4096"
  verbs_case write_bw "^ +65536 +20 " ib_write_bw -x "-n 20 -s 65536 -F"
  verbs_case read_bw "^ +65536 +20 " ib_read_bw -x "-n 20 -s 65536 -F"
  rping_case
  # FI_EP_MSG is uroce's own; FI_EP_RDM is libfabric's RxM over it.
  fi_provider() { [[ $1 == msg ]] && echo uroce || echo "uroce;ofi_rxm"; }
  # fi_pingpong swaps its fabric addresses over TCP (-B/-P, to the
  # server's kernel address); -c checks every byte.
  # One direction each (msg: server a; rdm: server b), both with UROCE_VM_ALL_WAYS.
  for ep in msg rdm; do
    for s in a b; do
      c=b
      [[ $s == b ]] && c=a
      [[ -z ${UROCE_VM_ALL_WAYS:-} && $ep:$s != msg:a && $ep:$s != rdm:b ]] && continue
      pair "fi_pingpong_${ep}_$s" "[0-9]+ +[0-9.]+[kMG]? +[0-9]+" "$s" "$c" \
        "fi_pingpong -p '$(fi_provider $ep)' -e $ep -c -S 4096 -I 100 -B $port" \
        "fi_pingpong -p '$(fi_provider $ep)' -e $ep -c -S 4096 -I 100 -P $port ${ip4[$s]}"
    done
  done
  for vm in a b; do
    gx "$vm" 30 "printf '127.0.0.1 localhost\n10.77.0.2 a\n10.77.0.3 b\n' >/etc/hosts
      printf 'a slots=2\nb slots=2\n' >/tmp/hostfile" || fail "$vm: hosts file"
  done
  # One rank per guest (no shared-memory path, every byte of 8 sizes checked)
  # on the PCI NIC; the four-rank job, which also crosses the guests at every
  # size, on both.
  if [[ $mode == pci || -n ${UROCE_VM_ALL_WAYS:-} ]]; then
    mpi_case mpi_one_rank_per_guest 2 mpi_pingpong "mpi_pingpong: PASS"
  fi
  mpi_case mpi_two_ranks_per_guest 4 mpi_two_hosts "mpi_two_hosts: PASS"
fi

# The daemons must still be alive (a crash would have stopped a case, but a
# daemon that died after its last case would not have).
for vm in "${vms[@]}"; do
  [[ ${kind[$vm]} == uroce ]] || continue
  gx "$vm" 20 'kill -0 $(cat /run/uroce/daemon.pid)' >/dev/null || {
    gx "$vm" 20 "cat /tmp/uroce-daemon.log"
    fail "$vm: uroce daemon died"
  }
done

# Power off (the captures close), then decode them.
for vm in "${vms[@]}"; do
  rxe_vm stop --state "${state[$vm]}" --save-to "$tmp/keep" --label "$mode-$vm" 2>/dev/null
done
for vm in "${vms[@]}"; do
  pcap=$tmp/keep/$mode-$vm.pcap
  [[ -s $pcap ]] || fail "$vm: no capture"
  if ! "$uroce" dump "$pcap" >"$tmp/$vm.dump" 2>&1; then
    cp "$pcap" "$tmp/$vm.dump" "$artifacts/"
    grep -iE "bad|malformed" "$tmp/$vm.dump" | head -n 20
    fail "$vm: uroce dump found bad RoCE frames in the capture"
  fi
  # "frames N, roce M, icrc_ok K, icrc_bad 0, malformed 0"
  summary=$(tail -n 1 "$tmp/$vm.dump")
  echo "capture $vm: $summary"
  [[ $summary =~ roce\ ([0-9]+),\ icrc_ok\ ([0-9]+),\ icrc_bad\ 0,\ malformed\ 0 ]] &&
    [[ ${BASH_REMATCH[1]} -gt 0 && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] ||
    { cp "$pcap" "$artifacts/"; fail "$vm: expected RoCE frames, all with a good ICRC: $summary"; }
done
vms=()
[[ -n ${UROCE_VM_CASES:-} ]] && echo "NOTE: only the cases matching UROCE_VM_CASES='$UROCE_VM_CASES' ran"
echo "PASS ($mode): ${#passed[@]} cases in $((SECONDS - t_start)) s: ${passed[*]}"
