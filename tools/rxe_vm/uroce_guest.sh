# Sourced by guest_init.sh (dash) in a uroce guest (rxe_vm.py --kind uroce):
# a cloud VM with uroce installed, whose `uroce daemon` serves uroce0 to every
# program (`uroce exec -- PROGRAM`). Variables from the kernel command line:
#   nic        pci: DPDK's net_virtio on the second virtio NIC (PCI 00:05.0),
#                   bound to uio_pci_generic, on 2 MiB hugepages;
#              kernel: port = kernel:eth0, shared with this kernel
#                   (net_af_xdp where XDP loads, else net_af_packet).
#   hugepages  2 MiB pages to reserve (pci)
#   dip4 dip6  uroce's addresses on the DPDK NIC (pci; the kernel never has them)
#   dmac       the daemon's `mac =` for the DPDK NIC (pci; port: its own)
#   mtu        the link's MTU
# It also starts the remote shell mpirun uses in place of ssh (port 2222,
# guest_rsh.sh is the client). Failures end in `fail` with the daemon's own
# log on the console.
dpdk_nic=0000:00:05.0
daemon_log=/tmp/uroce-daemon.log
mkdir -p /etc/uroce /run/uroce

if [ "$nic" = pci ]; then
  # uio_pci_generic: Debian's kernel has no vfio no-IOMMU mode
  # (CONFIG_VFIO_NOIOMMU is not set) and a TCG guest no IOMMU, so vfio-pci
  # cannot take the device. DPDK then uses physical addresses (IOVA as PA),
  # which only hugepages give it.
  step "load uio_pci_generic" modprobe uio_pci_generic
  step "mount hugetlbfs" mkdir -p /dev/hugepages
  step "mount hugetlbfs" mount -t hugetlbfs nodev /dev/hugepages
  echo "$hugepages" >/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
  got=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
  [ "$got" -ge "$hugepages" ] || fail "hugepages: asked for $hugepages 2 MiB pages, got $got"
  [ -e /sys/bus/pci/devices/$dpdk_nic ] || fail "DPDK NIC: no PCI device $dpdk_nic (qemu's second virtio-net)"
  # Take it from virtio-pci (which bound it at boot) for uio_pci_generic.
  if [ -e /sys/bus/pci/devices/$dpdk_nic/driver ]; then
    echo $dpdk_nic >/sys/bus/pci/devices/$dpdk_nic/driver/unbind || fail "unbind $dpdk_nic"
  fi
  echo uio_pci_generic >/sys/bus/pci/devices/$dpdk_nic/driver_override
  echo $dpdk_nic >/sys/bus/pci/drivers_probe
  [ "$(basename "$(readlink /sys/bus/pci/devices/$dpdk_nic/driver)")" = uio_pci_generic ] ||
    fail "bind $dpdk_nic to uio_pci_generic"
  memory=$((hugepages * 2 - 32))
  cat >/etc/uroce/daemon.ini <<INI
[eal]
lcores = 0
hugepages = yes
memory = $memory
telemetry = no
log_level = *:notice

[daemon]
socket = /run/uroce/uroce.sock

[endpoint.dpdk]
port = $dpdk_nic
ipv4 = ${dip4%/*}
ipv6 = ${dip6%/*}
mac = $dmac
mtu = $mtu
mbufs = 8191
link_timeout_ms = 20000
INI
else
  cat >/etc/uroce/daemon.ini <<INI
[eal]
lcores = 0
hugepages = no
telemetry = no
log_level = *:notice

[daemon]
socket = /run/uroce/uroce.sock

[endpoint.eth0]
port = kernel:eth0
kernel_io = auto
INI
fi

uroce daemon --config /etc/uroce/daemon.ini >$daemon_log 2>&1 &
daemon_pid=$!
echo $daemon_pid >/run/uroce/daemon.pid
# EAL under TCG takes seconds (hugepage mapping above all): up to 120 s.
# The daemon claims its socket before EAL starts, so ready means: alive and
# serving uroce0 to a program.
i=0
until [ -S /run/uroce/uroce.sock ] && kill -0 $daemon_pid 2>/dev/null &&
    uroce exec -- ibv_devices 2>/dev/null | grep -q uroce0; do
  i=$((i + 1))
  if ! kill -0 $daemon_pid 2>/dev/null || [ $i -gt 240 ]; then
    # The daemon's log last: the host shows the console's tail.
    echo "--- /etc/uroce/daemon.ini ---"
    cat /etc/uroce/daemon.ini
    echo "--- uroce daemon log ---"
    cat $daemon_log
    if kill -0 $daemon_pid 2>/dev/null; then
      why="no uroce0 after 120 s"
    else
      wait $daemon_pid
      status=$?
      why="it exited with status $status"
      # 132: SIGILL, an instruction the (virtual) CPU does not have.
      [ $status -eq 132 ] && why="$why (SIGILL: an instruction this CPU model lacks; qemu -cpu max)"
    fi
    fail "start uroce daemon (nic=$nic): $why"
  fi
  sleep 0.5
done

# mpirun's remote shell (ssh's place): one command line per connection.
nc -ll -p 2222 -e /usr/lib/uroce-vm/guest_rsh_server.sh >/dev/null 2>&1 &
