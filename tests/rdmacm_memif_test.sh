#!/bin/bash
# rdma_cm programs from Debian's rdmacm-utils and perftest, unmodified, over
# uroce's librdmacm.so.1 and libibverbs.so.1 (`uroce exec`): two processes
# joined by net_memif (configs/pair-*.ini). No TCP side channel: the
# connection is made by rdma_cm on both sides (IB CM MADs on QP1, the RDMA IP
# CM service), to the server's uroce address (10.77.0.1 / fd00:77::1).
#   rping -V       RDMA READ, WRITE and SEND, every byte checked, IPv4 and IPv6
#   ucmatose       several connections at once, SENDs both ways
#   rdma_server / rdma_client   rdma_getaddrinfo, rdma_create_ep (passive QP
#                  attributes given to rdma_get_request), synchronous ids
#   ib_send_bw -R, ib_read_lat -R   perftest with rdma_cm connection set-up
source "$(dirname "$0")/verbs_common.sh"

# run_cm_pair NAME TIMEOUT "SERVER COMMAND" "CLIENT COMMAND" EXPECT
# PORT in the commands becomes this pair's own rdma_cm port.
# The server (memif server side, pair-a) starts first; the client is started
# and, while the server has not listened yet (its connection manager answers
# "invalid service ID": the client reports a reject), started again, up to 20
# times. Both must exit 0 within TIMEOUT seconds, and the client's output
# must show EXPECT.
run_cm_pair() {
  local name="$1" limit="$2" expect="$5"
  port=$((port + 1))
  local scmd="${3//PORT/$port}" ccmd="${4//PORT/$port}"
  make_pair_configs
  local a="$TMP/a-$PAIRS.ini" b="$TMP/b-$PAIRS.ini" attempt crc
  # shellcheck disable=SC2086  # the commands are word lists
  timeout -k 5 "$limit" "$UROCE" exec --config "$a" -- $scmd > "$TMP/$name.server" 2>&1 &
  local spid=$!
  for attempt in $(seq 20); do
    # shellcheck disable=SC2086
    timeout -k 5 "$limit" "$UROCE" exec --config "$b" -- $ccmd > "$TMP/$name.client" 2>&1
    crc=$?
    cm_client_should_retry "$name" "$crc" "$spid" || break
  done
  wait "$spid"
  local src=$?
  pair_verdict "$name" "$src" "$crc" "$expect" "" " (client attempts: $attempt)"
}

port=$((20000 + (RANDOM % 20000)))
run_cm_pair rping_v4_64 90 "rping -s -a 10.77.0.1 -p PORT -C 50 -S 64 -V" \
  "rping -c -a 10.77.0.1 -p PORT -C 50 -S 64 -V -v" "ping data: rdma-ping-49: "
run_cm_pair rping_v6_4000 90 "rping -s -a fd00:77::1 -p PORT -C 50 -S 4000 -V" \
  "rping -c -a fd00:77::1 -p PORT -C 50 -S 4000 -V -v" "ping data: rdma-ping-49: "
# ucmatose: 4 connections, 20 messages of 1000 B each way on each.
run_cm_pair ucmatose 90 "ucmatose -b 10.77.0.1 -p PORT -c 4 -C 20 -S 1000" \
  "ucmatose -s 10.77.0.1 -p PORT -c 4 -C 20 -S 1000" "return status 0"
run_cm_pair rdma_server_client 90 "rdma_server -s 10.77.0.1 -p PORT" "rdma_client -s 10.77.0.1 -p PORT" \
  "rdma_client: end 0"
run_cm_pair send_bw_rdma_cm 90 "ib_send_bw -R -n 500 -s 4096 -p PORT" \
  "ib_send_bw -R -n 500 -s 4096 -p PORT 10.77.0.1" "^ 4096 *500 "
run_cm_pair read_lat_rdma_cm 90 "ib_read_lat -R -n 200 -s 64 -p PORT" \
  "ib_read_lat -R -n 200 -s 64 -p PORT 10.77.0.1" "^ 64 *200 "

# A peer nobody answers ARP for: rdma_resolve_addr fails within rping's
# 2-second timeout with ADDR_ERROR (-ETIMEDOUT), as over the kernel's
# rdma_cm; the client exits non-zero well within the time limit.
unreachable_peer() {
  port=$((port + 1))
  make_pair_configs
  local a="$TMP/a-$PAIRS.ini" b="$TMP/b-$PAIRS.ini" start crc
  timeout -k 5 60 "$UROCE" exec --config "$a" -- rping -s -a 10.77.0.1 -p "$port" -C 1 > "$TMP/unreachable.server" 2>&1 &
  local spid=$!
  start=$SECONDS
  timeout -k 5 30 "$UROCE" exec --config "$b" -- rping -c -a 10.77.0.77 -p "$port" -C 1 > "$TMP/unreachable.client" 2>&1
  crc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  if [[ $crc -eq 0 || $crc -eq 124 || $crc -eq 137 ]] ||
     ! grep -q "RDMA_CM_EVENT_ADDR_ERROR, error -110" "$TMP/unreachable.client"; then
    fail "unreachable_peer: client rc=$crc after $((SECONDS - start)) s"
    cat "$TMP/unreachable.client"
    return 1
  fi
  echo "ok: unreachable_peer: $(grep ADDR_ERROR "$TMP/unreachable.client") after $((SECONDS - start)) s"
}
unreachable_peer

[[ $FAILS -eq 0 ]] && echo PASS || { echo "$FAILS failure(s)"; exit 1; }
