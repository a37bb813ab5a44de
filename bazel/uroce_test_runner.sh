#!/usr/bin/env bash
# The test bazel/defs.bzl's uroce_test runs: the program under `uroce exec`,
# in one process (configs/ring.ini), two (a memif pair) or more (attached to
# a uroce daemon of the test's own), each given its rank's extra arguments;
# passes when every process exits 0.
#
# usage: uroce_test_runner.sh UROCE RING PAIR_A PAIR_B PROCESSES IMPAIR|- \
#            STAGGER_MS RANK0_ARGS|- [RANK1_ARGS|-] -- PROGRAM [ARGS...]
# RANKn_ARGS: words joined by '|'.
set -uo pipefail
uroce=$1 ring=$2 pair_a=$3 pair_b=$4 processes=$5 impair=$6 stagger_ms=$7
shift 7
rank_args=()
for ((r = 0; r < processes; r++)); do rank_args+=("$1"); shift; done
[[ ${1:-} == -- ]] || { echo "uroce_test_runner: expected -- before the program" >&2; exit 2; }
shift
program=("$@")
[[ ${#program[@]} -gt 0 ]] || { echo "uroce_test_runner: no program" >&2; exit 2; }

exec_flags=()
[[ $impair != - ]] && exec_flags+=(--impair "$impair")
export UROCE_SIZE=$processes UROCE_SERVER_IP=10.77.0.1
daemon_pid=
if ((processes == 1)); then
  configs=("$ring")
  UROCE_SERVER_IP=10.99.0.1
elif ((processes == 2)); then
  configs=("$pair_a" "$pair_b")
  # The pair's memif socket in a directory of the test's own (mode 0700),
  # removed at exit with whatever a killed process left there.
  dir=$(mktemp -d /tmp/uroce-test.XXXXXX)  # short: a socket path has 108 bytes
  trap 'rm -rf "$dir"' EXIT
  export UROCE_RUNTIME_DIR=$dir
else
  # More processes share one host device, as on a host with one NIC: a uroce
  # daemon of the test's own whose uplink goes nowhere (net_null, no-rx=1:
  # without it net_null "receives" an endless stream of zeroed frames); every
  # rank attaches to it and has uroce0 at 10.88.0.1, frames between ranks
  # cross the daemon's switch.
  if [[ $impair != - ]]; then
    echo "uroce_test_runner: impair needs processes = 1 or 2 (the daemon's ports are not impaired)" >&2
    exit 2
  fi
  dir=$(mktemp -d /tmp/uroce-test.XXXXXX)  # short: a socket path has 108 bytes
  trap 'kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; rm -rf "$dir"' EXIT
  cat > "$dir/daemon.ini" <<INI
[eal]
lcores = 0
hugepages = no
log_level = *:error
telemetry = no

[daemon]
socket = $dir/uroce.sock

[endpoint.up]
port = net_null0,no-rx=1
ipv4 = 10.88.0.1
ipv6 = fd00:88::1
INI
  "$uroce" daemon --config "$dir/daemon.ini" > >(sed -u "s/^/[daemon] /") 2>&1 &
  daemon_pid=$!
  for _ in $(seq 200); do [[ -S $dir/uroce.sock ]] && break; sleep 0.05; done
  [[ -S $dir/uroce.sock ]] || { echo "uroce_test_runner: the daemon did not start" >&2; exit 1; }
  export UROCE_DAEMON=$dir/uroce.sock UROCE_SERVER_IP=10.88.0.1
  configs=()
  for ((r = 0; r < processes; r++)); do configs+=(-); done
fi

pids=()
for ((r = 0; r < processes; r++)); do
  extra=()
  [[ ${rank_args[r]} != - ]] && IFS='|' read -ra extra <<<"${rank_args[r]}"
  ((r > 0)) && sleep "$(awk -v ms="$stagger_ms" 'BEGIN { print ms / 1000 }')"
  config_flags=()
  [[ ${configs[r]} != - ]] && config_flags=(--config "${configs[r]}")
  echo "uroce_test: rank $r: uroce exec ${config_flags[*]} ${exec_flags[*]} -- ${program[*]} ${extra[*]}"
  UROCE_RANK=$r "$uroce" exec "${config_flags[@]}" "${exec_flags[@]}" -- "${program[@]}" "${extra[@]}" \
    > >(sed -u "s/^/[rank $r] /") 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < processes; r++)); do
  wait "${pids[r]}"
  rc=$?
  echo "uroce_test: rank $r exited $rc"
  ((rc != 0)) && status=1
done
exit $status
