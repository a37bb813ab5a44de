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
fi_finish
