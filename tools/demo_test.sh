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
grep -q 'mbufs back in the pool: 8191 of 8191' <<<"$out"
