# shellcheck shell=bash
# Shared by the libfabric tests (tests/fi_*_test.sh): Debian's unmodified
# libfabric programs (fi_info, fi_pingpong from libfabric-bin) and Open MPI
# over uroce's provider liburoce-fi.so, which `uroce exec` puts on
# FI_PROVIDER_PATH.
#
# FI_TEST_PROVIDER names the provider under test (default: uroce). With any
# other value (e.g. `tcp`, libfabric's own) the same checks run against that
# provider without `uroce exec`, which is how the harness itself was proven
# before the uroce provider existed:
#   FI_TEST_PROVIDER=tcp tests/fi_pingpong_memif_test.sh
# The FI_EP_RDM runs use "<provider>;ofi_rxm" (libfabric's RxM over the
# provider's FI_EP_MSG).
set -uo pipefail

FI_TEST_PROVIDER="${FI_TEST_PROVIDER:-uroce}"
FI_MSG_PROVIDER="$FI_TEST_PROVIDER"
FI_RDM_PROVIDER="$FI_TEST_PROVIDER;ofi_rxm"
FI_TMP="$(mktemp -d /tmp/uroce-fi.XXXXXX)"  # short: memif socket paths
FI_FAILS=0
# More `uroce exec` flags for every program fi_launcher starts (e.g. --impair SPEC).
FI_EXEC_FLAGS=()
FI_RUNS=0

fi_fail() { echo "FAIL: $*"; FI_FAILS=$((FI_FAILS + 1)); }

fi_uses_uroce() { [[ $FI_TEST_PROVIDER == uroce ]]; }

# fi_launcher CONFIG: sets FI_LAUNCH to the words that run a program over
# uroce (`uroce exec` with CONFIG) when uroce is under test, else to nothing.
fi_launcher() {
  FI_LAUNCH=()
  if fi_uses_uroce; then FI_LAUNCH=("$UROCE" exec --config "$1" ${FI_EXEC_FLAGS[@]+"${FI_EXEC_FLAGS[@]}"} --); fi
}

# Configs for one pair of uroce processes joined by net_memif
# (configs/pair-*.ini): this run's own memif socket, given explicitly. Each
# process has its own DPDK file prefix, and a device opens at once: the
# program opens its endpoint before its peer exists (fi_pingpong's server
# waits on its control socket), frames wait in the engine until the memif
# link is up. Sets PAIR_CFG_A and PAIR_CFG_B.
fi_make_memif_configs() {
  local n=$1
  PAIR_CFG_A="$FI_TMP/a-$n.ini"
  PAIR_CFG_B="$FI_TMP/b-$n.ini"
  fi_uses_uroce || return 0
  sed -e "s|^port = \(net_memif.*\)$|port = \1,socket=$FI_TMP/memif-$n.sock,socket-abstract=no|" "$PAIR_A" > "$PAIR_CFG_A"
  sed -e "s|^port = \(net_memif.*\)$|port = \1,socket=$FI_TMP/memif-$n.sock,socket-abstract=no|" "$PAIR_B" > "$PAIR_CFG_B"
}

# fi_pingpong's size column: 64, 1k, 64k, 1m.
fi_size_str() {
  local s=$1
  if (( s >= 1048576 && s % 1048576 == 0 )); then echo "$((s / 1048576))m"
  elif (( s >= 1024 && s % 1024 == 0 )); then echo "$((s / 1024))k"
  else echo "$s"; fi
}

# True once something listens on TCP port $2 in network namespace $1 ("" for
# this one), without connecting to it.
fi_listening() {
  if [[ -n $1 ]]; then
    ip netns exec "$1" ss -ltnH "sport = :$2" 2>/dev/null | grep -q .
  else
    ss -ltnH "sport = :$2" 2>/dev/null | grep -q .
  fi
}

# fi_pingpong_pair NAME EP SIZE ITERS CFG_A CFG_B CTRL_ADDR [NS_A NS_B]
# (FI_PINGPONG_FLAGS, an array, adds options to both sides, e.g. -6.)
# Runs fi_pingpong -e EP (msg or rdm) with data checks (-c) at one size:
# the server under CFG_A (in NS_A), the client under CFG_B (in NS_B) once
# the server's control port listens; CTRL_ADDR is where the client reaches
# that control port (a kernel address: fi_pingpong's out-of-band socket; the
# fabric addresses travel over it). Both must exit 0 within the time limit
# and print the result row for SIZE with every message acknowledged.
fi_pingpong_pair() {
  local name=$1 ep=$2 size=$3 iters=$4 cfg_a=$5 cfg_b=$6 ctrl=$7 ns_a=${8:-} ns_b=${9:-}
  local limit=120 prov port
  if [[ $ep == rdm ]]; then prov=$FI_RDM_PROVIDER; else prov=$FI_MSG_PROVIDER; fi
  port=$((20000 + RANDOM % 20000))
  local -a in_a=() in_b=()
  [[ -n $ns_a ]] && in_a=(ip netns exec "$ns_a")
  [[ -n $ns_b ]] && in_b=(ip netns exec "$ns_b")
  FI_RUNS=$((FI_RUNS + 1))
  local log_s="$FI_TMP/$name.server" log_c="$FI_TMP/$name.client"
  fi_launcher "$cfg_a"
  timeout -k 5 "$limit" ${in_a[@]+"${in_a[@]}"} ${FI_LAUNCH[@]+"${FI_LAUNCH[@]}"} \
    fi_pingpong -p "$prov" -e "$ep" -c -S "$size" -I "$iters" -B "$port" ${FI_PINGPONG_FLAGS[@]+"${FI_PINGPONG_FLAGS[@]}"} \
    > "$log_s" 2>&1 &
  local spid=$!
  local waited=0
  until fi_listening "$ns_a" "$port"; do
    sleep 0.1
    waited=$((waited + 1))
    if ! kill -0 "$spid" 2>/dev/null || [[ $waited -gt $((limit * 10)) ]]; then break; fi
  done
  fi_launcher "$cfg_b"
  timeout -k 5 "$limit" ${in_b[@]+"${in_b[@]}"} ${FI_LAUNCH[@]+"${FI_LAUNCH[@]}"} \
    fi_pingpong -p "$prov" -e "$ep" -c -S "$size" -I "$iters" -P "$port" ${FI_PINGPONG_FLAGS[@]+"${FI_PINGPONG_FLAGS[@]}"} \
    "$ctrl" > "$log_c" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  local row
  row="^$(fi_size_str "$size") +$iters +=$iters "
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -qE "$row" "$log_c" || ! grep -qE "$row" "$log_s"; then
    local why=""
    [[ $src -eq 124 || $src -eq 137 || $crc -eq 124 || $crc -eq 137 ]] && why=" (timed out after ${limit}s)"
    fi_fail "$name ($prov -e $ep, $size B): server rc=$src client rc=$crc$why"
    echo "--- server ($log_s):"; cat "$log_s"; echo "--- client ($log_c):"; cat "$log_c"
    return 1
  fi
  echo "ok: $name ($prov -e $ep): $(grep -E "$row" "$log_c")"
}

fi_finish() {
  rm -rf "$FI_TMP"
  if [[ $FI_FAILS -eq 0 && $FI_RUNS -gt 0 ]]; then
    echo "PASS ($FI_RUNS runs, provider $FI_TEST_PROVIDER)"
    exit 0
  fi
  [[ $FI_RUNS -eq 0 ]] && echo "FAIL: nothing ran"
  echo "$FI_FAILS failure(s) of $FI_RUNS runs (provider $FI_TEST_PROVIDER)"
  exit 1
}
