#!/bin/dash
# PID 1 of the rxe test guest (tools/rxe_vm). Runs under dash, not busybox sh:
# busybox's shell runs its own applets ahead of PATH, and its `ip` is a cut-down
# one; dash looks programs up in PATH, where iproute2's `ip` and `rdma` come first.
#
# It mounts the pseudo file systems, loads the rxe modules, configures eth0 from
# the kernel command line (uroce.* parameters, set by the host), creates rxe0 on
# eth0, prints "UROCE-READY" on the console (ttyS0) and then serves the host's
# commands on the second serial port (ttyS1). A step that fails prints
# "UROCE-FAILED <step>" and the kernel log's tail, then powers the guest off, so
# the host reports what failed instead of waiting for a timeout.
#
# Command protocol on ttyS1 (one line per request; the host side is rxe_vm.py):
#   RUN <token> <seconds> <base64 script>  -> "<token> BEGIN\n", the script's
#                                             output, "\n<token> END <status>\n"
#   POWEROFF                               -> the guest powers off
# The token is random per request, so no program output can fake an END line.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
umask 022
# The initramfs's root comes up world-writable; DPDK refuses to load its
# drivers from under a directory anybody may write to.
chmod 755 /

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
exec </dev/null >/dev/ttyS0 2>&1

fail() {
  echo "UROCE-FAILED $1"
  echo "--- guest kernel log (tail) ---"
  dmesg | tail -n 40
  echo "--- end of guest kernel log ---"
  poweroff -f
  sleep 60
}

# step NAME COMMAND...: runs COMMAND; on failure the guest stops with NAME.
step() {
  name=$1
  shift
  "$@" || fail "$name: '$*' exited with status $?"
}

ip4= ip6= mtu=1500 kind=rxe nic=pci hugepages=0 dip4= dip6= dmac=port name=guest
for arg in $(cat /proc/cmdline); do
  case $arg in
    uroce.ip4=*) ip4=${arg#*=} ;;
    uroce.ip6=*) ip6=${arg#*=} ;;
    uroce.mtu=*) mtu=${arg#*=} ;;
    uroce.kind=*) kind=${arg#*=} ;;
    uroce.nic=*) nic=${arg#*=} ;;
    uroce.hugepages=*) hugepages=${arg#*=} ;;
    uroce.dip4=*) dip4=${arg#*=} ;;
    uroce.dip6=*) dip6=${arg#*=} ;;
    uroce.dmac=*) dmac=${arg#*=} ;;
    uroce.hostname=*) name=${arg#*=} ;;
  esac
done
hostname "$name"

# The kernel asks /sbin/modprobe for modules it wants by alias; ours is kmod's.
echo /sbin/modprobe >/proc/sys/kernel/modprobe
# crc32_generic first: rxe computes the ICRC through the crypto API's "crc32",
# and `rdma link add` fails until that algorithm is registered.
step "load module crc32_generic" modprobe crc32_generic
step "load virtio modules" modprobe -a virtio_pci virtio_net
if [ "$kind" = rxe ]; then
  # rdma_rxe pulls in ib_core, udp_tunnel and ip6_udp_tunnel; ib_uverbs gives
  # user space /dev/infiniband/uverbs*; rdma_ucm gives rdma_cm (rping).
  step "load rdma modules" modprobe -a rdma_rxe ib_uverbs rdma_ucm
fi

# virtio_net registers eth0 asynchronously; wait for it (5 s at most).
i=0
while [ ! -e /sys/class/net/eth0 ]; do
  i=$((i + 1))
  [ $i -gt 50 ] && fail "eth0: no network interface appeared (virtio_net)"
  sleep 0.1
done

step "bring up lo" ip link set lo up
# No duplicate address detection: the host's addresses are fixed, and DAD would
# hold the IPv6 address (and its GID) back for a second or more.
echo 0 >/proc/sys/net/ipv6/conf/all/accept_dad
echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad
echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad
step "set eth0 mtu" ip link set eth0 mtu "$mtu"
step "bring up eth0" ip link set eth0 up
[ -n "$ip4" ] && step "add IPv4 address $ip4" ip addr add "$ip4" dev eth0
[ -n "$ip6" ] && step "add IPv6 address $ip6" ip -6 addr add "$ip6" dev eth0 nodad
# Wait for the carrier (it drops for a moment when the MTU changes), so that
# eth0 and rxe0's port are up when the host is told the guest is ready.
i=0
while [ "$(cat /sys/class/net/eth0/operstate)" != up ]; do
  i=$((i + 1))
  [ $i -gt 100 ] && fail "eth0: no carrier (operstate $(cat /sys/class/net/eth0/operstate))"
  sleep 0.1
done
if [ "$kind" = rxe ]; then
  # The addresses are there before rxe0, so its GID table holds them from the start.
  step "create rxe0" rdma link add rxe0 type rxe netdev eth0

  # Wait until the device is visible to user space (uverbs node and sysfs).
  i=0
  while ! ls /dev/infiniband/uverbs* >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -gt 50 ] && fail "rxe0: /dev/infiniband/uverbs* did not appear"
    sleep 0.1
  done
else
  . /usr/lib/uroce-vm/uroce_guest.sh
fi

echo "UROCE-READY $(uname -r)"

# --- the command agent on ttyS1 ---
agent=/dev/ttyS1
# Raw mode: no echo of what the host sends, no CR/LF translation either way.
step "set up the agent's serial port" stty -F "$agent" raw -echo
exec 3<>"$agent"
mkdir -p /tmp/agent /tmp/jobs
cd /root
while IFS=' ' read -r verb token seconds script <&3; do
  case $verb in
    RUN)
      echo "$script" | base64 -d >/tmp/agent/cmd.sh
      printf '%s BEGIN\n' "$token" >&3
      # coreutils' timeout: status 124 when the limit was hit.
      timeout -k 2 "$seconds" dash /tmp/agent/cmd.sh </dev/null >&3 2>&3
      printf '\n%s END %d\n' "$token" $? >&3
      ;;
    POWEROFF)
      break
      ;;
  esac
done
poweroff -f
sleep 60
