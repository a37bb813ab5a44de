#!/bin/bash
# Our libibverbs.so.1 exports every name of rdma-core's (Debian's
# /usr/lib/x86_64-linux-gnu/libibverbs.so.1) with the same version: the
# default (@@) versions that programs bind to, and the old-ABI ones.
set -euo pipefail
ours="$1"
system=/usr/lib/x86_64-linux-gnu/libibverbs.so.1
[[ -f "$system" ]] || { echo "FAIL: $system missing (libibverbs1 not installed)"; exit 1; }
# "NAME VERSION" for defined dynamic symbols; hidden (non-default) versions
# appear as (VERSION) in objdump -T.
list() { objdump -T "$1" | awk 'NF > 2 && $0 !~ /\*UND\*/ && $(NF-1) ~ /IBVERBS_/ {print $NF, $(NF-1)}' | sort -u; }
list "$system" > /tmp/symbols_test.system.$$
list "$ours" > /tmp/symbols_test.ours.$$
trap 'rm -f /tmp/symbols_test.*.$$' EXIT
missing=$(comm -23 /tmp/symbols_test.system.$$ /tmp/symbols_test.ours.$$)
extra=$(comm -13 /tmp/symbols_test.system.$$ /tmp/symbols_test.ours.$$)
total=$(wc -l < /tmp/symbols_test.system.$$)
[[ "$total" -gt 150 ]] || { echo "FAIL: only $total symbols read from $system"; exit 1; }
if [[ -n "$missing" ]]; then echo "FAIL: missing or with another version:"; echo "$missing"; exit 1; fi
if [[ -n "$extra" ]]; then echo "FAIL: exported beyond rdma-core's names:"; echo "$extra"; exit 1; fi
# Nothing of uroce's own leaks out (C++ names, DPDK's are not ours to export)
# except the private entries of version UROCE_PRIVATE_1: the libfabric
# provider that liburoce-fi.so hands to libfabric (api/fabric/loader.cc) and
# the table uroce's librdmacm.so.1 forwards through (api/rdmacm).
leaks=$(objdump -T "$ours" | awk 'NF > 2 && $0 !~ /\*UND\*/ && ($3 == "DF" || $3 == "DO") && $(NF-1) !~ /IBVERBS_/' |
        grep -v -E 'UROCE_PRIVATE_1 +(uroce_fi_provider_v1|uroce_rdmacm_v1|UROCE_PRIVATE_1)$' || true)
if [[ -n "$leaks" ]]; then echo "FAIL: unversioned exports:"; echo "$leaks"; exit 1; fi
echo "PASS: $total names with rdma-core 44's versions"
