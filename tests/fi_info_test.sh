#!/usr/bin/env bash
# Debian's fi_info, unmodified, over uroce's provider: liburoce-fi.so is
# found (FI_PROVIDER_PATH from `uroce exec`) and offers, for each configured
# endpoint, FI_EP_MSG with message, RMA and atomic capabilities, a source
# address that is the endpoint's own IP, and the memory registration modes;
# "uroce;ofi_rxm" layers FI_EP_RDM with tagged messages on top; and hints
# are honoured (a destination node, an address format, a capability the
# provider lacks). FI_TEST_PROVIDER: see fi_common.sh (with tcp the uroce-only
# expectations are skipped and the loopback address stands in for the
# endpoints').
#   args: UROCE
UROCE="${1:-}"
# shellcheck source=tests/fi_common.sh
source "$(dirname "$0")/fi_common.sh"

cat > "$FI_TMP/ring.ini" <<INI
[eal]
log_level = *:error
telemetry = no
[endpoint.a]
port = ring:fiinfo:a
ipv4 = 10.99.0.1
ipv6 = fd00:99::1
[endpoint.b]
port = ring:fiinfo:b
ipv4 = 10.99.0.2
mtu = 9000
INI
fi_launcher "$FI_TMP/ring.ini"
if fi_uses_uroce; then
  local_ips=(10.99.0.1 10.99.0.2)
  peer=10.99.0.2
else
  local_ips=(127.0.0.1)
  peer=127.0.0.1
fi

# fi_info_run NAME ARGS...: fi_info over the provider, output in $FI_TMP/NAME.
fi_info_run() {
  local name=$1
  shift
  FI_RUNS=$((FI_RUNS + 1))
  timeout -k 5 60 ${FI_LAUNCH[@]+"${FI_LAUNCH[@]}"} fi_info "$@" > "$FI_TMP/$name" 2>&1
  local rc=$?
  echo "--- fi_info $* (exit $rc)"
  head -c 20000 "$FI_TMP/$name"; echo
  return $rc
}

# The provider is listed.
fi_info_run list -l || fi_fail "fi_info -l"
grep -qx "$FI_TEST_PROVIDER:" "$FI_TMP/list" || fi_fail "fi_info -l does not list $FI_TEST_PROVIDER"

# FI_EP_MSG entries, verbose. Every entry is checked (blocks start with ---).
if fi_info_run msg -p "$FI_MSG_PROVIDER" -t FI_EP_MSG -v; then
  entries=$(grep -c '^---' "$FI_TMP/msg")
  [[ $entries -ge 1 ]] || fi_fail "no FI_EP_MSG entry"
  # Top-level fields of each entry (4-space indent), one line per entry.
  awk '
    /^---/ { if (n) print line; n++; line = "" }
    /^    caps: /         { line = line " CAPS" $0 }
    /^    addr_format: /  { line = line " AF=" $2 }
    /^    src_addr: /     { line = line " SRC=" $2 }
    /^        type: /     { line = line " TYPE=" $2 }
    /^        mr_mode: /  { line = line " MR" $0 }
    /^        cq_data_size: / { line = line " CQDATA=" $2 }
    /^        max_msg_size: / { line = line " MAXMSG=" $2 }
    /^        prov_name: / { line = line " PROV=" $2 }
    END { if (n) print line }' "$FI_TMP/msg" > "$FI_TMP/msg.entries"
  want_caps=(FI_MSG FI_RMA FI_READ FI_WRITE FI_SEND FI_RECV FI_REMOTE_READ FI_REMOTE_WRITE)
  # tcp's loopback entries lack FI_REMOTE_COMM (seen here); uroce's endpoints
  # reach both, and ofi_rxm takes these two from the core.
  fi_uses_uroce && want_caps+=(FI_ATOMIC FI_LOCAL_COMM FI_REMOTE_COMM)
  i=0
  while read -r entry; do
    i=$((i + 1))
    [[ $entry == *"TYPE=FI_EP_MSG"* ]] || fi_fail "entry $i: not FI_EP_MSG: $entry"
    [[ $entry == *"PROV=$FI_MSG_PROVIDER "* || $entry == *"PROV=$FI_MSG_PROVIDER" ]] ||
      fi_fail "entry $i: provider is not $FI_MSG_PROVIDER: $entry"
    for cap in "${want_caps[@]}"; do
      caps=${entry#*CAPS}; caps=${caps%%]*}
      [[ " $caps " == *" $cap,"* || " $caps " == *" $cap "* ]] || fi_fail "entry $i: caps lack $cap: $caps"
    done
    [[ $entry =~ AF=FI_SOCKADDR_IN6?\  ]] || fi_fail "entry $i: address format is not FI_SOCKADDR_IN/IN6: $entry"
    [[ $entry =~ SRC=fi_sockaddr_in6?:// ]] || fi_fail "entry $i: no source address (ofi_rxm needs one): $entry"
    if fi_uses_uroce; then
      for m in FI_MR_LOCAL FI_MR_VIRT_ADDR FI_MR_ALLOCATED FI_MR_PROV_KEY; do
        [[ $entry == *"$m"* ]] || fi_fail "entry $i: mr_mode lacks $m: $entry"
      done
      [[ $entry == *"CQDATA=4"* ]] || fi_fail "entry $i: cq_data_size is not 4 (RoCE immediate data): $entry"
    fi
    max=${entry#*MAXMSG=}; max=${max%% *}
    # Up to 2^64-1 (tcp): compare lengths before bash arithmetic overflows.
    if ! [[ $max =~ ^[0-9]+$ ]] || { (( ${#max} <= 7 )) && (( max < 1048576 )); }; then
      fi_fail "entry $i: max_msg_size $max < 1 MiB"
    fi
  done < "$FI_TMP/msg.entries"
  for ip in "${local_ips[@]}"; do
    grep -q "SRC=fi_sockaddr_in://$ip:" "$FI_TMP/msg.entries" ||
      fi_fail "no FI_EP_MSG entry with source address $ip"
  done
else
  fi_fail "fi_info -p $FI_MSG_PROVIDER -t FI_EP_MSG: no entries"
fi

# A destination node: the entries carry it as dest_addr.
if fi_info_run dest -p "$FI_MSG_PROVIDER" -t FI_EP_MSG -n "$peer" -P 7471 -v; then
  grep -q "dest_addr: fi_sockaddr_in://$peer:7471" "$FI_TMP/dest" ||
    fi_fail "-n $peer -P 7471: no entry with that destination"
else
  fi_fail "fi_info -n $peer: no entries"
fi

# An address format asked for is the one given (uroce only: libfabric's tcp
# returns IPv6 entries for -a FI_SOCKADDR_IN too, seen here).
if ! fi_uses_uroce; then
  :
elif fi_info_run af -p "$FI_MSG_PROVIDER" -t FI_EP_MSG -a FI_SOCKADDR_IN -v; then
  grep 'addr_format:' "$FI_TMP/af" | grep -qv 'FI_SOCKADDR_IN$' && fi_fail "-a FI_SOCKADDR_IN returned another format"
else
  fi_fail "fi_info -a FI_SOCKADDR_IN: no entries"
fi

# A capability no FI_EP_MSG provider of this kind has: nothing, and a clean
# "no data" exit rather than a crash.
fi_info_run tagged -p "$FI_MSG_PROVIDER" -t FI_EP_MSG -c FI_TAGGED
rc=$?
if [[ $rc -eq 0 ]] || grep -q '^provider:' "$FI_TMP/tagged"; then
  fi_fail "-c FI_TAGGED on FI_EP_MSG returned entries"
fi
[[ $rc -ne 124 && $rc -lt 128 ]] || fi_fail "-c FI_TAGGED: fi_info died or hung (exit $rc)"

# RxM on top: FI_EP_RDM with tagged messages, what Open MPI's OFI MTL asks.
if fi_info_run rdm -p "$FI_RDM_PROVIDER" -t FI_EP_RDM -c "FI_TAGGED|FI_MSG" -v; then
  grep -q 'type: FI_EP_RDM' "$FI_TMP/rdm" || fi_fail "$FI_RDM_PROVIDER: no FI_EP_RDM entry"
  grep -q "prov_name: $FI_RDM_PROVIDER\$" "$FI_TMP/rdm" || fi_fail "$FI_RDM_PROVIDER: entries name another provider"
  grep -q 'caps: \[.*FI_TAGGED' "$FI_TMP/rdm" || fi_fail "$FI_RDM_PROVIDER: no FI_TAGGED"
else
  fi_fail "fi_info -p '$FI_RDM_PROVIDER' -t FI_EP_RDM: no entries"
fi
fi_finish
