#!/usr/bin/env bash
# Smoke test (c) of the rxe guest harness: when what it needs cannot be had, it
# fails with status 125 and says what failed -- so the tests built on it fail
# with the reason instead of passing silently. Checked: qemu missing, the kernel
# package missing or broken, and a step inside the guest failing (a bad
# address: the guest reports the step and powers off, the host says which step),
# and a uroce guest whose DPDK cannot start (below).
# Arguments: rxe_vm.py [UROCE_TARBALL].
set -uo pipefail
harness=$1 tarball=${2:-}
source "$(dirname "$0")/rxe_vm_lib.sh"
# The interpreter itself, not a wrapper script that needs PATH (pyenv shims).
python=$(python3 -c "import sys; print(sys.executable)") || fail "python3 is not installed"

# expect_failure WHAT PATTERN COMMAND...: COMMAND must exit 125 with PATTERN
# in its error output.
expect_failure() {
  local what=$1 pattern=$2 status
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  status=$?
  echo "--- $what: status $status"
  cat "$tmp/err"
  [[ $status -eq 125 ]] || fail "$what: status $status, expected 125"
  grep -q "rxe_vm: FAILED: .*$pattern" "$tmp/err" ||
    fail "$what: the error does not say '$pattern'"
  ! grep -q . "$tmp/out" || fail "$what: printed guest output: $(cat "$tmp/out")"
}

# qemu missing: nothing on PATH has it (the harness finds all its tools there).
expect_failure "qemu missing" "qemu-system-x86_64' is not installed (Debian package qemu-system-x86" \
  env PATH=/nonexistent "$python" "$harness" run -- true

# Kernel package missing or broken (a private cache, so the real one is untouched).
export UROCE_RXE_VM_CACHE=$tmp/cache
expect_failure "kernel package missing" "UROCE_RXE_VM_KERNEL_DEB=/nonexistent.deb: no such file" \
  env UROCE_RXE_VM_KERNEL_DEB=/nonexistent.deb "$python" "$harness" run -- true
echo "not a Debian package" >"$tmp/broken.deb"
expect_failure "kernel package broken" "unpacking the kernel package" \
  env UROCE_RXE_VM_KERNEL_DEB="$tmp/broken.deb" "$python" "$harness" run -- true
unset UROCE_RXE_VM_CACHE

# A guest step that fails: the guest's `ip` refuses a /99 prefix (the host side
# never sees the guest's address, so only the guest can fail here).
expect_failure "guest set-up step failing" "guest set-up failed at: add IPv4 address 10.77.0.2/99" \
  "$python" "$harness" run --guest-ip 10.77.0.2/99 --save never -- true
# ... and nothing is left behind.
# A uroce guest whose DPDK cannot start fails the boot with the reason:
# on TCG's default CPU model, qemu64, the daemon dies of SIGILL.
if [[ -n $tarball ]]; then
  expect_failure "uroce guest on qemu64" "start uroce daemon (nic=pci): it exited with status" \
    "$python" "$harness" run --kind uroce --uroce-tarball "$tarball" --cpu qemu64 --save never -- true
fi
! ip netns list | grep -q '^uroce-rxe-' ||
  echo "note: uroce-rxe-* namespaces exist (other tests may be running): $(ip netns list)"
echo "PASS: every failure ends in status 125 with its reason"
