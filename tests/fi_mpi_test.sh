#!/usr/bin/env bash
# An MPI ping-pong (tests/mpi_pingpong.c: MPI_Send/MPI_Recv, 64 B .. 1 MiB,
# every byte checked on both ranks) under Debian's Open MPI 4.1 mpirun, with
# the messages on Open MPI's OFI MTL (`--mca pml cm --mca mtl ofi`) and the
# MTL restricted to uroce (`--mca mtl_ofi_provider_include uroce`, a prefix
# match: it selects "uroce;ofi_rxm", libfabric's RxM over uroce's
# FI_EP_MSG). Two ranks, each its own uroce process on its own endpoint
# (tests/fi_mpi_rank.sh picks configs/pair-a.ini or pair-b.ini by rank;
# net_memif between them).
# Checks: mpirun exits 0 within the time limit, both ranks report the
# provider "uroce;ofi_rxm" (mtl_ofi_verbose), and rank 0 prints the
# program's PASS line. FI_TEST_PROVIDER: see fi_common.sh.
#   args: UROCE PAIR_A PAIR_B MPI_PINGPONG RANK_WRAPPER
UROCE="${1:-}"
PAIR_A="${2:-}"
PAIR_B="${3:-}"
program=$4
wrapper=$5
# shellcheck source=tests/fi_common.sh
source "$(dirname "$0")/fi_common.sh"

fi_make_memif_configs mpi
FI_RUNS=$((FI_RUNS + 1))
log="$FI_TMP/mpirun.log"
# --allow-run-as-root: CI runs as root. --oversubscribe: two ranks may not
# fit the slots Open MPI counts on a 2-core machine. --bind-to none: each
# uroce process pins its own lcore (EAL), mpirun must not bind first.
# btl self,vader and no osc/ucx: keep Open MPI away from verbs devices
# (`uroce exec` puts uroce's libibverbs.so.1 in front); pml cm uses no btl for
# point-to-point.
timeout -k 10 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$FI_TEST_PROVIDER" \
  --mca mtl_ofi_verbose 1 --mca btl self,vader --mca osc ^ucx \
  "$wrapper" "$FI_TEST_PROVIDER" "$UROCE" "$PAIR_CFG_A" "$PAIR_CFG_B" -- "$program" \
  > "$log" 2>&1
rc=$?
cat "$log"
case $rc in
  0) ;;
  124 | 137) fi_fail "mpirun timed out after 300 s" ;;
  *) fi_fail "mpirun exit $rc" ;;
esac
provs=$(grep -c "mtl:ofi:prov: $FI_RDM_PROVIDER\$" "$log")
[[ $provs -eq 2 ]] || fi_fail "expected both ranks on '$FI_RDM_PROVIDER', found $provs 'mtl:ofi:prov' lines for it"
grep -q '^mpi_pingpong: PASS' "$log" || fi_fail "no PASS line from mpi_pingpong"
for size in 64 256 1024 4096 16384 65536 262144 1048576; do
  grep -q "^size $size: [0-9]* round trips verified" "$log" || fi_fail "no verified result for $size B"
done
fi_finish
