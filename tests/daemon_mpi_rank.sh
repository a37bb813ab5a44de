#!/usr/bin/env bash
# One MPI rank of tests/daemon_mpi_test.sh: attaches the program to the
# `uroce daemon` of the network namespace ("host") the rank runs in, with
# no uroce configuration of its own (`uroce exec` without --config). The
# daemon of namespace NS listens on SOCKET_DIR/NS.sock. Filesystem sockets
# reach across network namespaces, so a rank could attach to another host's
# daemon by mistake; the namespace is looked up here, not trusted from the
# environment (which orted inherits from mpirun in the first namespace).
#   args: UROCE SOCKET_DIR -- PROGRAM ARGS...
set -euo pipefail
uroce=$1 dir=$2
shift 2
[[ ${1:-} == -- ]] && shift
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}
ns=$(ip netns identify)
if [[ -z $ns || ! -S $dir/$ns.sock ]]; then
  echo "daemon_mpi_rank: rank $rank: no uroce daemon for this network namespace ('$ns', $dir/$ns.sock)" >&2
  exit 2
fi
echo "daemon_mpi_rank: rank $rank pid $$ on $(hostname) in namespace $ns, daemon $dir/$ns.sock" >&2
unset UROCE_CONFIG
export UROCE_DAEMON=$dir/$ns.sock
exec "$uroce" exec -- "$@"
