#!/usr/bin/env bash
# uroce0 handed into unprivileged containers through CDI (`uroce cdi`), with
# Debian's podman and runc, as a user of the README would:
#   1. an image built offline from this host's packages
#      (tools/container/image.py: ibv_rc_pingpong, rping, fi_pingpong,
#      mpirun; nothing of uroce's) and imported into a podman store of this
#      test's own;
#   2. `uroce daemon` on the host (uplink net_null: no frame leaves the
#      machine) and `uroce cdi` writing the spec into /var/run/cdi;
#   3. a container without the device sees no uroce device, no socket and
#      none of uroce's libraries; one with it sees uroce0, and has no
#      capability, no device node and no network but its own loopback;
#   4. ibv_rc_pingpong, fi_pingpong -e msg and rping between two containers
#      (each started with --cap-drop=all --security-opt no-new-privileges
#      and the device), every byte checked (-c, -c, -V), through the host's
#      daemon;
#   5. isolation: a container sees none of another's processes (so none of
#      their memory: /proc/PID/fd and /proc/PID/mem do not exist for it), cannot
#      write into the socket's directory, and each attached program has a
#      slot and QPN range of its own in the daemon;
#   6. a container killed (SIGKILL) in the middle of a transfer is released by
#      the daemon, its peer's program ends instead of hanging, and two new
#      containers then run a pair as before;
#   7. (PARTS rootless) rootless podman: a user made for the test runs its
#      own `uroce daemon`, `uroce cdi` and podman with no privilege; a
#      container in its user namespace opens uroce0 and a pair runs; then
#      the host's daemon (root's) serves the user's containers through a
#      spec from `uroce cdi --rootless`, which the plain spec does not;
#   8. (PARTS mpi) mpirun with two ranks in each of two containers over
#      "uroce;ofi_rxm" (Open MPI's OFI MTL), tests/mpi_two_hosts.c: layout,
#      ping-pong on one "host" and across, MPI_Allreduce checked on every
#      rank. mpirun runs on the host and starts each container's orted by
#      `podman run` (its rsh agent, tests/container_mpi_rsh.sh). Then the
#      same job with one container frozen for 50 s (podman pause) once its
#      ranks talk across the containers, longer than a QP's give-up time
#      used to be (34 s): it still passes.
# The containers share one network namespace made by this test (their own
# loopback only: the side channels of the programs, Open MPI's TCP); RoCE
# never touches it: it goes through the daemon's socket and shared memory.
#
# Needs root (podman as root with runc: Debian's crun refuses this kernel's
# cgroup layout). The podman store, its configuration and the CDI spec are
# this test's own and removed on exit.
#   args: UROCE MPI_PROGRAM IMAGE_PY MPI_AGENT [PARTS] (PARTS: comma list of
#   base, rootless, mpi; default all)
set -uo pipefail
abs() {
  [[ -e $1 ]] || { echo "FAIL: $1 does not exist" >&2; exit 1; }
  readlink -f "$1"
}
UROCE=$(abs "$1") && MPI_PROGRAM=$(abs "$2") && IMAGE_PY=$(abs "$3") && AGENT=$(abs "$4") || exit 1
PARTS=${5:-base,rootless,mpi}
id=$$
TMP=$(mktemp -d /tmp/uctr.XXXXXX)
chmod 0755 "$TMP"
NETNS=uctr-$id
CDI_SPEC=/var/run/cdi/uroce-test-$id.json
RL_SPEC=/var/run/cdi/uroce-test-rl-$id.json
RL_ROOT_SPEC=/var/run/cdi/uroce-test-rl-root-$id.json
RL_MADE=""
DEVICE=uroce.dev/rdma=test-$id
IMAGE=localhost/uroce-test:$id
FAILS=0
pids=()
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
has_part() { [[ ,$PARTS, == *,$1,* ]]; }

# podman with this test's own store and configuration (containers.conf(5):
# default_ulimits = [] because the defaults cannot be raised here; the file
# event log because there may be no journald).
cat > "$TMP/containers.conf" <<EOF
[containers]
default_ulimits = []
[engine]
events_logger = "file"
EOF
export CONTAINERS_CONF=$TMP/containers.conf
PODMAN=(podman --runtime /usr/sbin/runc --cgroup-manager=cgroupfs --root "$TMP/store" --runroot "$TMP/runroot"
  --tmpdir "$TMP/podman-tmp")
# Podman's complaints about this machine's cgroups, on every run.
quiet() { grep -vE 'pids limit|conmon to cgroupfs sandbox' || true; }
RUN=("${PODMAN[@]}" run --rm --cap-drop=all --security-opt no-new-privileges --network "ns:/run/netns/$NETNS")

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  "${PODMAN[@]}" rm -f -t 0 --all > /dev/null 2>&1 || true
  "${PODMAN[@]}" system reset --force > /dev/null 2>&1 || true
  if [[ -n $RL_MADE ]]; then
    pkill -KILL -u "$RL_USER" 2>/dev/null
    sleep 0.5
    userdel -r "$RL_USER" > /dev/null 2>&1 || true
  fi
  rm -f "$CDI_SPEC" "$RL_SPEC" "$RL_ROOT_SPEC"
  ip netns del "$NETNS" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [[ $(id -u) -ne 0 ]]; then
  echo "FAIL: container_test needs root (podman with runc, a network namespace)"
  exit 1
fi
for tool in podman /usr/sbin/runc nsenter mpirun setfacl; do
  command -v "$tool" > /dev/null || { echo "FAIL: $tool is not installed (tools/packages.txt; tools/setup)"; exit 1; }
done

echo "== 1. an image from this host's packages, offline"
IMAGE_TAR=$TMP/image.tar
if ! python3 "$IMAGE_PY" --tar "$IMAGE_TAR" "$IMAGE" > "$TMP/image.log" 2>&1 ||
  ! "${PODMAN[@]}" import --quiet "$IMAGE_TAR" "$IMAGE" >> "$TMP/image.log" 2>&1; then
  cat "$TMP/image.log"
  echo "FAIL: cannot build the image"
  exit 1
fi
head -1 "$TMP/image.log"

echo "== 2. the host's daemon, and its CDI spec"
mkdir -p "$TMP/run" && chmod 0755 "$TMP/run"
# max_processes_per_uid counts per uid and pid namespace: each container
# has its own 3 (section 5).
cat > "$TMP/daemon.ini" <<EOF
[eal]
hugepages = no
log_level = *:error
telemetry = no
file_prefix = uctr-$id
[daemon]
socket = $TMP/run/uroce.sock
max_processes_per_uid = 3
[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
EOF
timeout -k 5 900 "$UROCE" daemon --config "$TMP/daemon.ini" > "$TMP/daemon.log" 2>&1 &
dpid=$!
pids+=("$dpid")
for _ in $(seq 100); do [[ -S $TMP/run/uroce.sock ]] && break; sleep 0.1; done
[[ -S $TMP/run/uroce.sock ]] || { cat "$TMP/daemon.log"; echo "FAIL: the daemon did not start"; exit 1; }
if ! "$UROCE" cdi --socket "$TMP/run/uroce.sock" --libraries "$TMP/cdi" --output "$CDI_SPEC" --name "test-$id" \
  > "$TMP/cdi.log" 2>&1; then
  cat "$TMP/cdi.log"
  echo "FAIL: uroce cdi"
  exit 1
fi
cat "$TMP/cdi.log"
if ! ip netns add "$NETNS" || ! ip -n "$NETNS" link set lo up; then
  echo "FAIL: cannot make a network namespace"
  exit 1
fi

if has_part base; then
  echo "== 3. without the device, and with it"
  out=$("${RUN[@]}" "$IMAGE" sh -c 'ibv_devices; echo "socket: $(ls /run/uroce 2>&1)"; echo "libs: $(ls /opt/uroce 2>&1)"
    echo "env: $(env | grep -cE "^(UROCE_|FI_PROVIDER_PATH)")"' 2>&1 | quiet)
  echo "$out" | sed 's/^/  /'
  grep -q uroce0 <<<"$out" && fail "a container without the device sees uroce0"
  grep -q "^socket: ls: cannot access" <<<"$out" || fail "a container without the device sees /run/uroce"
  grep -q "^libs: ls: cannot access" <<<"$out" || fail "a container without the device sees /opt/uroce"
  grep -q "^env: 0" <<<"$out" || fail "a container without the device has uroce's environment"

  # shellcheck disable=SC2016  # expanded in the container
  out=$("${RUN[@]}" --device "$DEVICE" "$IMAGE" sh -c 'ibv_devinfo -d uroce0 | head -3
    grep -E "^Cap(Inh|Prm|Eff|Bnd|Amb):" /proc/self/status; echo "devices: $(ls /dev/infiniband 2>&1)"
    echo "interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"
    touch /run/uroce/x 2>/dev/null && echo "socket dir: writable" || echo "socket dir: read-only"' 2>&1 | quiet)
  echo "$out" | sed 's/^/  /'
  grep -q "hca_id:.*uroce0" <<<"$out" || fail "a container with the device does not open uroce0"
  [[ $(grep -cE '^Cap(Inh|Prm|Eff|Bnd|Amb):[[:space:]]+0000000000000000$' <<<"$out") -eq 5 ]] ||
    fail "the container kept a capability"
  grep -q "^devices: ls: cannot access" <<<"$out" || fail "the device gave the container a device node"
  grep -q "^interfaces: lo $" <<<"$out" || fail "the container has an interface other than its loopback"
  grep -q "^socket dir: read-only" <<<"$out" || fail "the container can write into the daemon socket's directory"

  # pair NAME EXPECT "SERVER COMMAND" "CLIENT COMMAND": two containers, the
  # client's once the server's program has attached to the daemon; both must
  # exit 0 and print EXPECT. A client that found no server yet (nothing
  # connected: "Couldn't connect", a REJ before any ESTABLISHED) is started
  # again, at most twice; every attempt's output is kept.
  pair() {
    local name=$1 expect=$2 server=$3 client=$4
    local prog=${server%% *}
    local before
    before=$(grep -c "attached pid .*($prog)" "$TMP/daemon.log")
    # shellcheck disable=SC2086  # the commands split into words
    timeout -k 5 120 "${RUN[@]}" --name "uctr-$id-$name-s" --device "$DEVICE" "$IMAGE" $server \
      > "$TMP/$name.server" 2>&1 &
    local spid=$!
    pids+=("$spid")
    for _ in $(seq 300); do
      [[ $(grep -c "attached pid .*($prog)" "$TMP/daemon.log") -gt $before ]] && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.1
    done
    sleep 0.5  # from attached to listening
    local crc=1 attempt
    for attempt in 1 2 3; do
      # shellcheck disable=SC2086
      timeout -k 5 120 "${RUN[@]}" --name "uctr-$id-$name-c$attempt" --device "$DEVICE" "$IMAGE" $client \
        > "$TMP/$name.client.$attempt" 2>&1
      crc=$?
      cp "$TMP/$name.client.$attempt" "$TMP/$name.client"
      [[ $crc -ne 0 ]] || break
      grep -q "Couldn't connect to" "$TMP/$name.client" && { sleep 1; continue; }
      grep -q "REJECTED" "$TMP/$name.client" && ! grep -q "ESTABLISHED" "$TMP/$name.client" && { sleep 1; continue; }
      break
    done
    wait "$spid"
    local src=$?
    if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -qE -- "$expect" "$TMP/$name.client" ||
      ! grep -qE -- "$expect" "$TMP/$name.server"; then
      fail "$name: server rc=$src client rc=$crc after $attempt attempt(s)"
      echo "--- server:"; quiet < "$TMP/$name.server" | tail -30
      local f
      for f in "$TMP/$name.client".[0-9]; do echo "--- client ($f):"; quiet < "$f" | tail -30; done
      return 1
    fi
    echo "ok: $name: $(grep -E -- "$expect" "$TMP/$name.client" | tail -1 | cut -c1-100)"
  }
  echo "== 4. pairs of containers through the host's daemon"
  pair rc_pingpong "iters in" "ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p 21001" \
    "ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p 21001 127.0.0.1"
  pair fi_pingpong "^4k +200 +=200 " "fi_pingpong -p uroce -e msg -c -S 4096 -I 200 -B 21002" \
    "fi_pingpong -p uroce -e msg -c -S 4096 -I 200 -P 21002 127.0.0.1"
  pair rping "ping data: rdma-ping-19: " \
    "rping -s -a 10.88.0.1 -p 21003 -C 20 -S 100 -V -v" "rping -c -a 10.88.0.1 -p 21003 -C 20 -S 100 -V -v"
  links=$(timeout 20 "$UROCE" stats --daemon "$TMP/run/uroce.sock" 2>&1 | grep -E '^links')
  echo "  daemon: $links"
  grep -qE 'made=[1-9]' <<<"$links" || fail "no local link was made between the containers' programs"

  echo "== 5. isolation between containers"
  before=$(grep -c "attached pid .*(ibv_rc_pingpong)" "$TMP/daemon.log")
  timeout -k 5 120 "${RUN[@]}" --name "uctr-$id-victim" --device "$DEVICE" "$IMAGE" \
    ibv_rc_pingpong -g 0 -p 21004 > "$TMP/victim.log" 2>&1 &
  vpid=$!
  pids+=("$vpid")
  for _ in $(seq 300); do
    [[ $(grep -c "attached pid .*(ibv_rc_pingpong)" "$TMP/daemon.log") -gt $before ]] && break
    sleep 0.1
  done
  victim_host_pid=$(sed -n 's/.*attached pid \([0-9]*\) uid .*(ibv_rc_pingpong).*/\1/p' "$TMP/daemon.log" | tail -1)
  # In a second container: three programs of its own attached (the daemon's
  # max_processes_per_uid below), then what it can see and do.
  # shellcheck disable=SC2016  # expanded in the container
  out=$("${RUN[@]}" --device "$DEVICE" "$IMAGE" sh -c '
    for p in 21101 21102 21103; do ibv_rc_pingpong -g 0 -p $p > /dev/null 2>&1 & done
    sleep 3
    echo "processes: $(ls -d /proc/[0-9]* | wc -l)"
    echo "victim: $(ls /proc/'"$victim_host_pid"'/fd 2>&1 | head -1)"
    echo "programs: $(cat /proc/[0-9]*/comm 2>/dev/null | sort | uniq -c | tr -s " \n" " ")"
    python3 -c "
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(\"/run/uroce/uroce.sock\")
s.send(b\"STATS\")
print(s.recv(65536).decode())" | grep "^process" | sed "s/^/stats: /"
    ibv_devinfo -d uroce0 > /tmp/devinfo.out 2>&1; echo "fourth: exit $? $(grep -o "has [0-9]* processes attached already" /tmp/devinfo.out)"
    kill $(jobs -p) 2>/dev/null' 2>&1 | quiet)
  echo "$out" | sed 's/^/  /'
  grep -q "^victim: ls: cannot access" <<<"$out" || fail "a container reaches /proc/$victim_host_pid of another"
  grep -qE "^programs:.* 3 ibv_rc_pingpong " <<<"$out" || fail "a container sees other programs than its own three"
  [[ $(grep -c "^stats: process " <<<"$out") -eq 3 ]] || fail "STATS from a container does not show exactly its own 3 programs"
  grep -q "^stats: process pid=$victim_host_pid " <<<"$out" && fail "STATS shows a container another container's program"
  grep -q "^fourth: exit [1-9][0-9]* has 3 processes attached already" <<<"$out" ||
    fail "a container's fourth program was not refused ([daemon] max_processes_per_uid = 3 per container)"
  # Every attached program its own slot and QPN range; never two at once in one.
  sessions=$(grep -c "attached pid" "$TMP/daemon.log")
  overlaps=$(awk '/attached pid/ { for (i = 1; i <= NF; i++) if ($i == "slot") s = $(i + 1); sub(/,/, "", s)
      if (s in live) dup++; live[s] = 1 }
    /released pid/ { for (i = 1; i <= NF; i++) if ($i == "slot") s = $(i + 1); sub(/;/, "", s); delete live[s] }
    END { print dup + 0 }' "$TMP/daemon.log")
  echo "  daemon: $sessions programs attached so far, $overlaps slots given twice at once"
  [[ $overlaps -eq 0 ]] || fail "the daemon gave one slot to two live programs"
  "${PODMAN[@]}" kill "uctr-$id-victim" > /dev/null 2>&1
  wait "$vpid" 2>/dev/null

  echo "== 6. a container killed in the middle of a transfer"
  before=$(grep -c "attached pid .*(ibv_rc_pingpong)" "$TMP/daemon.log")
  timeout -k 5 120 "${RUN[@]}" --name "uctr-$id-kill-s" --device "$DEVICE" "$IMAGE" \
    ibv_rc_pingpong -g 0 -s 65536 -n 1000000 -p 21005 > "$TMP/kill.server" 2>&1 &
  kspid=$!
  pids+=("$kspid")
  sleep 2
  timeout -k 5 120 "${RUN[@]}" --name "uctr-$id-kill-c" --device "$DEVICE" "$IMAGE" \
    ibv_rc_pingpong -g 0 -s 65536 -n 1000000 -p 21005 127.0.0.1 > "$TMP/kill.client" 2>&1 &
  kcpid=$!
  pids+=("$kcpid")
  # Mid-transfer: both attached, and two seconds into a million 64 KiB
  # round trips (minutes of work), both still running.
  for _ in $(seq 300); do
    [[ $(grep -c "attached pid .*(ibv_rc_pingpong)" "$TMP/daemon.log") -ge $((before + 2)) ]] && break
    sleep 0.1
  done
  sleep 2
  kill -0 "$kspid" 2>/dev/null && kill -0 "$kcpid" 2>/dev/null || fail "the transfer to interrupt is not running"
  released_before=$(grep -c "released pid" "$TMP/daemon.log")
  start=$SECONDS
  "${PODMAN[@]}" kill --signal KILL "uctr-$id-kill-c" > /dev/null 2>&1 || fail "podman kill"
  wait "$kcpid" 2>/dev/null
  # The server's program notices (an error completion or its peer's end) and exits, in bounded time.
  wait "$kspid"
  src=$?
  took=$((SECONDS - start))
  echo "  the killed container's peer ended after ${took}s (exit $src):"
  quiet < "$TMP/kill.server" | sed 's/^/    /'
  [[ $src -eq 124 || $src -eq 137 ]] && fail "the peer of the killed container hung"
  [[ $src -eq 0 ]] && fail "the peer of the killed container ended successfully: nothing was interrupted"
  released_after=$(grep -c "released pid" "$TMP/daemon.log")
  echo "  daemon: $((released_after - released_before)) programs released"
  [[ $((released_after - released_before)) -ge 2 ]] || fail "the daemon did not release both programs"
  kill -0 "$dpid" 2>/dev/null || fail "the daemon died"
  pair after_kill "iters in" "ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p 21006" \
    "ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p 21006 127.0.0.1"
fi

if has_part rootless; then
  echo "== 7. rootless podman: an ordinary user's own daemon and containers"
  # A user made for this test (removed on exit) with subordinate ids
  # (/etc/subuid, /etc/subgid: useradd gives them where newuidmap is
  # installed), running its own `uroce daemon` and its own podman with no
  # privilege at all. Bazel's tree is not the user's to read: the binary and
  # libraries are copied.
  RL_USER=uroce-rl-$id
  if ! useradd -m -s /bin/sh "$RL_USER" 2>"$TMP/useradd.log"; then
    cat "$TMP/useradd.log"
    fail "cannot add the user $RL_USER"
  else
    RL_MADE=yes
    grep -q "^$RL_USER:" /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$RL_USER"
    RL=$TMP/rl
    mkdir -p "$RL/bin" "$RL/lib/verbs" "$RL/lib/rdmacm" "$RL/lib/fabric" "$RL/run" "$RL/xdg" "$RL/home"
    install -m 0755 "$UROCE" "$RL/bin/uroce"
    install -m 0644 "$IMAGE_TAR" "$RL/image.tar"
    for pair in verbs:libibverbs.so.1 rdmacm:librdmacm.so.1 fabric:liburoce-fi.so; do
      install -m 0755 "$(dirname "$UROCE")/../api/${pair%%:*}/${pair#*:}" "$RL/lib/${pair%%:*}/" ||
        fail "no ${pair#*:} beside uroce"
    done
    sed -e "s|^socket = .*|socket = $RL/run/uroce.sock|" -e "s|^file_prefix = .*|file_prefix = uctr-rl-$id|" \
      "$TMP/daemon.ini" > "$RL/daemon.ini"
    printf '[containers]\ndefault_ulimits = []\n[engine]\nevents_logger = "file"\n' > "$RL/containers.conf"
    chown -R "$RL_USER:" "$RL"
    chmod 0755 "$RL" "$RL/run"
    chmod 0700 "$RL/xdg"
    # setpriv execs (no process in between: signals reach the program). The
    # working directory must be the user's to enter (podman goes back to it).
    cd "$RL" || fail "cd $RL"
    RL_AS=(setpriv --reuid="$RL_USER" --regid="$RL_USER" --init-groups -- env -i PATH=/usr/bin:/bin
      HOME="$RL/home" XDG_RUNTIME_DIR="$RL/xdg" CONTAINERS_CONF="$RL/containers.conf"
      UROCE_VERBS_LIB_DIR="$RL/lib/verbs" UROCE_RDMACM_LIB_DIR="$RL/lib/rdmacm" UROCE_FABRIC_LIB_DIR="$RL/lib/fabric")
    as_user() { "${RL_AS[@]}" "$@"; }
    RL_PODMAN=(podman --runtime /usr/sbin/runc --cgroup-manager=cgroupfs --root "$RL/store" --runroot "$RL/runroot")
    # (not through as_user: a function in the background is a subshell, and
    # the signal below would stop that instead of the daemon)
    "${RL_AS[@]}" timeout -k 5 600 "$RL/bin/uroce" daemon --config "$RL/daemon.ini" > "$TMP/rl-daemon.log" 2>&1 &
    rl_dpid=$!
    pids+=("$rl_dpid")
    for _ in $(seq 100); do [[ -S $RL/run/uroce.sock ]] && break; sleep 0.1; done
    [[ -S $RL/run/uroce.sock ]] || { cat "$TMP/rl-daemon.log"; fail "the user's daemon did not start"; }
    # The user writes the spec; installing it in /var/run/cdi is root's.
    as_user "$RL/bin/uroce" cdi --socket "$RL/run/uroce.sock" --libraries "$RL/cdi" --output "$RL/spec.json" \
      --name "rl-$id" > "$TMP/rl-cdi.log" 2>&1 || { cat "$TMP/rl-cdi.log"; fail "uroce cdi as $RL_USER"; }
    install -D -m 0644 "$RL/spec.json" "$RL_SPEC"
    if ! as_user "${RL_PODMAN[@]}" import --quiet "$RL/image.tar" "$IMAGE" > "$TMP/rl-import.log" 2>&1; then
      quiet < "$TMP/rl-import.log"
      fail "rootless podman import"
    fi
    rl_run=("${RL_PODMAN[@]}" run --rm --cap-drop=all --security-opt no-new-privileges --device "uroce.dev/rdma=rl-$id")
    # shellcheck disable=SC2016  # expanded in the container
    out=$(as_user "${rl_run[@]}" --network none "$IMAGE" sh -c 'ibv_devinfo -d uroce0 | head -1
      echo "uid_map: $(tr -s " " < /proc/self/uid_map | tr "\n" ";")"' 2>&1 | quiet)
    echo "$out" | sed 's/^/  /'
    grep -q "hca_id:.*uroce0" <<<"$out" || fail "a rootless container does not open uroce0"
    grep -qE "uid_map: +0 $(id -u "$RL_USER") 1;" <<<"$out" || fail "the container is not in the user's user namespace"
    # rootless_pair DEVICE NAME PORT WHAT: ibv_rc_pingpong between two of the
    # user's containers given DEVICE, the server named NAME-s; the client
    # joins the server's network namespace (its loopback). Their output is
    # in $TMP/NAME.server and $TMP/NAME.client.
    rootless_pair() {
      local device=$1 name=$2 port=$3 what=$4 crc src
      as_user "${RL_PODMAN[@]}" run -d --cap-drop=all --security-opt no-new-privileges --device "$device" \
        --name "$name-s" --network none "$IMAGE" timeout 60 ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p "$port" \
        > /dev/null 2>&1
      sleep 2
      as_user timeout -k 5 90 "${RL_PODMAN[@]}" run --rm --cap-drop=all --security-opt no-new-privileges \
        --device "$device" --network "container:$name-s" "$IMAGE" \
        ibv_rc_pingpong -g 0 -c -s 4096 -n 200 -p "$port" 127.0.0.1 > "$TMP/$name.client" 2>&1
      crc=$?
      src=$(as_user "${RL_PODMAN[@]}" wait "$name-s" 2>/dev/null | tail -1)
      as_user "${RL_PODMAN[@]}" logs "$name-s" > "$TMP/$name.server" 2>&1
      if [[ $crc -ne 0 || ${src:-1} != 0 ]] || ! grep -q "iters in" "$TMP/$name.client" ||
        ! grep -q "iters in" "$TMP/$name.server"; then
        fail "$what: server ${src:-?} client $crc"
        quiet < "$TMP/$name.server" | tail -5
        quiet < "$TMP/$name.client" | tail -5
      else
        echo "ok: $what: $(grep "iters in" "$TMP/$name.client")"
      fi
    }
    rootless_pair "uroce.dev/rdma=rl-$id" "rl-$id" 21201 "rootless rc_pingpong"
    grep -q "attached pid .* uid $(id -u "$RL_USER") (ibv_rc_pingpong)" "$TMP/rl-daemon.log" ||
      fail "the user's daemon did not see the user's programs attach"
    kill -TERM "$rl_dpid" 2>/dev/null
    wait "$rl_dpid"
    rc=$?
    [[ $rc -eq 0 ]] || { tail -n 5 "$TMP/rl-daemon.log"; fail "the user's daemon did not stop cleanly (exit $rc)"; }

    echo "== 7b. the host's daemon, run by root, serves the user's rootless containers (uroce cdi --rootless)"
    # In the user's namespace root is the overflow uid: the programs refuse
    # root's daemon under the plain spec, and trust it under --rootless.
    # The user gets write access to the socket through an entry of its own
    # in the socket's ACL (acl(5); a group would not do: rootless podman
    # keeps no supplementary group); the user's podman can reach its
    # directory ($TMP and $TMP/run are 0755).
    overflow_uid=$(cat /proc/sys/kernel/overflowuid)
    "$UROCE" cdi --socket "$TMP/run/uroce.sock" --libraries "$TMP/cdi-rl" --output "$RL_ROOT_SPEC" \
      --name "rl-root-$id" --rootless > "$TMP/rl-root-cdi.log" 2>&1 ||
      { cat "$TMP/rl-root-cdi.log"; fail "uroce cdi --rootless"; }
    setfacl -m "u:$RL_USER:rw" "$TMP/run/uroce.sock" || fail "setfacl on the daemon's socket"
    # shellcheck disable=SC2016  # expanded in the container
    out=$(as_user "${RL_PODMAN[@]}" run --rm --cap-drop=all --security-opt no-new-privileges --device "$DEVICE" \
      --network none "$IMAGE" sh -c 'ibv_devinfo -d uroce0 2>&1 | head -3' 2>&1 | quiet)
    echo "$out" | sed 's/^/  plain spec: /'
    if grep -q "hca_id:.*uroce0" <<<"$out"; then
      fail "a rootless container took root's daemon without --rootless"
    elif ! grep -q "uid $overflow_uid" <<<"$out"; then
      fail "a rootless container with the plain spec: no word of the daemon's uid $overflow_uid"
    fi
    rootless_pair "uroce.dev/rdma=rl-root-$id" "rl-root-$id" 21202 "rootless rc_pingpong on root's daemon"
    grep -q "attached pid .* uid $(id -u "$RL_USER") (ibv_rc_pingpong)" "$TMP/daemon.log" ||
      fail "root's daemon did not see the user's programs attach"
    setfacl -x "u:$RL_USER" "$TMP/run/uroce.sock"
    cd / || true
  fi
fi

if has_part mpi; then
  printf 'uc-a slots=2\nuc-b slots=2\n' > "$TMP/hostfile"
  export UCTR_HOST_NET=/proc/$$/ns/net
  export UCTR_PODMAN="${PODMAN[*]}"
  export UCTR_RUN_ARGS="--cap-drop=all --security-opt no-new-privileges --network ns:/run/netns/$NETNS --device $DEVICE
    -v $MPI_PROGRAM:/opt/test/mpi_two_hosts:ro $IMAGE"
  # run_mpi NAME [FROZEN_S]: the job, its containers named uctr-ID-NAME-HOST,
  # its output in $TMP/NAME.log; returns mpirun's exit status. FROZEN_S: how
  # long the job is held still on purpose (added to the stall report's wait).
  # --leave-session-attached: the orted must not daemonize (its container
  # would end with it). plm_rsh_no_tree_spawn: only mpirun starts orteds.
  # The agent is given as "bash AGENT" because each orted looks for it too.
  # A job that has not passed after 90 s (it takes 10-30 s), plus the time
  # it is held frozen, is stalled:
  # what the daemon and every rank's threads were doing then goes into
  # $TMP/NAME.stall, which check_mpi prints.
  # The wait is by the clock, not by loop turns: when the machine stalls,
  # turns of a sleep loop take far longer than they say.
  # The kernel's own reports of CPUs that ran nothing else for tens of
  # seconds (workqueue lockups, RCU stalls) are counted at the start and the
  # new ones printed: a 2-core VM has frozen whole for 30-90 s with no
  # process of ours able to run (docs/containers.md).
  kernel_stalls() { dmesg 2>/dev/null | grep -E 'workqueue lockup|rcu.*(stall|starved)|soft lockup|blocked for more than'; }
  stall_report() {
    local name=$1 deadline=$((SECONDS + 90 + ${2:-0})) kernel_before p t
    kernel_before=$(kernel_stalls | wc -l)
    while [[ $SECONDS -lt $deadline ]]; do
      [[ -e $TMP/$name.ended ]] && return 0
      sleep 0.1
    done
    grep -q '^mpi_two_hosts: PASS' "$TMP/$name.log" && return 0
    {
      echo "--- stalled after $((90 + ${2:-0})) s; the kernel's stall reports since the job began (dmesg):"
      kernel_stalls | tail -n +$((kernel_before + 1)) | head -n 20
      echo "--- the daemon:"
      timeout 20 "$UROCE" stats --daemon "$TMP/run/uroce.sock" 2>&1
      # Each thread's schedstat (sched-stats.rst: ns on a CPU, ns waiting
      # on a run queue, the wait added when the thread is picked) twice,
      # about 2 s apart: a spinning thread gains CPU time, one that waits
      # for CPU gains wait, a blocked one (S) gains neither, and so does a
      # starved one (R). Read with builtins only (a loaded host forks
      # slowly).
      local ranks t cpu wait rest begin_ns end_ns cpu0 wait0
      ranks=$(pgrep -x mpi_two_hosts)
      declare -A before=() after=()
      begin_ns=$(date +%s%N)
      for p in $ranks; do
        for t in /proc/"$p"/task/*; do
          read -r cpu wait rest 2>/dev/null < "$t/schedstat" && before[$t]="$cpu $wait"
        done
      done
      sleep 2
      for p in $ranks; do
        for t in /proc/"$p"/task/*; do
          read -r cpu wait rest 2>/dev/null < "$t/schedstat" && after[$t]="$cpu $wait"
        done
      done
      end_ns=$(date +%s%N)
      for p in $ranks; do
        echo "--- pid $p in $(cat "/proc/$p/root/etc/hostname" 2>/dev/null): thread state wchan syscall;" \
          "ms on a CPU, ms runnable but waiting, in the last $(((end_ns - begin_ns) / 1000000)) ms"
        for t in /proc/"$p"/task/*; do
          [[ -n ${before[$t]:-} && -n ${after[$t]:-} ]] || continue  # began or ended meanwhile
          read -r cpu0 wait0 <<< "${before[$t]}"
          read -r cpu wait <<< "${after[$t]}"
          echo "$(cat "$t/comm" 2>/dev/null) $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)" \
            "$(cut -d' ' -f1-3 "$t/syscall" 2>/dev/null);" \
            "$(((cpu - cpu0) / 1000000)) $(((wait - wait0) / 1000000))"
        done
      done
      if command -v gdb > /dev/null; then
        for p in $ranks; do
          echo "--- pid $p: backtraces"
          timeout 30 gdb -p "$p" -batch -ex "thread apply all bt 15" 2>/dev/null | grep -E '^(#|Thread)'
          kill -CONT "$p" 2>/dev/null  # a gdb cut off by its timeout leaves the rank stopped
        done
      fi
    } > "$TMP/$name.stall" 2>&1
  }
  run_mpi() {
    stall_report "$1" "${2:-0}" &
    local reporter=$! rc
    UCTR_NAME_PREFIX=uctr-$id-$1- timeout -k 10 300 nsenter --net="/run/netns/$NETNS" mpirun --allow-run-as-root \
      --oversubscribe --bind-to none -np 4 --hostfile "$TMP/hostfile" --leave-session-attached \
      --mca plm rsh --mca plm_rsh_agent "bash $AGENT" --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include lo \
      --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include uroce --mca mtl_ofi_verbose 1 \
      --mca btl self,vader --mca osc ^ucx /opt/test/mpi_two_hosts > "$TMP/$1.log" 2>&1 < /dev/null
    rc=$?
    touch "$TMP/$1.ended"
    wait "$reporter"
    return $rc
  }
  # check_mpi NAME RC: what every rank of the job must have done.
  check_mpi() {
    grep -v 'mtl:ofi: ".*" not in include list' "$TMP/$1.log" | quiet | head -n 120
    echo "mpirun: exit $2"
    [[ -s $TMP/$1.stall ]] && cat "$TMP/$1.stall"
    [[ $2 -eq 0 ]] || fail "$1: mpirun exit $2"
    local provs rank
    provs=$(grep -c 'mtl:ofi:prov: uroce;ofi_rxm$' "$TMP/$1.log")
    [[ $provs -eq 4 ]] || fail "$1: expected all four ranks on 'uroce;ofi_rxm', found $provs"
    for rank in 0 1; do grep -q "^layout: rank $rank on uc-a\$" "$TMP/$1.log" || fail "$1: rank $rank not in uc-a"; done
    for rank in 2 3; do grep -q "^layout: rank $rank on uc-b\$" "$TMP/$1.log" || fail "$1: rank $rank not in uc-b"; done
    for rank in 0 1 2 3; do
      grep -q "^rank $rank: allreduce verified: sum 10, 262144 elements\$" "$TMP/$1.log" ||
        fail "$1: rank $rank: no verified MPI_Allreduce"
    done
    grep -q '^mpi_two_hosts: PASS' "$TMP/$1.log" || fail "$1: no PASS line from mpi_two_hosts"
  }

  echo "== 8. mpirun: two ranks in each of two containers, over uroce;ofi_rxm"
  run_mpi mpi
  check_mpi mpi $?

  # A container that gets no CPU for long, as a busy host's scheduler can
  # leave one and as this kind of VM has stalled whole for up to 88 s
  # (docs/containers.md): uc-b is frozen (podman pause, the kernel's cgroup
  # freezer) for FROZEN_S once the ranks talk across the containers. Its
  # peers' QPs must wait for it (local ACK timeout 22, 137 s in all). With
  # 20 (34 s) this job failed (MPI_ERR_INTERN here; by hand, jobs frozen
  # as long also stopped for good); with the kernel rdma_cm's 17 (4.3 s)
  # even an 8 s freeze failed it.
  FROZEN_S=${UCTR_FROZEN_S:-50}
  echo "== 8b. the same job with container uc-b frozen for $FROZEN_S s while the ranks talk across"
  (
    until grep -q "^cross-host" "$TMP/frozen.log" 2>/dev/null; do
      [[ -e $TMP/frozen.ended ]] && exit 0  # the job ended first: nothing to freeze
      sleep 0.1
    done
    # runc gives up ("unable to freeze") when the freezer has not stopped
    # every task within its retries, which a loaded 2-core host can make it
    # miss; it thaws what it froze, so the pause is simply asked again.
    : > "$TMP/pause.log"
    for attempt in 1 2 3 4 5 6; do
      [[ -e $TMP/frozen.ended ]] && exit 0
      "${PODMAN[@]}" pause "uctr-$id-frozen-uc-b" >> "$TMP/pause.log" 2>&1 && break
      [[ $attempt -eq 6 ]] && exit 1
      sleep 0.2
    done
    sleep "$FROZEN_S"
    date +%s.%N > "$TMP/thawed-at"
    "${PODMAN[@]}" unpause "uctr-$id-frozen-uc-b" >> "$TMP/pause.log" 2>&1
  ) &
  pauser=$!
  run_mpi frozen "$FROZEN_S"
  rc=$?
  ended=$(date +%s.%N)
  wait "$pauser" || fail "podman pause or unpause failed: $(cat "$TMP/pause.log")"
  check_mpi frozen $rc
  if [[ ! -s $TMP/thawed-at ]]; then
    fail "uc-b was never frozen: the job ended before its ranks talked across the containers"
  else
    awk "BEGIN { exit !($ended > $(cat "$TMP/thawed-at")) }" ||
      fail "the job ended before uc-b was thawed: the pause came too late to hold it"
  fi
fi

kill -TERM "$dpid" 2>/dev/null
wait "$dpid" || fail "the daemon did not stop cleanly"
echo "--- daemon log (first and last lines)"
head -n 3 "$TMP/daemon.log"
tail -n 5 "$TMP/daemon.log"
if [[ $FAILS -ne 0 ]]; then
  echo "$FAILS failure(s)"
  exit 1
fi
echo PASS
