#!/usr/bin/env bash
# libfabric's fi_pingpong (Debian libfabric-bin), unmodified, between two
# processes joined by net_memif (configs/pair-a.ini, pair-b.ini, each run with
# its own socket and file prefix): FI_EP_MSG on uroce's provider, and
# FI_EP_RDM through libfabric's RxM ("uroce;ofi_rxm"), at 64 B .. 1 MiB with
# -c (every received byte checked), and over IPv6 at 64 KiB. The RDM sizes cross RxM's protocols:
# eager (<= 16 KiB), segmented (SAR, <= 128 KiB) and rendezvous (above it,
# which reads the sender's buffer with fi_read over uroce).
# fi_pingpong's control socket runs on 127.0.0.1; the fabric addresses it
# carries are uroce's (10.77.0.x). Every process runs under `timeout`; on a
# failure both sides' output is printed. FI_TEST_PROVIDER: see fi_common.sh.
#   args: UROCE PAIR_A PAIR_B   (UROCE unused unless the provider is uroce)
UROCE="${1:-}"
PAIR_A="${2:-}"
PAIR_B="${3:-}"
# shellcheck source=tests/fi_common.sh
source "$(dirname "$0")/fi_common.sh"

n=0
for ep in msg rdm; do
  for size in 64 4096 16384 65536 262144 1048576; do
    iters=100
    [[ $size -ge 65536 ]] && iters=20
    n=$((n + 1))
    fi_make_memif_configs "$n"
    fi_pingpong_pair "${ep}_$size" "$ep" "$size" "$iters" "$PAIR_CFG_A" "$PAIR_CFG_B" 127.0.0.1
  done
done
# IPv6 (-6: IPv6 entries of getinfo, uroce's fd00:77::x addresses; the
# control socket on ::1).
FI_PINGPONG_FLAGS=(-6)
for ep in msg rdm; do
  n=$((n + 1))
  fi_make_memif_configs "$n"
  fi_pingpong_pair "${ep}_ipv6_65536" "$ep" 65536 20 "$PAIR_CFG_A" "$PAIR_CFG_B" ::1
done
FI_PINGPONG_FLAGS=()

# SIGTERM in the middle of a run ends both programs. libfabric's psm
# provider (loaded by every fi_getinfo) installs SIGTERM/SIGINT handlers that
# call exit(); uroce's exit handler then ran on top of the interrupted poll
# and waited for the engine's progress token that thread held, for ever.
sigterm_case() {
  FI_RUNS=$((FI_RUNS + 1))
  n=$((n + 1))
  fi_make_memif_configs "$n"
  local port=$((20000 + RANDOM % 20000)) waited=0
  fi_launcher "$PAIR_CFG_A"
  timeout -k 5 60 ${FI_LAUNCH[@]+"${FI_LAUNCH[@]}"} fi_pingpong -p "$FI_MSG_PROVIDER" -e msg -S 64 -I 1000000000 \
    -B "$port" > "$FI_TMP/term.server" 2>&1 &
  local spid=$!
  until fi_listening "" "$port" || [[ $waited -gt 300 ]]; do sleep 0.1; waited=$((waited + 1)); done
  fi_launcher "$PAIR_CFG_B"
  timeout -k 5 60 ${FI_LAUNCH[@]+"${FI_LAUNCH[@]}"} fi_pingpong -p "$FI_MSG_PROVIDER" -e msg -S 64 -I 1000000000 \
    -P "$port" 127.0.0.1 > "$FI_TMP/term.client" 2>&1 &
  local cpid=$!
  sleep 2
  local start=$SECONDS
  pkill -TERM -f "^fi_pingpong .*-B $port" ; pkill -TERM -f "^fi_pingpong .*-P $port"
  wait "$spid"; local src=$?
  wait "$cpid"; local crc=$?
  local took=$((SECONDS - start))
  if [[ $src -eq 124 || $src -eq 137 || $crc -eq 124 || $crc -eq 137 || $took -gt 15 ]]; then
    fi_fail "sigterm: fi_pingpong did not end after SIGTERM (server rc=$src client rc=$crc, ${took}s)"
    echo "--- server:"; cat "$FI_TMP/term.server"; echo "--- client:"; cat "$FI_TMP/term.client"
    return 1
  fi
  echo "ok: sigterm: both ended ${took}s after SIGTERM (server rc=$src client rc=$crc)"
}
sigterm_case

fi_finish
