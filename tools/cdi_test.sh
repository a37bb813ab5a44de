#!/usr/bin/env bash
# `uroce cdi` without a container runtime: the spec it writes (CDI 0.5.0:
# kind, device, environment, mounts, each mount's source present), the
# library directory (uroce's three libraries, DPDK's, the ring mempool
# driver; never the C library, libstdc++ or libfabric), --rootless (one more
# variable: the daemon uid to trust), and its refusals (a
# bad device name, a missing socket directory, one others may write to).
# tests:container_test hands the device to real containers.
#   args: UROCE
set -uo pipefail
U=$1
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/cdi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
mkdir -p "$TMP/run" && chmod 0755 "$TMP/run"

"$U" cdi --socket "$TMP/run/uroce.sock" --libraries "$TMP/lib" --output "$TMP/uroce.json" --name ci0 \
  > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "uroce cdi"; }
cat "$TMP/out"
python3 - "$TMP/uroce.json" "$TMP/lib" "$TMP/run" <<'PY' || fail "the spec"
import json, os, sys
spec = json.load(open(sys.argv[1]))
lib, run = sys.argv[2], sys.argv[3]
assert spec["cdiVersion"] == "0.5.0", spec
assert spec["kind"] == "uroce.dev/rdma", spec
(device,) = spec["devices"]
assert device["name"] == "ci0", device
edits = device["containerEdits"]
env = dict(e.split("=", 1) for e in edits["env"])
assert env == {"LD_LIBRARY_PATH": "/opt/uroce/lib", "FI_PROVIDER_PATH": "/opt/uroce/lib",
               "UROCE_DAEMON": "/run/uroce/uroce.sock"}, env
mounts = {m["containerPath"]: m for m in edits["mounts"]}
assert mounts["/opt/uroce/lib"]["hostPath"] == os.path.realpath(lib), mounts
assert mounts["/run/uroce"]["hostPath"] == run, mounts
drivers = [m for p, m in mounts.items() if p.endswith("/pmds-23.0")]
assert len(drivers) == 1 and drivers[0]["hostPath"] == os.path.realpath(lib) + "/drivers", mounts
assert len(mounts) == 3, mounts
for m in mounts.values():
    assert "ro" in m["options"] and "bind" in m["options"], m
    assert os.path.isdir(m["hostPath"]), m
assert set(edits) == {"env", "mounts"}, edits  # no device node, no hook
files = set(os.listdir(lib))
for wanted in ("libibverbs.so.1", "librdmacm.so.1", "liburoce-fi.so", "librte_eal.so.23"):
    assert wanted in files, (wanted, sorted(files))
for never in ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libfabric.so.1"):
    assert never not in files, (never, sorted(files))
assert os.listdir(os.path.join(lib, "drivers")) == ["librte_mempool_ring.so"]
print("spec ok: %d libraries, %d mounts" % (len(files) - 1, len(mounts)))
PY
# Run again: the same result, files replaced in place.
"$U" cdi --socket "$TMP/run/uroce.sock" --libraries "$TMP/lib" --output - > "$TMP/again.json" 2> /dev/null ||
  fail "a second run"
cmp -s <(sed 's/ci0/uroce0/' "$TMP/uroce.json") "$TMP/again.json" || fail "a second run wrote another spec"
# --rootless: the same, and the programs trust the uid a daemon of an
# unmapped uid shows as in a user namespace (the kernel's overflow uid).
"$U" cdi --socket "$TMP/run/uroce.sock" --libraries "$TMP/lib" --output - --rootless > "$TMP/rootless.json" \
  2> "$TMP/rootless.out" || { cat "$TMP/rootless.out"; fail "uroce cdi --rootless"; }
python3 - "$TMP/again.json" "$TMP/rootless.json" "$(cat /proc/sys/kernel/overflowuid)" <<'PY' || fail "the --rootless spec"
import json, sys
plain, rootless = (json.load(open(p))["devices"][0]["containerEdits"] for p in sys.argv[1:3])
env = rootless["env"]
assert env == plain["env"] + ["UROCE_DAEMON_UID=" + sys.argv[3]], env
assert rootless["mounts"] == plain["mounts"], rootless
print("rootless spec ok: " + env[-1])
PY

expect_refusal() {
  local what=$1 code=$2 text=$3
  shift 3
  local out rc
  out=$("$U" cdi "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$text" <<<"$out"; then
    fail "$what: exit $rc (want $code), '$out'"
  else
    echo "ok: $what refused: $out"
  fi
}
expect_refusal "a bad device name" 2 "letters, digits" --name 'a/b' --socket "$TMP/run/uroce.sock" --output -
expect_refusal "a missing socket directory" 1 "does not exist" --socket "$TMP/nowhere/uroce.sock" --output -
mkdir -p "$TMP/open" && chmod 0777 "$TMP/open"
expect_refusal "a socket directory others may write" 1 "writable by others" --socket "$TMP/open/uroce.sock" --output -
expect_refusal "a relative path" 2 "absolute" --socket run/uroce.sock --output -
expect_refusal "an unknown option" 2 "unknown argument" --frobnicate

[[ $FAILS -eq 0 ]] || { echo "$FAILS failure(s)"; exit 1; }
echo PASS
