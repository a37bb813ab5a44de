#!/usr/bin/env bash
# Wireshark's InfiniBand dissector (tshark) as an outside oracle for `uroce
# dump --json`, on the kernel rxe captures and on frames uroce builds.
# Arguments: uroce, write_sample_frames, the comparison script, captures...
set -euo pipefail
if ! command -v tshark >/dev/null 2>&1; then
  echo "FAIL: tshark is not installed; tools/setup installs it (Debian package tshark)" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "FAIL: python3 is not installed; tools/setup installs it" >&2
  exit 1
fi
uroce=$1 write_sample_frames=$2 compare=$3
shift 3
tmp=${TEST_TMPDIR:-$(mktemp -d)}
# tshark reads and writes its profile under $HOME.
export HOME=$tmp
"$write_sample_frames" "$tmp/uroce_built.pcap" >/dev/null
exec python3 "$compare" "$uroce" "$@" "$tmp/uroce_built.pcap"
