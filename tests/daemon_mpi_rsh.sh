#!/usr/bin/env bash
# Open MPI's "rsh agent" for tests/daemon_mpi_test.sh: a stand-in for ssh that
# reaches a "host" which is a network namespace on this machine. mpirun (in
# the first namespace) runs `AGENT HOST COMMAND...` to start its daemon
# (orted) on every other host in the hostfile; as ssh does, the agent joins
# COMMAND's words and hands them to a shell "there": here in the namespace of
# HOST, in a UTS namespace of its own whose hostname is HOST, so that the
# orted and its ranks see a machine named HOST (Open MPI tells nodes apart
# by hostname: its session directories in /tmp and the ranks'
# MPI_Get_processor_name). The environment is mpirun's (ssh would give a
# fresh one; nothing here depends on that).
#   UMPI_HOSTS="HOST=NAMESPACE ..." maps hosts to namespaces.
#   UMPI_AGENT_LIMIT: seconds the remote command may run (default 600), so
#   that an orted whose mpirun died cannot outlive the test.
#   args: HOST COMMAND...
set -euo pipefail
host=${1:?usage: daemon_mpi_rsh.sh HOST COMMAND...}
shift
ns=""
for pair in ${UMPI_HOSTS:?UMPI_HOSTS is not set}; do
  [[ ${pair%%=*} == "$host" ]] && ns=${pair#*=}
done
if [[ -z $ns ]]; then
  echo "daemon_mpi_rsh: unknown host '$host' (UMPI_HOSTS=$UMPI_HOSTS)" >&2
  exit 255  # what ssh returns when it cannot reach a host
fi
# $0 of the inner shell is the host name, $1 the command line (as sshd's
# `sh -c "$*"`).
# shellcheck disable=SC2016  # expanded by the inner shell
exec timeout -k 5 "${UMPI_AGENT_LIMIT:-600}" ip netns exec "$ns" unshare --uts -- \
  /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
