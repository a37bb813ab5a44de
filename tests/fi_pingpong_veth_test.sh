#!/usr/bin/env bash
# fi_pingpong (Debian libfabric-bin), unmodified, between two network
# namespaces joined by a veth pair: each process's uroce endpoint sits on its
# veth end through net_af_packet (configs/veth-a.ini, veth-b.ini with this
# test's interface names and file prefixes) and finds its peer with ARP.
# FI_EP_MSG on uroce and FI_EP_RDM through "uroce;ofi_rxm", 64 B .. 1 MiB,
# -c (every received byte checked). fi_pingpong's control socket uses the
# kernel's own addresses on the same veth (10.79.0.x); uroce uses 10.78.0.x.
# Needs root (namespaces); the namespaces go on every exit path, every
# process runs under `timeout`. FI_TEST_PROVIDER: see fi_common.sh.
#   args: UROCE VETH_TOOL VETH_A_INI VETH_B_INI
UROCE="${1:-}"
veth=$2
cfg_a=$3
cfg_b=$4
# shellcheck source=tests/fi_common.sh
source "$(dirname "$0")/fi_common.sh"
source "$(dirname "$0")/pair_lib.sh"
id=$$
ns_a=uroce-f$id-a
ns_b=uroce-f$id-b
if_a=uf$id-a
if_b=uf$id-b
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() { "$veth" down "$ns_a" "$ns_b" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 1' INT TERM

veth_namespaces_up fi_pingpong_veth_test "$veth" "$ns_a" "$ns_b" "$if_a" "$if_b"

sed -e "s|iface=[^ ,]*|iface=$if_a|" -e "s|^file_prefix = .*|file_prefix = uroce-fv$id-a|" "$cfg_a" > "$FI_TMP/a.ini"
sed -e "s|iface=[^ ,]*|iface=$if_b|" -e "s|^file_prefix = .*|file_prefix = uroce-fv$id-b|" "$cfg_b" > "$FI_TMP/b.ini"

for ep in msg rdm; do
  for size in 64 4096 65536 1048576; do
    iters=100
    [[ $size -ge 65536 ]] && iters=20
    fi_pingpong_pair "veth_${ep}_$size" "$ep" "$size" "$iters" "$FI_TMP/a.ini" "$FI_TMP/b.ini" \
      10.79.0.1 "$ns_a" "$ns_b"
  done
done
fi_finish
