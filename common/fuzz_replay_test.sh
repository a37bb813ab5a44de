#!/usr/bin/env bash
# Runs a fuzz target's replay build over its corpus files (see uroce_cc_fuzz).
set -euo pipefail
exec "$@"
