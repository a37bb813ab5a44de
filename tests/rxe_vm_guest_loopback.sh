# Runs in the rxe guest (dash; sent by tests/rxe_vm_boot_test.sh). Server and
# client of each rdma-core / perftest program, both on rxe0 in the guest: rxe
# loops frames for its own address back inside the kernel, so nothing crosses
# the link, but every program the interop tests will use is seen to start,
# find rxe0 through the rxe provider, and complete (a missing library in the
# initramfs would show here). Prints "LOOPBACK <name> <status>" per program.
# Argument: the guest's IPv4 address, then its IPv6 address.
ip4=$1 ip6=$2

gid() {  # the RoCE v2 GID index of an address
  ibv_devinfo -v -d rxe0 |
    sed -n "s/^[[:space:]]*GID\[[[:space:]]*\([0-9]*\)\]:[[:space:]]*$1, RoCE v2\$/\1/p"
}
g4=$(gid "::ffff:$ip4")
g6=$(gid "$ip6")

# pair NAME SERVER_ARGS -- CLIENT_ARGS: the server in the background, then the
# client against it; the status is the client's, or the server's if it failed.
# perftest measures its clock rate before it reports and gives up ("Can't
# produce a report") when the samples scatter, as this TCG guest's clock
# sometimes makes them: such a run is made once more.
pair() {
  name=$1
  shift
  server=
  while [ "$1" != -- ]; do server="$server $1"; shift; done
  shift
  for attempt in 1 2; do
    timeout 30 $server >/tmp/$name.server 2>&1 &
    spid=$!
    sleep 0.5
    timeout 30 "$@" >/tmp/$name.client 2>&1
    status=$?
    wait $spid || { [ $status -eq 0 ] && status=$?; }
    [ $status -ne 0 ] && [ $attempt -eq 1 ] && grep -qs "Can't produce a report" /tmp/$name.server /tmp/$name.client ||
      break
    echo "retry: $name: perftest could not measure its clock rate"
  done
  [ $status -eq 0 ] || { cat /tmp/$name.server /tmp/$name.client; }
  echo "LOOPBACK $name $status"
}

pair rc_pingpong_ipv4 ibv_rc_pingpong -d rxe0 -g "$g4" -n 5 -s 4096 -- \
  ibv_rc_pingpong -d rxe0 -g "$g4" -n 5 -s 4096 "$ip4"
# RoCE over the IPv6 GID; the QP numbers still go over IPv4 TCP: the pingpong
# servers listen on the first address getaddrinfo gives them, 0.0.0.0.
pair ud_pingpong_ipv6 ibv_ud_pingpong -d rxe0 -g "$g6" -n 5 -s 512 -- \
  ibv_ud_pingpong -d rxe0 -g "$g6" -n 5 -s 512 "$ip4"
pair srq_pingpong ibv_srq_pingpong -d rxe0 -g "$g4" -n 5 -- \
  ibv_srq_pingpong -d rxe0 -g "$g4" -n 5 "$ip4"
pair rping rping -s -a "$ip4" -C 3 -- rping -c -a "$ip4" -C 3
for bw in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat; do
  pair $bw $bw -d rxe0 -x "$g4" -n 5 -- $bw -d rxe0 -x "$g4" -n 5 "$ip4"
done
