#!/usr/bin/env bash
# An install: the relocatable tarball unpacked into a temporary
# prefix outside the source tree is all a user needs. From there: uroce help
# for every command and the man page; a C program built against uroce_cq.h
# with pkg-config; ibv_rc_pingpong and fi_pingpong between two processes
# through PREFIX/bin/uroce exec with PREFIX/share/uroce/configs. The Debian
# package holds the same tree under /usr (unpacked with dpkg-deb -x, not
# installed: it runs from there too).
# Arguments: the tarball, the .deb.
set -uo pipefail
TARBALL=$(readlink -f "$1") DEB=$(readlink -f "$2")
TMP=$(mktemp -d /tmp/uroce-install.XXXXXX)  # outside Bazel's trees
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
# Nothing of the build or its runfiles: only the install.
unset RUNFILES_DIR RUNFILES_MANIFEST_FILE TEST_SRCDIR UROCE_VERBS_LIB_DIR UROCE_RDMACM_LIB_DIR UROCE_FABRIC_LIB_DIR
export UROCE_PAIR="install-$$-$RANDOM"
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

P=$TMP/prefix
mkdir -p "$P" && tar -xzf "$TARBALL" -C "$P" || { echo "FAIL: cannot unpack"; exit 1; }
for f in bin/uroce lib/uroce/libibverbs.so.1 lib/uroce/librdmacm.so.1 lib/uroce/liburoce-fi.so \
         lib/liburoce_cq.so include/uroce/uroce_cq.h lib/pkgconfig/uroce-cq.pc \
         share/uroce/configs/pair-a.ini share/uroce/configs/pair-b.ini share/man/man1/uroce.1.gz \
         share/doc/uroce/README.md share/doc/uroce/docs/architecture.md; do
  [[ -e $P/$f ]] || fail "missing $f"
done

# uroce help COMMAND for every command, each with examples; the man page has them all.
commands=$("$P/bin/uroce" help | awk '/^commands:/ {on = 1; next} on && NF {print $1}' | grep -v '^help$')
[[ $(wc -w <<<"$commands") -ge 8 ]] || fail "uroce help lists: $commands"
man=$(zcat "$P/share/man/man1/uroce.1.gz")
for c in $commands; do
  out=$("$P/bin/uroce" help "$c") || fail "uroce help $c: exit $?"
  grep -q "^usage: uroce $c" <<<"$out" && grep -q "^examples:" <<<"$out" || fail "uroce help $c: $out"
  grep -q "^\.SS $c$" <<<"$man" || fail "man page: no section for $c"
done
echo "ok: uroce help and the man page cover: $(echo $commands)"

# The C interface through pkg-config.
cat > cq.c <<'C'
#include <stdio.h>
#include <rdma/fi_eq.h>
#include <uroce_cq.h>
int main(void) {
  struct fi_cq_attr attr = {.size = 16, .format = FI_CQ_FORMAT_CONTEXT};
  struct fid_cq *cq;
  if (uroce_cq_open(&attr, &cq, NULL) != 0) return 1;
  struct fi_cq_entry entry;
  const ssize_t n = fi_cq_read(cq, &entry, 1);
  printf("fi_cq_read on an empty CQ: %zd\n", n);
  return fi_close(&cq->fid) == 0 && n == -FI_EAGAIN ? 0 : 1;
}
C
flags=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs uroce-cq) || fail "pkg-config uroce-cq"
if cc -o cq cq.c $flags 2>cc.log && out=$(LD_LIBRARY_PATH=$P/lib ./cq); then
  echo "ok: pkg-config uroce-cq ($flags): $out"
else
  fail "a program against uroce_cq.h"; cat cc.log
fi

# run_pair NAME UROCE CONFIGS "SERVER COMMAND" "CLIENT COMMAND" EXPECT
run_pair() {
  local name=$1 uroce=$2 configs=$3 server=$4 client=$5 expect=$6
  timeout -k 5 60 "$uroce" exec --config "$configs/pair-a.ini" -- $server > "$name.server" 2>&1 &
  local spid=$!
  sleep 1
  timeout -k 5 60 "$uroce" exec --config "$configs/pair-b.ini" -- $client > "$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if ((crc != 0 || src != 0)) || ! grep -qE "$expect" "$name.client"; then
    fail "$name: server rc=$src client rc=$crc"; echo "--- server:"; cat "$name.server"; echo "--- client:"; cat "$name.client"
  else
    echo "ok: $name: $(grep -E "$expect" "$name.client" | tail -1)"
  fi
}
port=$((20000 + RANDOM % 20000))
run_pair rc_pingpong "$P/bin/uroce" "$P/share/uroce/configs" "ibv_rc_pingpong -g 0 -n 200 -p $port" \
  "ibv_rc_pingpong -g 0 -n 200 -p $port 127.0.0.1" "iters in"
run_pair fi_pingpong "$P/bin/uroce" "$P/share/uroce/configs" "fi_pingpong -p uroce -e msg -I 100 -S 4096 -B $((port + 1))" \
  "fi_pingpong -p uroce -e msg -I 100 -S 4096 -P $((port + 1)) 127.0.0.1" "^4k  *100  *=100 "

# The Debian package: the same tree under /usr.
contents=$(dpkg-deb --contents "$DEB") || fail "dpkg-deb --contents"
for f in ./usr/bin/uroce ./usr/lib/uroce/libibverbs.so.1 ./usr/share/uroce/configs/pair-a.ini ./usr/share/man/man1/uroce.1.gz; do
  grep -q " $f\$" <<<"$contents" || fail "the package lacks $f"
done
dpkg-deb --field "$DEB" Depends | grep -q "librte-eal23" || fail "the package's Depends lack DPDK"
dpkg-deb -x "$DEB" deb && out=$(UROCE_PAIR= timeout 30 deb/usr/bin/uroce exec --config deb/usr/share/uroce/configs/ring.ini -- ibv_devinfo -l 2>&1)
grep -q "uroce0" <<<"$out" && echo "ok: the package's uroce exec -- ibv_devinfo -l: $(tr '\n' ' ' <<<"$out")" ||
  fail "the package's uroce: $out"

((FAILS == 0)) && echo "PASS" || echo "$FAILS failures"
exit $((FAILS != 0))
