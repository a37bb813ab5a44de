#!/usr/bin/env bash
# The README's first command must keep working: run the demo (fewer
# iterations), check that every operation was verified and nothing leaked.
set -euo pipefail
out=$(tools/uroce demo --iterations 200 2>&1) || { echo "$out"; echo "uroce demo exited non-zero"; exit 1; }
echo "$out"
grep -q '^uroce demo: OK$' <<<"$out"
for op in 'SEND ping-pong' 'RDMA WRITE' 'RDMA READ' 'FETCH_AND_ADD'; do
  grep -E "^  $op .* yes$" <<<"$out" >/dev/null || { echo "not verified: $op"; exit 1; }
done
# Every packet buffer back in its pool at the end (N of N).
grep -E '^  mbufs back in the pools: ([0-9]+) of \1$' <<<"$out" >/dev/null || { echo "mbufs leaked"; exit 1; }
# The MACs came from ARP, not from static entries: A asked and B answered.
grep -E '^  ARP: A sent [1-9][0-9]* request\(s\) and got [1-9][0-9]* reply\(ies\); B answered [1-9]' <<<"$out" \
  >/dev/null || { echo "no ARP exchange"; exit 1; }
