#!/usr/bin/env bash
# Lays out uroce's install tree and packs it (tools/BUILD's uroce_tarball and
# uroce_deb genrules; tools/install unpacks the tarball into a PREFIX):
#
#   bin/uroce
#   lib/uroce/libibverbs.so.1, librdmacm.so.1, liburoce-fi.so
#                         (private: `uroce exec` puts them first for a program)
#   lib/liburoce_cq.so, include/uroce/uroce_cq.h, lib/pkgconfig/uroce-cq.pc
#   share/uroce/configs/*.ini, share/man/man1/uroce.1, share/doc/uroce/README.md
#   and the documents it links to, share/doc/uroce/docs/*.md
#
# usage: make_tree.sh tar|deb OUT VERSION FILES...   (FILES: KIND=PATH)
# KIND: bin, privlib, lib, include, config, man, doc, docs. Deterministic output
# (sorted, mtime 0, root-owned).
set -euo pipefail
mode=$1 out=$2 version=$3
shift 3
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/tree
[[ $mode == deb ]] && root=$stage/tree/usr
mkdir -p "$root"/{bin,lib/uroce,lib/pkgconfig,include/uroce,share/uroce/configs,share/man/man1,share/doc/uroce/docs}
for item in "$@"; do
  kind=${item%%=*} path=${item#*=}
  case $kind in
    bin) install -m 0755 "$path" "$root/bin/" ;;
    privlib) install -m 0755 "$path" "$root/lib/uroce/" ;;
    lib) install -m 0755 "$path" "$root/lib/" ;;
    include) install -m 0644 "$path" "$root/include/uroce/" ;;
    config) install -m 0644 "$path" "$root/share/uroce/configs/" ;;
    man) install -m 0644 "$path" "$root/share/man/man1/" && gzip -9n "$root/share/man/man1/$(basename "$path")" ;;
    doc) install -m 0644 "$path" "$root/share/doc/uroce/" ;;
    docs) install -m 0644 "$path" "$root/share/doc/uroce/docs/" ;;
    *) echo "make_tree.sh: unknown kind '$kind'" >&2; exit 2 ;;
  esac
done
# pkg-config: relocatable (${pcfiledir}), for the C interface of api/uroce_cq.h.
cat > "$root/lib/pkgconfig/uroce-cq.pc" <<'PC'
prefix=${pcfiledir}/../..
libdir=${prefix}/lib
includedir=${prefix}/include

Name: uroce-cq
Description: uroce's libfabric completion queues, counters and event queues (uroce_cq.h)
Version: @VERSION@
Requires: libfabric
Cflags: -I${includedir}/uroce
Libs: -L${libdir} -luroce_cq
PC
sed -i "s/@VERSION@/$version/" "$root/lib/pkgconfig/uroce-cq.pc"

if [[ $mode == tar ]]; then
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -czf "$out" -C "$stage/tree" .
  exit 0
fi

# A Debian package: Depends are the packages that own the shared libraries
# uroce's binaries load (as dpkg-shlibdeps would find them).
deps=$( (ldd "$root/bin/uroce" "$root"/lib/uroce/*.so* "$root"/lib/*.so 2>/dev/null || true) |
  awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
  done | cut -d: -f1 | sort -u | grep -v '^$' | paste -sd, | sed 's/,/, /g')
mkdir -p "$stage/tree/DEBIAN"
cat > "$stage/tree/DEBIAN/control" <<CONTROL
Package: uroce
Version: $version
Architecture: $(dpkg --print-architecture)
Maintainer: uroce developers <uroce@localhost>
Depends: ${deps}, dpdk, libfabric1, ibverbs-utils
Section: net
Priority: optional
Description: RoCEv2 in software, in user space
 uroce runs unmodified verbs, rdma_cm, libfabric and MPI programs over any
 Ethernet or virtio NIC, or between processes of one host, without an RDMA
 NIC or kernel module: uroce exec -- PROGRAM. Its libibverbs.so.1,
 librdmacm.so.1 and libfabric provider live in /usr/lib/uroce and are used
 only by programs uroce exec starts.
CONTROL
find "$stage/tree" -exec touch -h -d @0 {} +
dpkg-deb --root-owner-group -Zgzip --build "$stage/tree" "$out" >/dev/null
