#!/usr/bin/env bash
# Issue 18, a Bazel rule for other workspaces: examples/bazel_user is a user's
# workspace (uroce as a local_repository, bazel/deps.bzl, bazel/defs.bzl's
# uroce_test), built and tested here as its owner would: `bazel test //...`
# in that directory, with a Bazel server and output tree of its own.
# Argument: README.md of the source tree (its real path leads to the tree).
set -uo pipefail
src=$(dirname "$(readlink -f "$1")")
example=$src/examples/bazel_user
[[ -f $example/WORKSPACE ]] || { echo "FAIL: no $example/WORKSPACE"; exit 1; }
root=$(mktemp -d /tmp/uroce-bazel-user.XXXXXX)
cleanup() {
  (cd "$example" && bazel --output_user_root="$root" shutdown >/dev/null 2>&1)
  rm -rf "$root"
}
trap cleanup EXIT
cd "$example" || exit 1
# The outer test's variables would change how the inner Bazel behaves.
env -u TEST_TMPDIR -u TEST_SRCDIR -u TEST_WORKSPACE -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE \
  -u XML_OUTPUT_FILE -u TEST_TARGET -u TEST_BINARY -u TEST_SHARD_INDEX -u TEST_TOTAL_SHARDS \
  bazel --output_user_root="$root" --max_idle_secs=60 test //... \
  --symlink_prefix=/ --test_output=all --noshow_progress 2>&1 | tee "$root/log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//:[a-z_]+ +PASSED' "$root/log")
echo "bazel_user: exit $rc, $passed tests passed"
((rc == 0 && passed >= 3)) || { echo "FAIL"; exit 1; }
echo "PASS"
