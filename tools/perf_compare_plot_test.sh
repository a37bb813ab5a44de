#!/usr/bin/env bash
# tools/perf_compare --plot draws what a run measured: here a kept run
# (--plot-from, no measurement: figures are never asserted by a test) into
# an SVG and a PNG, with uroce, shm and tcp in both panels.
set -uo pipefail
compare=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cat > "$tmp/run.json" <<'JSON'
{"sizes": [64, 65536, 1048576],
 "latency_us": {"uroce": [3.1, 40.0, 600.0], "shm": [0.9, 12.0, 250.0], "tcp": [12.0, 60.0, 900.0]},
 "bandwidth_MBps": {"uroce": [20.6, 1638.4, 1747.6], "shm": [71.1, 5461.3, 4194.3], "tcp": [5.3, 1092.3, 1165.1]},
 "streaming_MBps": {"uroce send_bw": {"65536": 2400.0, "1048576": 2500.0}},
 "title": "test data"}
JSON
"$compare" --plot-from "$tmp/run.json" --plot "$tmp/run.svg" || { echo "FAIL: --plot svg"; exit 1; }
"$compare" --plot-from "$tmp/run.json" --plot "$tmp/run.png" || { echo "FAIL: --plot png"; exit 1; }
/usr/bin/python3 - "$tmp/run.svg" "$tmp/run.png" <<'PY'
import sys, xml.etree.ElementTree as ET
svg, png = sys.argv[1], sys.argv[2]
ET.parse(svg)  # well-formed
text = open(svg).read()
for label in ("uroce", "shm (ping-pong)", "tcp", "uroce send_bw (streaming)", "latency, half round trip",
              "bandwidth", "64 KiB", "1 MiB", "test data"):
    assert label in text, f"the SVG lacks {label!r}"
assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
print("ok: SVG and PNG drawn")
PY
