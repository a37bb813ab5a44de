#!/bin/sh
# A container's entrypoint for a job that uses RDMA through uroce: starts
# `uroce daemon` on the container's own NIC (shared with the kernel: its
# address and MAC, RoCE steered to uroce by XDP, or af_packet where XDP
# cannot load), waits until it serves, runs the job's command with uroce's
# libraries in front (`uroce exec`: every process the job starts attaches to
# the daemon, no per-process configuration), then stops the daemon and exits
# with the job's status.
#
#   entrypoint.sh [--] COMMAND [ARGS...]
#
# Environment:
#   UROCE            the uroce binary (default: uroce on PATH)
#   UROCE_CONFIG_FILE  the daemon's configuration (default /etc/uroce/uroce.ini;
#                    if it does not exist, one is written for UROCE_INTERFACE)
#   UROCE_INTERFACE  the NIC (default: the default route's interface, else the
#                    only interface other than lo)
#   UROCE_DAEMON     the control socket (default /run/uroce/uroce.sock)
# Needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN) for XDP, CAP_NET_RAW for
# af_packet: `docker run --cap-add NET_ADMIN --cap-add NET_RAW --cap-add BPF`.
set -eu
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
  echo "usage: entrypoint.sh [--] COMMAND [ARGS...]" >&2
  exit 2
fi
uroce=${UROCE:-uroce}
socket=${UROCE_DAEMON:-/run/uroce/uroce.sock}
config=${UROCE_CONFIG_FILE:-/etc/uroce/uroce.ini}
if [ ! -f "$config" ]; then
  iface=${UROCE_INTERFACE:-}
  if [ -z "$iface" ]; then
    iface=$(ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
  fi
  if [ -z "$iface" ]; then
    ifaces=$(ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); if ($2 != "lo") print $2}')
    [ "$(echo "$ifaces" | wc -l)" -eq 1 ] && iface=$ifaces
  fi
  if [ -z "$iface" ]; then
    echo "entrypoint.sh: cannot tell which interface is the NIC; set UROCE_INTERFACE" >&2
    exit 2
  fi
  config=$(mktemp /tmp/uroce-daemon.XXXXXX.ini)
  cat > "$config" <<INI
[eal]
lcores = 0
log_level = *:error
telemetry = no
[daemon]
socket = $socket
[endpoint.$iface]
port = kernel:$iface
INI
fi
# The daemon logs to our stderr. It serves once its control socket answers.
"$uroce" daemon --config "$config" &
daemon=$!
i=0
until "$uroce" stats --daemon "$socket" > /dev/null 2>&1; do
  i=$((i + 1))
  if ! kill -0 "$daemon" 2>/dev/null || [ $i -gt 300 ]; then
    echo "entrypoint.sh: uroce daemon did not start" >&2
    kill -TERM "$daemon" 2>/dev/null
    exit 1
  fi
  sleep 0.1
done
# The container's stop signal goes to the job; the daemon stops after it.
set +e
UROCE_DAEMON=$socket "$uroce" exec -- "$@" &
job=$!
trap 'kill -TERM "$job" 2>/dev/null' INT TERM
wait "$job"
status=$?
while kill -0 "$job" 2>/dev/null; do
  wait "$job"
  status=$?
done
kill -TERM "$daemon" 2>/dev/null
wait "$daemon"
exit $status
