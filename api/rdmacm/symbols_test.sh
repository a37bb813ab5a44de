#!/bin/bash
# Our librdmacm.so.1 exports every name of rdma-core's (Debian's
# /usr/lib/x86_64-linux-gnu/librdmacm.so.1) with the same version, and
# nothing else; it needs libibverbs.so.1 (uroce's, at run time).
set -euo pipefail
ours="$1"
system=/usr/lib/x86_64-linux-gnu/librdmacm.so.1
[[ -f "$system" ]] || { echo "FAIL: $system missing (librdmacm1 not installed)"; exit 1; }
list() { objdump -T "$1" | awk 'NF > 2 && $0 !~ /\*UND\*/ && ($3 == "DF" || $3 == "DO") {print $NF, $(NF-1)}' | sort -u; }
list "$system" > /tmp/rdmacm_symbols.system.$$
list "$ours" > /tmp/rdmacm_symbols.ours.$$
trap 'rm -f /tmp/rdmacm_symbols.*.$$' EXIT
missing=$(comm -23 /tmp/rdmacm_symbols.system.$$ /tmp/rdmacm_symbols.ours.$$)
extra=$(comm -13 /tmp/rdmacm_symbols.system.$$ /tmp/rdmacm_symbols.ours.$$)
total=$(wc -l < /tmp/rdmacm_symbols.system.$$)
[[ "$total" -gt 60 ]] || { echo "FAIL: only $total symbols read from $system"; exit 1; }
if [[ -n "$missing" ]]; then echo "FAIL: missing or with another version:"; echo "$missing"; exit 1; fi
if [[ -n "$extra" ]]; then echo "FAIL: exported beyond rdma-core's names:"; echo "$extra"; exit 1; fi
objdump -p "$ours" | grep -q 'NEEDED *libibverbs.so.1' || { echo "FAIL: no DT_NEEDED libibverbs.so.1"; exit 1; }
objdump -p "$ours" | grep -q 'SONAME *librdmacm.so.1' || { echo "FAIL: soname is not librdmacm.so.1"; exit 1; }
echo "PASS: $total names with rdma-core 44's versions"
