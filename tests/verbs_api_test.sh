#!/bin/bash
# verbs_api_checks (gtest, linked against Debian's libibverbs) over uroce's
# libibverbs.so.1 under `uroce exec`, over configs/ring.ini.
set -uo pipefail
UROCE="$1"
CONFIG="$2"
CHECKS="$3"
exec timeout -k 5 120 "$UROCE" exec --config "$CONFIG" -- "$CHECKS"
