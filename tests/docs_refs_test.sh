#!/usr/bin/env bash
# Runs tests/docs_refs_check.py on the checkout this test was built from.
# Arguments: README.md (its real path is the checkout), the checker.
set -euo pipefail
checkout=$(dirname "$(readlink -f "$1")")
exec python3 "$(readlink -f "$2")" "$checkout"
