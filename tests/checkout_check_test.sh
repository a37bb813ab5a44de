#!/usr/bin/env bash
# Runs a checker of the source tree (tests/docs_refs_check.py,
# tests/layout_check.py) on the checkout this test was built from.
# Arguments: README.md (its real path is the checkout), the checker.
set -euo pipefail
checkout=$(dirname "$(readlink -f "$1")")
exec python3 "$(readlink -f "$2")" "$checkout"
