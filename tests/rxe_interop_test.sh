#!/usr/bin/env bash
# uroce against the Linux kernel's Soft-RoCE (rdma_rxe) in a qemu guest
# (tools/rxe_vm), rdma-core's own example programs, unmodified, in both
# directions (uroce server with rxe client, rxe server with uroce client): RC
# ping-pong with -c (every byte checked) at 64 B, 4 KiB and 64 KiB
# (multi-packet at path MTU 1024) and UD ping-pong, over IPv4 and IPv6 GIDs;
# and rping, whose connection is made by rdma_cm on both sides (uroce's
# librdmacm.so.1 and IB connection manager against the kernel's rdma_cm):
# RDMA READ, WRITE and SEND at 64 B and 4000 B (IPv4) and 64 B (IPv6),
# every byte checked; RC ping-pong at 64 KiB with uroce's port losing 2 %
# of the data frames each way; and RC ping-pong and rping with DCQCN on
# uroce's side, its packets ECN-capable and marked CE by a bottleneck.
# See rxe_interop_lib.sh for the set-up and the capture kept on failure.
set -uo pipefail
harness=$1 uroce=$2
source "$(dirname "$0")/rxe_vm_lib.sh"
source "$(dirname "$0")/rxe_interop_lib.sh"

interop_start interop 1500
for v in 4 6; do
  both_ways rc64 "iters in" ibv_rc_pingpong "-c -s 64 -n 20" $v
  both_ways rc4k "iters in" ibv_rc_pingpong "-c -s 4096 -n 20" $v
  both_ways rc64k "iters in" ibv_rc_pingpong "-c -s 65536 -n 10" $v
done
both_ways ud "iters in" ibv_ud_pingpong "-c -s 512 -n 20" 4
both_ways ud "iters in" ibv_ud_pingpong "-c -s 512 -n 20" 6
rping_both_ways rping64 "-C 10 -S 64 -V -v" 4
rping_both_ways rping4k "-C 10 -S 4000 -V -v" 4
rping_both_ways rping64 "-C 10 -S 64 -V -v" 6
# Over loss: uroce's port drops 2 % of the requests and READ responses it
# sends and receives ([impair]). rxe offers no selective retransmission, so
# uroce recovers by go-back-N with it, and each side repairs what the other
# lost. Acknowledgements are spared (spare_acks): ibv_rc_pingpong's sides
# exit on their last completion, so a lost final ACK has no one left to
# repair it, on any fabric: the client's ACK of the server's last message,
# or the server's of the client's last one when the server is done first.
plain_cfg=$cfg
cfg=$tmp/uroce-lossy.ini
{ cat "$plain_cfg"; printf '\n[impair]\nloss = 0.02\nspare_acks = yes\nseed = 7\n'; } >"$cfg"
both_ways rc64k_loss "iters in" ibv_rc_pingpong "-c -s 65536 -n 20" 4
# DCQCN on uroce's side (docs/congestion.md): its packets leave ECN-capable
# and a bottleneck on its port marks them CE above one queued frame. rxe
# neither reads ECN nor sends CNPs, so uroce's rate never drops; both sides
# must take the ECN-capable, CE-marked packets as any other.
cfg=$tmp/uroce-dcqcn.ini
{ cat "$plain_cfg"; printf '
[congestion]
algorithm = dcqcn
[impair]
rate_mbps = 2000
ecn_frames = 1
direction = tx
'; } >"$cfg"
both_ways rc64k_dcqcn "iters in" ibv_rc_pingpong "-c -s 65536 -n 20" 4
rping_both_ways rping4k_dcqcn "-C 10 -S 4000 -V -v" 4
cfg=$plain_cfg
interop_pass "uroce and kernel rxe interoperate: RC and UD ping-pong and rping, both directions, IPv4 and IPv6, RC over 2 % loss, and RC and rping with DCQCN on uroce's side"
