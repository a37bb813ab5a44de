#!/bin/bash
# rdma-core's example programs from Debian's ibverbs-utils, unmodified,
# between two processes over net_memif (configs/pair-a.ini, pair-b.ini):
# RC at sizes from 1 byte to 1 MiB with -c (every received byte checked),
# multi-packet messages (the path MTU is 1024), completion events (-e), the
# extended post API (-N), UD and SRQ.
source "$(dirname "$0")/verbs_common.sh"

for size in 1 1024 4096 65536 1048576; do
  iters=200
  [[ $size -ge 65536 ]] && iters=20
  run_pair "rc_$size" 90 ibv_rc_pingpong "-g 0 -c -s $size -n $iters" "-g 0 -c -s $size -n $iters"
done
run_pair rc_events 90 ibv_rc_pingpong "-g 0 -c -e -s 4096 -n 200" "-g 0 -c -e -s 4096 -n 200"
run_pair rc_new_send 90 ibv_rc_pingpong "-g 0 -c -N -s 8192 -n 100" "-g 0 -c -N -s 8192 -n 100"
run_pair rc_mtu_4096 90 ibv_rc_pingpong "-g 0 -c -m 1024 -s 100000 -n 20" "-g 0 -c -m 1024 -s 100000 -n 20"
run_pair ud 90 ibv_ud_pingpong "-g 0 -c -s 512 -n 200" "-g 0 -c -s 512 -n 200"
run_pair ud_events 90 ibv_ud_pingpong "-g 0 -c -e -s 1000 -n 100" "-g 0 -c -e -s 1000 -n 100"
run_pair srq 90 ibv_srq_pingpong "-g 0 -c -s 4096 -n 100" "-g 0 -c -s 4096 -n 100"
run_pair srq_events 90 ibv_srq_pingpong "-g 0 -c -e -q 4 -s 2048 -n 100" "-g 0 -c -e -q 4 -s 2048 -n 100"

[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
