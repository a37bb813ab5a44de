# Runs in the rxe guest (dash; sent by tests/rxe_vm_boot_test.sh, one guest
# command per program). Server and client of one rdma-core / perftest program,
# both on rxe0 in the guest: rxe loops frames for its own address back inside
# the kernel, so nothing crosses the link, but every program the interop tests
# will use is seen to start, find rxe0 through the rxe provider, and complete
# (a missing library in the initramfs would show here). Prints
# "LOOPBACK <name> <status>" and exits with that status.
#
# Arguments: NAME (which program pair, see the end), the RoCE v2 GID index of
# the guest's IPv4 address, that of its IPv6 address, the IPv4 address, and
# two time limits in seconds: PROGRAM (each server and each client, under
# `timeout -k 2`) and READY (how long the server may take to listen).
#
# Time bound: one attempt takes at most READY + PROGRAM + 2 s (the server
# listens within READY of its start or the attempt fails; the client then ends
# within PROGRAM + 2 s; the server, started first, ends by then too). perftest
# programs get a second attempt (see pair), so the host's limit for this
# command is attempts * (READY + PROGRAM + 2) plus a few seconds; the host
# computes it (pair_limit in rxe_vm_boot_test.sh).
name=$1 g4=$2 g6=$3 ip4=$4 limit=$5 ready=$6

# listening NAME: true once NAME's server can take its client. The pingpong
# programs and perftest (without -R) listen on TCP port 18515 (0x4853) for the
# QP numbers: /proc/net/tcp{,6}, state 0A = LISTEN (the guest has no ss).
# rping listens through rdma_cm: its listening cm_id shows in `rdma resource`.
listening() {
  case $1 in
    rping) rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN" ;;
    *) grep -Eqs "^ *[0-9]+: [0-9A-F]+:4853 [0-9A-F]+:0000 0A " /proc/net/tcp /proc/net/tcp6 ;;
  esac
}

# pair NAME SERVER_ARGS -- CLIENT_ARGS: the server in the background, the client
# against it once the server listens; the status is the client's, or the
# server's if it failed. perftest measures its clock rate before it reports and
# gives up ("Can't produce a report") when the samples scatter, as this TCG
# guest's clock sometimes makes them: such a run is made once more.
pair() {
  name=$1
  shift
  server=
  while [ "$1" != -- ]; do server="$server $1"; shift; done
  shift
  for attempt in 1 2; do
    start=$(date +%s)
    timeout -k 2 "$limit" $server >/tmp/$name.server 2>&1 &
    spid=$!
    until listening "$name"; do
      kill -0 $spid 2>/dev/null || break
      if [ $(($(date +%s) - start)) -ge "$ready" ]; then
        echo "the server did not listen within $ready s" >>/tmp/$name.server
        kill $spid
        break
      fi
      sleep 0.1
    done
    if listening "$name"; then
      timeout -k 2 "$limit" "$@" >/tmp/$name.client 2>&1
      status=$?
    else
      echo "not run: the server was not listening" >/tmp/$name.client
      status=1
    fi
    wait $spid
    sstatus=$?
    [ $status -eq 0 ] && status=$sstatus
    echo "$name: attempt $attempt: status $status in $(($(date +%s) - start)) s"
    case $name in ib_*) ;; *) break ;; esac
    [ $status -ne 0 ] && [ $attempt -eq 1 ] && grep -qs "Can't produce a report" /tmp/$name.server /tmp/$name.client ||
      break
    echo "retry: $name: perftest could not measure its clock rate"
  done
  [ $status -eq 0 ] || { cat /tmp/$name.server /tmp/$name.client; }
  echo "LOOPBACK $name $status"
  return $status
}

case $name in
  rc_pingpong_ipv4)
    pair $name ibv_rc_pingpong -d rxe0 -g "$g4" -n 5 -s 4096 -- \
      ibv_rc_pingpong -d rxe0 -g "$g4" -n 5 -s 4096 "$ip4" ;;
  # RoCE over the IPv6 GID; the QP numbers still go over IPv4 TCP: the pingpong
  # servers listen on the first address getaddrinfo gives them, 0.0.0.0.
  ud_pingpong_ipv6)
    pair $name ibv_ud_pingpong -d rxe0 -g "$g6" -n 5 -s 512 -- \
      ibv_ud_pingpong -d rxe0 -g "$g6" -n 5 -s 512 "$ip4" ;;
  srq_pingpong)
    pair $name ibv_srq_pingpong -d rxe0 -g "$g4" -n 5 -- \
      ibv_srq_pingpong -d rxe0 -g "$g4" -n 5 "$ip4" ;;
  rping)
    pair $name rping -s -a "$ip4" -C 3 -- rping -c -a "$ip4" -C 3 ;;
  ib_send_bw | ib_write_bw | ib_read_bw | ib_atomic_bw | ib_send_lat)
    pair $name $name -d rxe0 -x "$g4" -n 5 -- $name -d rxe0 -x "$g4" -n 5 "$ip4" ;;
  *)
    echo "no program pair named '$name'"
    exit 2 ;;
esac
