#!/usr/bin/env bash
# Open MPI's "rsh agent" for tests/container_test.sh: a stand-in for ssh
# whose "host" is a container started for it. mpirun runs `AGENT HOST
# COMMAND...` to start its daemon (orted) on each host of the hostfile; this
# runs COMMAND (its words joined, as sshd's `sh -c`) as the main process of a
# new container named UCTR_NAME_PREFIX+HOST with hostname HOST, given
# UCTR_RUN_ARGS (the options of `podman run`, then the image). The orted's
# ranks are its children, in the container, with the container's
# environment (the CDI device's). mpirun runs in the containers' network
# namespace (so that they reach it on loopback); podman itself must be
# started from the host's (UCTR_HOST_NET), where it may join another.
#   UCTR_PODMAN: the podman command; UCTR_AGENT_LIMIT: seconds (default 300).
#   args: HOST COMMAND...
set -euo pipefail
host=${1:?usage: container_mpi_rsh.sh HOST COMMAND...}
shift
# shellcheck disable=SC2086  # the podman command and its options split into words
exec nsenter --net="${UCTR_HOST_NET:?}" timeout -k 5 "${UCTR_AGENT_LIMIT:-300}" ${UCTR_PODMAN:?} run --rm \
  --name "${UCTR_NAME_PREFIX:-}$host" --hostname "$host" ${UCTR_RUN_ARGS:?} sh -c "$*"
