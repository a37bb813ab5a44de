#!/bin/bash
# rdma-core 44's own Python test suite (python3-pyverbs: the tests Debian
# ships in /usr/share/doc/rdma-core/tests) over uroce's libibverbs.so.1,
# unmodified, under `uroce exec` over configs/ring.ini (devices uroce0 and
# uroce1 on a net_ring pair; every test connects QPs of one device: loopback).
# rdma_core_suite.py prints the counts per module and fails on any failure,
# error, or skip whose reason the "not offered" lists of docs/interoperability.md do not give.
set -uo pipefail
UROCE="$1"
CONFIG="$2"
RUNNER="$3"
SRC=/usr/share/doc/rdma-core/tests
# pyverbs is built for Debian's python3; a python3 earlier on PATH (pyenv)
# would not find it.
PYTHON=/usr/bin/python3
if [[ ! -f $SRC/run_tests.py ]] || ! "$PYTHON" -c 'import pyverbs' 2>/dev/null; then
  echo "FAIL: python3-pyverbs is not installed (tools/setup installs it)"
  exit 1
fi
WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/rdma-core.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# Debian compresses the larger modules; Python imports only plain files.
cp -r "$SRC" "$WORK/tests"
gunzip -f "$WORK"/tests/*.gz
# Twice: over the IPv4 GID (index 0, the suite's default choice) and over
# the IPv6 one (index 1): every connection and address handle in IPv6 RoCEv2.
status=0
for gid in 0 1; do
  timeout -k 10 600 "$UROCE" exec --config "$CONFIG" -- "$PYTHON" "$RUNNER" "$WORK/tests" uroce0 "$gid" || status=1
done
exit $status
