# Sourced by tools/test, tools/demo and tools/install: changes into the
# checkout's top folder, where Bazel runs.
#
# Bazel (Debian's 4.2.3) refuses a workspace whose path holds a space ("bazel
# does not currently work properly from paths containing spaces"), and it
# takes the physical path, so a symbolic link does not help. Such a checkout
# is built from a copy instead: its files (tracked and untracked but not
# ignored; every file but Bazel's output links where there is no git) are
# copied to ${XDG_CACHE_HOME:-~/.cache}/uroce/src-HASH, one per checkout, and
# the command runs there. Bazel's caches key on the files' contents, so a
# fresh copy rebuilds only what changed. What the command leaves (bazel-bin,
# test logs) is in the copy; the command says where.
uroce_enter_workspace() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd -P) || return 1
  cd "$root" || return 1
  [[ $root != *[[:space:]]* ]] && return 0
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/uroce
  local mirror
  mirror=$cache/src-$(printf '%s' "$root" | sha256sum | cut -c1-16)
  if [[ $mirror == *[[:space:]]* ]]; then
    echo "$(basename "$0"): Bazel cannot build in '$root' (a space in the path), nor in '$mirror'" >&2
    return 1
  fi
  echo "$(basename "$0"): Bazel cannot build in a path with a space ('$root'): building a copy in $mirror" >&2
  local staging=$mirror.new
  rm -rf "$staging" && mkdir -p "$staging" || return 1
  if git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    # Files deleted in the work tree but not in the index are left out.
    git -C "$root" ls-files -z --cached --others --exclude-standard |
      (cd "$root" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
      tar -C "$root" --null -T - -cf - | tar -C "$staging" -xf - || return 1
  else
    tar -C "$root" --exclude='./bazel-*' -cf - . | tar -C "$staging" -xf - || return 1
  fi
  rm -rf "$mirror" && mv "$staging" "$mirror" && cd "$mirror"
}
