#!/usr/bin/env python3
"""Builds a container image from this host's installed Debian packages, with
no registry and no network: the files dpkg installed for the named packages
and for every package they depend on (Depends and Pre-Depends, recursively;
of alternatives, the first one installed), laid out as Debian 12's merged
/usr, with an ld.so cache, passwd and group, imported with `podman import`.

It is the image the container tests run (tests/container_test.sh): the
programs a user would put in an image of their own (ibv_rc_pingpong, rping,
fi_pingpong, mpirun), and nothing of uroce's: uroce comes in from the host
through its CDI device (`uroce cdi`).

  tools/container/image.py [--podman PODMAN...] NAME [PACKAGE...]

Without packages: ibverbs-utils rdmacm-utils libfabric-bin openmpi-bin and
a shell's tools. Documentation, manual pages and translations are left out.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

DEFAULT_PACKAGES = [
    "base-files", "dash", "bash", "coreutils", "grep", "sed", "findutils", "procps",
    "ibverbs-utils", "rdmacm-utils", "libfabric-bin", "openmpi-bin",
    # the container test's own hostile client of the daemon's socket
    "python3-minimal",
]
# Never into the image: what an image needs no copy of (documentation,
# translations), and what dpkg lists but belongs to the host (the merged-/usr
# links are made below).
SKIPPED_PREFIXES = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/",
                    "/usr/share/lintian/", "/usr/share/bug/")
MERGED = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}


def installed(package):
    """The installed package's name (with the arch qualifier dpkg wants), or None."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}\t${Package}\n", package],
                         capture_output=True, text=True)
    for line in out.stdout.splitlines():
        status, _, name = line.partition("\t")
        if status.endswith("install ok installed"):
            return name
    return None


def providers():
    """Virtual package -> the installed packages that provide it."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}\t${Package}\t${Provides}\n"],
                         capture_output=True, text=True, check=True)
    provided = {}
    for line in out.stdout.splitlines():
        status, package, provides = (line.split("\t") + ["", ""])[:3]
        if not status.endswith("install ok installed"):
            continue
        for item in provides.split(","):
            name = re.sub(r"\(.*\)", "", item).strip()
            if name:
                provided.setdefault(name, []).append(package)
    return provided


def dependencies(package):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", package],
                         capture_output=True, text=True, check=True)
    groups = []
    for group in out.stdout.split(","):
        names = [re.sub(r"\(.*\)|:any|:native", "", a).strip() for a in group.split("|")]
        names = [n for n in names if n]
        if names:
            groups.append(names)
    return groups


def closure(roots):
    provided = providers()
    chosen, todo = set(), list(roots)
    while todo:
        want = todo.pop()
        name = installed(want)
        if name is None:
            sys.exit(f"image.py: package {want} is not installed here (tools/setup installs what the tests need)")
        if name in chosen:
            continue
        chosen.add(name)
        for alternatives in dependencies(name):
            pick = None
            for a in alternatives:
                if installed(a):
                    pick = a
                    break
                if provided.get(a):
                    pick = provided[a][0]
                    break
            if pick is None:
                print(f"image.py: {name}: none of {' | '.join(alternatives)} is installed; left out", file=sys.stderr)
            else:
                todo.append(pick)
    return sorted(chosen)


def in_image(path):
    """Where the host's `path` goes under the image's root (merged /usr)."""
    for top, target in MERGED.items():
        if path == top or path.startswith(top + "/"):
            return target + path[len(top):]
    return path.lstrip("/")


def copy_package_files(packages, root):
    count = 0
    for package in packages:
        listing = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True, check=True)
        for path in listing.stdout.splitlines():
            if not path.startswith("/") or path.startswith(SKIPPED_PREFIXES) or path in MERGED:
                continue
            if path in ("/.", "/"):
                continue
            dest = os.path.join(root, in_image(path))
            if os.path.islink(path):
                if not os.path.lexists(dest):
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    os.symlink(os.readlink(path), dest)
                    count += 1
            elif os.path.isdir(path):
                os.makedirs(dest, exist_ok=True)
                shutil.copystat(path, dest)
            elif os.path.isfile(path):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(path, dest)
                count += 1
            # (dpkg lists files that a diversion or a later removal took away)
    return count


def alternatives_links(root):
    """The links update-alternatives(1) made (e.g. /usr/bin/mpirun, a library
    of libpsm-infinipath1), which dpkg does not list: each link whose
    /etc/alternatives entry names a file in the image."""
    names = subprocess.run(["update-alternatives", "--get-selections"], capture_output=True, text=True).stdout
    made = 0
    for line in names.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name:
            continue
        query = subprocess.run(["update-alternatives", "--query", name], capture_output=True, text=True).stdout
        links, in_slaves = [], False
        for q in query.splitlines():
            if q.startswith("Link: "):
                links.append((name, q[len("Link: "):]))
            elif q == "Slaves:":
                in_slaves = True
            elif in_slaves and q.startswith(" "):
                words = q.split()
                if len(words) == 2:
                    links.append(words)
            elif not q.strip():
                break
        for alt_name, link in links:
            target = os.path.join("/etc/alternatives", alt_name)
            if not os.path.islink(link) or not os.path.lexists(target):
                continue
            chosen = os.readlink(target)
            if not os.path.lexists(os.path.join(root, in_image(chosen))):
                continue  # the alternative of a package not in the image
            dest = os.path.join(root, in_image(link))
            if not os.path.lexists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.symlink(os.readlink(link), dest)
                made += 1
    return made


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--podman", default="podman", help="the podman command (words split on spaces)")
    parser.add_argument("--tar", help="write the root file system as a tarball here instead of importing it")
    parser.add_argument("name")
    parser.add_argument("packages", nargs="*")
    args = parser.parse_args()
    packages = closure(args.packages or DEFAULT_PACKAGES)
    with tempfile.TemporaryDirectory(prefix="uroce-image.") as work:
        root = os.path.join(work, "root")
        os.makedirs(root)
        for top, target in MERGED.items():
            os.makedirs(os.path.join(root, target), exist_ok=True)
            os.symlink(target, os.path.join(root, top.lstrip("/")))
        files = copy_package_files(packages, root)
        # Alternatives (mpirun, rsh, ...) are links dpkg does not list.
        shutil.copytree("/etc/alternatives", os.path.join(root, "etc/alternatives"), symlinks=True,
                        dirs_exist_ok=True)
        files += alternatives_links(root)
        for d, mode in (("tmp", 0o1777), ("root", 0o700), ("run", 0o755), ("proc", 0o555), ("sys", 0o555),
                        ("dev", 0o755), ("var/tmp", 0o1777)):
            os.makedirs(os.path.join(root, d), exist_ok=True)
            os.chmod(os.path.join(root, d), mode)
        with open(os.path.join(root, "etc/passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        with open(os.path.join(root, "etc/group"), "w") as f:
            f.write("root:x:0:\nnogroup:x:65534:\n")
        subprocess.run(["ldconfig", "-r", root], check=True)
        tarball = args.tar or os.path.join(work, "root.tar")
        subprocess.run(["tar", "-C", root, "--numeric-owner", "-cf", tarball, "."], check=True)
        size = os.path.getsize(tarball)
        print(f"image.py: {len(packages)} packages, {files} files, {size >> 20} MiB", file=sys.stderr)
        if args.tar:
            return 0
        subprocess.run(args.podman.split() + ["import", "--quiet", tarball, args.name], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"image.py: imported as {args.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
