#!/usr/bin/env bash
# The README's first command must keep working: run the demo, check it says OK.
set -euo pipefail
out=$(tools/uroce demo 2>&1) || { echo "$out"; echo "uroce demo exited non-zero"; exit 1; }
echo "$out"
grep -q '^uroce demo: OK$' <<<"$out"
grep -q 'mbufs back in the pool: 4095 of 4095' <<<"$out"
