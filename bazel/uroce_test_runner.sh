#!/usr/bin/env bash
# The test bazel/defs.bzl's uroce_test runs: the program under `uroce exec`,
# in one process (configs/ring.ini) or two (a memif pair), each given its
# rank's extra arguments; passes when every process exits 0.
#
# usage: uroce_test_runner.sh UROCE RING PAIR_A PAIR_B PROCESSES IMPAIR|- \
#            STAGGER_MS RANK0_ARGS|- [RANK1_ARGS|-] -- PROGRAM [ARGS...]
# RANKn_ARGS: words joined by '|'.
set -uo pipefail
uroce=$1 ring=$2 pair_a=$3 pair_b=$4 processes=$5 impair=$6 stagger_ms=$7
shift 7
rank_args=()
for ((r = 0; r < processes; r++)); do rank_args+=("$1"); shift; done
[[ ${1:-} == -- ]] || { echo "uroce_test_runner: expected -- before the program" >&2; exit 2; }
shift
program=("$@")
[[ ${#program[@]} -gt 0 ]] || { echo "uroce_test_runner: no program" >&2; exit 2; }

exec_flags=()
[[ $impair != - ]] && exec_flags+=(--impair "$impair")
if ((processes == 1)); then
  configs=("$ring")
else
  configs=("$pair_a" "$pair_b")
fi
export UROCE_SIZE=$processes UROCE_SERVER_IP=10.77.0.1
((processes == 1)) && UROCE_SERVER_IP=10.99.0.1

pids=()
for ((r = 0; r < processes; r++)); do
  extra=()
  [[ ${rank_args[r]} != - ]] && IFS='|' read -ra extra <<<"${rank_args[r]}"
  ((r > 0)) && sleep "$(awk -v ms="$stagger_ms" 'BEGIN { print ms / 1000 }')"
  echo "uroce_test: rank $r: uroce exec --config $(basename "${configs[r]}") ${exec_flags[*]} -- ${program[*]} ${extra[*]}"
  UROCE_RANK=$r "$uroce" exec --config "${configs[r]}" "${exec_flags[@]}" -- "${program[@]}" "${extra[@]}" \
    > >(sed -u "s/^/[rank $r] /") 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < processes; r++)); do
  wait "${pids[r]}"
  rc=$?
  echo "uroce_test: rank $r exited $rc"
  ((rc != 0)) && status=1
done
exit $status
