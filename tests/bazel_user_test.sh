#!/usr/bin/env bash
# A Bazel rule for other workspaces: examples/bazel_user is a user's
# workspace (uroce as a local_repository, bazel/deps.bzl, bazel/defs.bzl's
# uroce_test), built and tested here as its owner would: `bazel test //...`
# in that directory, with a Bazel server and output tree of its own. Then
# the same workspace with uroce as an archive of its sources (http_archive
# of a file:// URL: a release's source tarball, nothing downloaded). The two
# share a disk cache (--disk_cache): the archive holds the same sources under
# the same repository name, so its build reuses the first one's actions, and
# its tests run again (--nocache_test_results).
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
  --disk_cache="$root/disk_cache" --symlink_prefix=/ --test_output=all --noshow_progress 2>&1 | tee "$root/log" | sed "s/^/  /"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//:[a-z_]+ +PASSED' "$root/log")
echo "bazel_user: exit $rc, $passed tests passed"
((rc == 0 && passed >= 4)) || { echo "FAIL"; exit 1; }

# uroce as a source archive, as a release would ship it.
tar -C "$src" --exclude='./bazel-*' --exclude=./.git --exclude=./examples -czf "$root/uroce-src.tar.gz" \
  --transform 's|^\./|uroce/|' . || { echo "FAIL: cannot pack the sources"; exit 1; }
user=$root/archive_user
mkdir -p "$user" && cp "$example/BUILD" "$example/hello_verbs.c" "$user/"
cat > "$user/WORKSPACE" <<WS
workspace(name = "bazel_user")

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

http_archive(
    name = "uroce",
    urls = ["file://$root/uroce-src.tar.gz"],
    strip_prefix = "uroce",
)

load("@uroce//bazel:deps.bzl", "uroce_dependencies")

uroce_dependencies()
WS
printf 'import %s/bazel/user.bazelrc\nbuild --jobs=2\n' "$src" > "$user/.bazelrc"
cd "$user" || exit 1
env -u TEST_TMPDIR -u TEST_SRCDIR -u TEST_WORKSPACE -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE \
  -u XML_OUTPUT_FILE -u TEST_TARGET -u TEST_BINARY -u TEST_SHARD_INDEX -u TEST_TOTAL_SHARDS \
  bazel --output_user_root="$root/archive" --max_idle_secs=60 test //:hello_verbs_test //:fi_pingpong_test \
  --disk_cache="$root/disk_cache" --nocache_test_results --symlink_prefix=/ --test_output=errors --noshow_progress 2>&1 | tee "$root/archive.log" | sed "s/^/  /"
rc=${PIPESTATUS[0]}
(cd "$user" && bazel --output_user_root="$root/archive" shutdown >/dev/null 2>&1)
passed=$(grep -cE '^//:[a-z_]+ +PASSED' "$root/archive.log")
echo "bazel_user with uroce as an archive: exit $rc, $passed tests passed"
((rc == 0 && passed == 2)) || { echo "FAIL"; exit 1; }
echo "PASS"
