#!/usr/bin/env python3
"""Keeps the repository self-contained and its documents true to the tree.

Fails (exit 1, one line per finding) when
  - a tracked file refers to the folder beside the checkout that CI lays out
    (a clone from a forge has nothing beside it, so nothing may need it), or
    to the design file that lived there;
  - README.md or a Markdown file under docs/ names a repository file or Bazel
    package that does not exist: Markdown links, and words that start with a
    top-level folder of the repository (`transport/requester.cc`,
    `pmd/eal.{h,cc}`, `tools/test --repeat`) or are Bazel labels
    (`//tools:uroce`, `//transport/...`, `@uroce//bazel:defs.bzl`).

Usage: docs_refs_check.py [REPO_ROOT]   (default: the current directory)
"""

import fnmatch
import glob
import os
import re
import subprocess
import sys

# Spelled in pieces so that this file does not find itself. The design
# sketch that lived there is not in the repository either: the architecture
# is docs/architecture.md.
OUTSIDE_FOLDER = ".." + "/shared"
OUTSIDE_RE = re.compile(re.escape(OUTSIDE_FOLDER) + r"(?![\w-])|\b" + "DESIGN" + r"\.md\b")

# Words that are paths: a top-level folder, then more path characters. Braces
# ({h,cc}) and globs are expanded or matched below.
PATH_CHARS = r"[A-Za-z0-9_.,{}*+@-]"
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
LABEL_RE = re.compile(r"(?:@([A-Za-z0-9_]+))?//([A-Za-z0-9_./-]*)(?::([A-Za-z0-9_./+-]+))?")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        # Files added but not yet committed are tracked too; deleted ones
        # still listed by the index are skipped.
        return [f for f in files if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        # A source archive: walk it, leaving out Bazel's output links.
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames
                           if not d.startswith("bazel-") and d != ".git"]
            for name in filenames:
                files.append(os.path.relpath(os.path.join(dirpath, name), root))
        return files


def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(word[:m.start()] + alt + word[m.end():]))
    return out


def bazel_targets(root, package):
    try:
        text = open(os.path.join(root, package, "BUILD"), encoding="utf-8").read()
    except OSError:
        return []
    return re.findall(r'^\s*name = "([^"]+)"', text, re.M)


def path_exists(root, path):
    """A file or folder, a file's stem (pmd/port for pmd/port.{h,cc}), or a
    Bazel target written as a path (tests/loss_test for //tests:loss_test)."""
    path = path.rstrip("/")
    for candidate in expand_braces(path):
        full = os.path.join(root, candidate)
        if glob.glob(full) or glob.glob(full + ".*"):
            continue
        package, name = os.path.split(candidate)
        if any(fnmatch.fnmatchcase(t, name) for t in bazel_targets(root, package)):
            continue
        return False
    return True


def strip_word(word):
    word = word.strip("`'\"()[]<>")
    word = word.rstrip(".,;:!")
    # file.cc:123 or file.cc:123-140
    word = re.sub(r":\d+(-\d+)?$", "", word)
    return word


def check_document(root, rel, top_dirs, findings):
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    doc_dir = os.path.dirname(rel)
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{lineno}"
        for target in LINK_RE.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            target = target.split("#")[0]
            if not target:
                continue
            resolved = os.path.normpath(os.path.join(doc_dir, target))
            if resolved.startswith("..") or not os.path.exists(os.path.join(root, resolved)):
                findings.append(f"{where}: link to missing file {target}")
        for m in LABEL_RE.finditer(line):
            repo, package, name = m.groups()
            if repo and repo != "uroce":
                continue  # another workspace's label (@dpdk, @bazel_tools ...)
            start = m.start()
            if start > 0 and line[start - 1] not in " `'\"(=[,":
                continue  # a URL (file:///...) or a path, not a label
            package = package.rstrip("/.")
            if package.endswith("..."):
                package = package[:-3].rstrip("/")
            if package and not os.path.isfile(os.path.join(root, package, "BUILD")):
                if not os.path.isdir(os.path.join(root, package)):
                    findings.append(f"{where}: label names a missing package //{package}")
                    continue
            if name and re.search(r"\.(bzl|cc|h|c|sh|py|md|ini|bazelrc)$", name):
                if not os.path.exists(os.path.join(root, package, name)):
                    findings.append(f"{where}: label names a missing file //{package}:{name}")
        for word in re.findall(r"(?<![\w/.$~-])((?:" + "|".join(map(re.escape, top_dirs)) +
                               r")/" + PATH_CHARS + r"*(?:/" + PATH_CHARS + r"*)*)", line):
            word = strip_word(word)
            if word.endswith("..."):
                continue  # a Bazel target pattern written without //
            if not path_exists(root, word):
                findings.append(f"{where}: names missing file {word}")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = tracked_files(root)
    findings = []
    for rel in files:
        if rel.endswith((".pcap", ".png", ".gz")) or "/testdata/" in "/" + rel:
            continue
        try:
            text = open(os.path.join(root, rel), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_RE.search(line):
                findings.append(f"{rel}:{lineno}: refers to {OUTSIDE_RE.search(line).group(0)}, "
                                "which a clone does not have")
    top_dirs = sorted({f.split("/")[0] for f in files if "/" in f and not f.startswith(".")} |
                      {"docs", "testdata", ".ci"})
    docs = [f for f in files if f == "README.md" or (f.startswith("docs/") and f.endswith(".md"))]
    if "README.md" not in docs:
        findings.append("README.md: missing")
    for rel in docs:
        check_document(root, rel, top_dirs, findings)
    for f in findings:
        print(f)
    print(f"docs_refs_check: {len(files)} tracked files, {len(docs)} documents, "
          f"{len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
