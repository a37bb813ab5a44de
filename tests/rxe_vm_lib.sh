# Shared by the rxe_vm smoke tests (sourced). The harness is tools/rxe_vm/rxe_vm.py.
# Every check that fails prints why and makes the test fail: a missing qemu, a
# kernel that cannot be fetched or a guest that does not boot is a FAILURE here,
# never a skip.

# Test scratch and artifact folders (Bazel's, or fresh ones outside Bazel).
tmp=${TEST_TMPDIR:-$(mktemp -d /tmp/rxe_vm_test.XXXXXX)}
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp/artifacts}
mkdir -p "$artifacts"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Runs the harness with the interpreter the tests were given.
rxe_vm() {
  python3 "$harness" "$@"
}

# gid_index DEVINFO_TEXT ADDRESS: the index of the RoCE v2 GID holding ADDRESS
# (its IPv4-mapped form for IPv4) in `ibv_devinfo -v` output.
gid_index() {
  printf '%s\n' "$1" |
    sed -n "s/^[[:space:]]*GID\[[[:space:]]*\([0-9]*\)\]:[[:space:]]*$2, RoCE v2\$/\1/p" |
    head -n 1
}

# bash skips EXIT traps when a signal kills it (Bazel's timeout sends SIGTERM);
# turning the signals into exits runs them, so the guest is always stopped.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
