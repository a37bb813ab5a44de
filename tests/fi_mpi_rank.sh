#!/usr/bin/env bash
# One MPI rank of tests/fi_mpi_test.sh: mpirun starts this wrapper per rank;
# it runs the program over uroce with the rank's own endpoint (rank 0: the
# memif server end, CFG_A; rank 1: the client end, CFG_B), or as it is when
# the provider under test is not uroce.
#   args: PROVIDER UROCE CFG_A CFG_B -- PROGRAM ARGS...
set -euo pipefail
provider=$1 uroce=$2 cfg_a=$3 cfg_b=$4
shift 4
[[ ${1:-} == -- ]] && shift
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}
case "$rank" in
  0) cfg=$cfg_a ;;
  1) cfg=$cfg_b ;;
  *) echo "fi_mpi_rank: rank $rank: this test has two ranks" >&2; exit 2 ;;
esac
if [[ $provider == uroce ]]; then
  exec "$uroce" exec --config "$cfg" -- "$@"
fi
exec "$@"
