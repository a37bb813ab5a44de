#!/bin/bash
# The libfabric provider end to end in one process (tests/fi_provider_checks.cc)
# over configs/ring.ini, loaded the way users load it: `uroce exec` puts
# uroce's libibverbs.so.1 in LD_LIBRARY_PATH and liburoce-fi.so's folder in
# FI_PROVIDER_PATH; the system's libfabric does the rest.
set -uo pipefail
UROCE="$1"
CONFIG="$2"
CHECKS="$3"
exec timeout -k 5 240 "$UROCE" exec --config "$CONFIG" -- "$CHECKS"
