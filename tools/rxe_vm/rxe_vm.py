#!/usr/bin/env python3
"""Boots Debian's own kernel with Soft-RoCE (rdma_rxe) under qemu (TCG) on a tap
device in a fresh network namespace, and runs commands in it.

The guest is the Linux side of uroce's interoperability tests: rxe0 on the
guest's eth0 (a virtio NIC), rdma-core's and perftest's programs inside. The
host side of the link is the tap device in a network namespace this tool
creates; tests put their own programs (uroce, later) on that tap.

Subcommands (`rxe_vm.py COMMAND --help` for the options):
  run   -- CMD   boot, run CMD in the guest, power off; prints CMD's output and
                 exits with its status
  start          boot a guest that keeps running; prints KEY=VALUE lines
                 (RXE_VM_NETNS, RXE_VM_TAP, ...) for the shell
  exec  -- CMD   run CMD in a started guest, wait for it
  spawn -- CMD   start CMD in a started guest in the background (a named job)
  wait           wait for a spawned job; prints its output, exits with its status
  stop           power the started guest off and remove the namespace; can save
                 the console log and the capture
  prepare        only fetch the kernel and build the initramfs (warms the cache)
  net-up, net-down  a namespace with a bridge that several guests share
                 (start --netns NS --bridge rxebr0 --tap NAME): one virtual
                 network, as the VMs of one cloud subnet

Two kinds of guest: --kind rxe (the default) runs kernel Soft-RoCE (rxe0 on
eth0); --kind uroce is a cloud VM with uroce installed (from
--uroce-tarball) running `uroce daemon`, whose uroce0 is either DPDK's
virtio PMD on a second virtio NIC bound to uio_pci_generic (--nic pci) or
the guest kernel's eth0 shared through net_af_xdp/net_af_packet (--nic
kernel); programs run as `uroce exec -- PROGRAM`.

Exit status: the guest command's own status, or 125 when the harness itself
failed (qemu missing, kernel download failed, module load failed, ...); the
reason is on stderr, prefixed "rxe_vm: FAILED:".

Cache: the kernel package, the kernel and modules taken from it, and the
initramfs are kept in $UROCE_RXE_VM_CACHE (default /var/cache/uroce-rxe-vm, or
~/.cache/uroce-rxe-vm when that is not writable). The kernel package is fetched
with `apt-get download` on first use; nothing is installed on the host.
"""

import argparse
import base64
import fcntl
import glob
import hashlib
import json
import lzma
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GUEST_INIT = os.path.join(HERE, "guest_init.sh")
HARNESS_ERROR = 125

# Kernel modules the guest loads; their dependencies come along (modinfo).
GUEST_MODULES = [
    "crc32_generic",  # rxe's ICRC algorithm; `rdma link add` fails without it
    "virtio_pci", "virtio_net",
    "rdma_rxe", "ib_uverbs", "rdma_ucm",
    # The uroce guest's DPDK NIC (mode "pci"): Debian's kernel has no
    # CONFIG_VFIO_NOIOMMU, and a TCG guest has no IOMMU, so vfio-pci cannot
    # bind; uio_pci_generic can (DPDK then needs IOVA as PA: hugepages).
    "uio_pci_generic",
]

# Programs copied into the guest, with the Debian package that has each (for
# the error message when one is missing). Shared libraries follow via ldd.
GUEST_PROGRAMS = {
    "dash": "dash",
    "busybox": "busybox-static",
    "kmod": "kmod",
    "timeout": "coreutils",
    "stdbuf": "coreutils",
    "ip": "iproute2",
    "rdma": "iproute2",
    "ibv_devices": "ibverbs-utils",
    "ibv_devinfo": "ibverbs-utils",
    "ibv_rc_pingpong": "ibverbs-utils",
    "ibv_uc_pingpong": "ibverbs-utils",
    "ibv_ud_pingpong": "ibverbs-utils",
    "ibv_srq_pingpong": "ibverbs-utils",
    "rping": "rdmacm-utils",
    "ucmatose": "rdmacm-utils",
    "udaddy": "rdmacm-utils",
    "ib_send_bw": "perftest",
    "ib_write_bw": "perftest",
    "ib_read_bw": "perftest",
    "ib_atomic_bw": "perftest",
    "ib_send_lat": "perftest",
    "ib_write_lat": "perftest",
    "ib_read_lat": "perftest",
    "ib_atomic_lat": "perftest",
}
# kmod answers to these names (the kernel itself runs /sbin/modprobe).
KMOD_NAMES = ["modprobe", "insmod", "rmmod", "lsmod", "modinfo", "depmod"]

GUEST_MAC = "52:54:00:77:00:02"
HOST_MAC = "02:00:00:77:00:01"
TAP = "rxetap0"


class HarnessError(Exception):
    """A failure of the harness (not of the guest command); says what failed."""


def log(msg):
    print(f"rxe_vm: {msg}", file=sys.stderr, flush=True)


def run_cmd(argv, what, timeout, **kw):
    """Runs argv with a time limit; a failure raises HarnessError naming `what`."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError:
        raise HarnessError(f"{what}: '{argv[0]}' is not installed")
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{what}: '{' '.join(argv)}' took longer than {timeout} s")
    if r.returncode != 0:
        raise HarnessError(f"{what}: '{' '.join(argv)}' exited with status "
                           f"{r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout


def need_tool(name, package):
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None)
    if not path:
        raise HarnessError(f"'{name}' is not installed (Debian package {package}; "
                           "tools/setup installs it)")
    return path


# --------------------------------------------------------------------------
# The kernel: fetched with apt, cached, turned into an uncompressed vmlinux.

def cache_dir():
    d = os.environ.get("UROCE_RXE_VM_CACHE")
    if not d:
        d = "/var/cache/uroce-rxe-vm"
        try:
            os.makedirs(d, exist_ok=True)
            if not os.access(d, os.W_OK):
                raise PermissionError
        except PermissionError:
            d = os.path.expanduser("~/.cache/uroce-rxe-vm")
    os.makedirs(d, exist_ok=True)
    return d


def resolve_kernel_package():
    """The linux-image-<abi>-amd64 package that linux-image-amd64 points to now,
    and its candidate version. None when apt knows nothing (no package lists)."""
    for attempt in (1, 2):
        try:
            out = run_cmd(["apt-cache", "depends", "--important", "linux-image-amd64"],
                          "apt-cache", 60)
            m = re.search(r"Depends: (linux-image-\S+-amd64)", out)
            if m:
                pkg = m.group(1)
                show = run_cmd(["apt-cache", "show", "--no-all-versions", pkg],
                               "apt-cache", 60)
                v = re.search(r"^Version: (\S+)", show, re.M)
                if v:
                    return pkg, v.group(1)
        except HarnessError as e:
            log(f"cannot resolve linux-image-amd64 yet: {e}")
        if attempt == 1:
            # A fresh machine may have no package lists; fetch them once.
            log("running apt-get update to find the kernel package")
            try:
                run_cmd(["apt-get", "update", "-qq"], "apt-get update", 300)
            except HarnessError as e:
                log(str(e))
    return None


def fetch_kernel_deb(cache):
    """Path of the kernel .deb in the cache, downloading it when missing."""
    explicit = os.environ.get("UROCE_RXE_VM_KERNEL_DEB")
    if explicit:
        if not os.path.isfile(explicit):
            raise HarnessError(f"UROCE_RXE_VM_KERNEL_DEB={explicit}: no such file")
        return explicit
    debs = os.path.join(cache, "debs")
    os.makedirs(debs, exist_ok=True)
    resolved = resolve_kernel_package()
    if resolved is None:
        cached = sorted(glob.glob(os.path.join(debs, "linux-image-*-amd64_*.deb")),
                        key=os.path.getmtime)
        if cached:
            log(f"apt cannot name the kernel package; using the cached {cached[-1]}")
            return cached[-1]
        raise HarnessError("kernel download failed: apt cannot resolve "
                           "linux-image-amd64 (no package lists, no network?) and "
                           f"nothing is cached in {debs}")
    pkg, version = resolved
    epochless = version.split(":", 1)[-1]
    want = os.path.join(debs, f"{pkg}_{epochless}_amd64.deb")
    if os.path.isfile(want):
        return want
    log(f"downloading {pkg} {version} (once; cached in {debs})")
    tmp = tempfile.mkdtemp(prefix="download.", dir=debs)
    try:
        # apt drops privileges to _apt for downloads; let it write here.
        os.chmod(tmp, 0o777)
        run_cmd(["apt-get", "download", "-q", f"{pkg}={version}"],
                "kernel download failed", 600, cwd=tmp)
        got = glob.glob(os.path.join(tmp, "*.deb"))
        if len(got) != 1:
            raise HarnessError(f"kernel download failed: apt-get download left {got}")
        os.replace(got[0], want)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return want


def extract_vmlinux(bzimage, out):
    """Writes the uncompressed ELF kernel held in a bzImage.

    TCG is slow at the kernel's own decompressor (seconds for 8 MB of xz), and
    qemu boots an ELF vmlinux directly through its PVH entry point
    (CONFIG_PVH=y in Debian's kernel). Like the kernel's scripts/extract-vmlinux,
    but it reads the payload's place from the boot protocol header instead of
    searching for compression signatures."""
    with open(bzimage, "rb") as f:
        img = f.read()
    if img[0x202:0x206] != b"HdrS":
        raise HarnessError(f"{bzimage}: not a bzImage (no HdrS boot header)")
    setup_sects = img[0x1F1] or 4
    payload_offset, payload_length = struct.unpack_from("<II", img, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    payload = img[start:start + payload_length]
    if payload.startswith(b"\xfd7zXZ\x00"):
        data = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    elif payload.startswith(b"\x1f\x8b"):
        import zlib
        data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    elif payload.startswith(b"\x28\xb5\x2f\xfd"):
        data = subprocess.run(["zstd", "-dc"], input=payload, capture_output=True,
                              timeout=120, check=True).stdout
    else:
        raise HarnessError(f"{bzimage}: kernel payload compressed in a way this "
                           f"harness does not know (magic {payload[:4].hex()})")
    if not data.startswith(b"\x7fELF"):
        raise HarnessError(f"{bzimage}: decompressed payload is not an ELF file")
    with open(out, "wb") as f:
        f.write(data)


def module_closure(modroot, names):
    """Paths (relative to modroot) of the named modules and all they depend on."""
    by_name = {}
    for dirpath, _, files in os.walk(modroot):
        for fn in files:
            if fn.endswith((".ko", ".ko.xz", ".ko.zst", ".ko.gz")):
                mod = fn.split(".ko")[0].replace("-", "_")
                by_name[mod] = os.path.relpath(os.path.join(dirpath, fn), modroot)
    builtin = set()
    bfile = os.path.join(modroot, "modules.builtin")
    if os.path.exists(bfile):
        with open(bfile) as f:
            builtin = {os.path.basename(l.strip()).split(".ko")[0].replace("-", "_")
                       for l in f}
    todo, seen = [n.replace("-", "_") for n in names], {}
    while todo:
        mod = todo.pop()
        if mod in seen or mod in builtin:
            continue
        if mod not in by_name:
            raise HarnessError(f"kernel module {mod} is not in the kernel package "
                               "(neither a module nor built in)")
        seen[mod] = by_name[mod]
        deps = run_cmd(["modinfo", "-F", "depends", os.path.join(modroot, by_name[mod])],
                       "modinfo", 30).strip()
        todo += [d for d in deps.split(",") if d]
    return sorted(seen.values())


def prepare_kernel(cache):
    """Directory holding vmlinux and lib/modules/<release>/ (only the modules the
    guest loads, with modules.dep from depmod), built once per kernel package."""
    need_tool("dpkg-deb", "dpkg")
    need_tool("depmod", "kmod")
    deb = fetch_kernel_deb(cache)
    key = hashlib.sha256((os.path.basename(deb) + str(os.path.getsize(deb)) +
                          " ".join(GUEST_MODULES)).encode()).hexdigest()[:12]
    kit = os.path.join(cache, f"kernel-{key}")
    if os.path.exists(os.path.join(kit, "ok")):
        return kit
    log(f"unpacking {os.path.basename(deb)}")
    work = tempfile.mkdtemp(prefix="unpack.", dir=cache)
    try:
        run_cmd(["dpkg-deb", "-x", deb, work], "unpacking the kernel package", 300)
        vmlinuz = glob.glob(os.path.join(work, "boot", "vmlinuz-*"))
        if len(vmlinuz) != 1:
            raise HarnessError(f"kernel package {deb}: expected one /boot/vmlinuz-*, "
                               f"found {vmlinuz}")
        release = os.path.basename(vmlinuz[0])[len("vmlinuz-"):]
        src = os.path.join(work, "lib", "modules", release)
        newkit = work + ".kit"
        dst = os.path.join(newkit, "lib", "modules", release)
        os.makedirs(dst)
        extract_vmlinux(vmlinuz[0], os.path.join(newkit, "vmlinux"))
        for rel in module_closure(src, GUEST_MODULES):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))
        for f in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            if os.path.exists(os.path.join(src, f)):
                shutil.copy2(os.path.join(src, f), dst)
        run_cmd(["depmod", "-b", newkit, release], "depmod", 120)
        with open(os.path.join(newkit, "release"), "w") as f:
            f.write(release + "\n")
        with open(os.path.join(newkit, "ok"), "w") as f:
            f.write(os.path.basename(deb) + "\n")
        shutil.rmtree(kit, ignore_errors=True)
        os.replace(newkit, kit)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(work + ".kit", ignore_errors=True)
    return kit


# --------------------------------------------------------------------------
# The initramfs: busybox, dash, kmod, iproute2, rdma-core's and perftest's
# programs with their libraries, the rxe provider, the kernel modules.

LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def shared_libraries(path, env=None):
    """Absolute paths of the shared libraries `path` loads (ldd)."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30, env=env)
    if "not a dynamic executable" in (r.stdout + r.stderr):
        return []
    if r.returncode != 0:
        raise HarnessError(f"ldd {path}: {r.stderr.strip()}")
    if "not found" in r.stdout:
        raise HarnessError(f"ldd {path}: missing libraries:\n{r.stdout}")
    return [m.group(1) for m in map(LDD_LINE.search, r.stdout.splitlines()) if m]


def initramfs_inputs():
    """(guest path, host path) pairs of every file copied from the host."""
    files = {}
    bins = {}
    for prog, package in GUEST_PROGRAMS.items():
        bins[prog] = need_tool(prog, package)
    libs = list(bins.values())
    provider = glob.glob("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so")
    if not provider or not os.path.exists("/etc/libibverbs.d/rxe.driver"):
        raise HarnessError("the rxe provider (librxe-rdmav*.so, /etc/libibverbs.d/"
                           "rxe.driver) is not installed (Debian package "
                           "ibverbs-providers)")
    libs += provider
    # Loaded with dlopen, so ldd does not list it: glibc's pthread_cancel (rping).
    libgcc = glob.glob("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1")
    if not libgcc:
        raise HarnessError("libgcc_s.so.1 not found (Debian package libgcc-s1)")
    libs += libgcc
    # stdbuf's LD_PRELOAD helper: spawned jobs write to files, and programs
    # killed at their time limit would lose what stdio still buffered.
    stdbuf = "/usr/libexec/coreutils/libstdbuf.so"
    if not os.path.exists(stdbuf):
        raise HarnessError(f"{stdbuf} not found (Debian package coreutils)")
    libs.append(stdbuf)
    files[stdbuf] = stdbuf
    for prog, host in bins.items():
        files[f"/usr/bin/{prog}"] = host
    for p in provider:
        files[p] = p
    files["/etc/libibverbs.d/rxe.driver"] = "/etc/libibverbs.d/rxe.driver"
    files[libgcc[0]] = libgcc[0]
    for obj in libs:
        for lib in shared_libraries(obj):
            # Keep the path the program asks for (e.g. /lib64/ld-linux-x86-64.so.2);
            # the image's /lib and /lib64 point into /usr like the host's.
            files[lib] = lib
    return files


# --------------------------------------------------------------------------
# The uroce guest (--kind uroce): what a cloud VM with uroce installed holds.
# uroce itself comes from its release tarball (//tools:uroce_tarball),
# unpacked under /usr as the .deb installs it; the rest from the host's
# Debian packages, as for the rxe guest.

UROCE_GUEST_PROGRAMS = {
    "fi_pingpong": "libfabric-bin",
    "fi_info": "libfabric-bin",
    "mpirun": "openmpi-bin",
    "orted": "openmpi-bin",
}
# The guest side of the uroce guest, beside guest_init.sh.
UROCE_GUEST_SCRIPTS = ["uroce_guest.sh", "guest_rsh.sh", "guest_rsh_server.sh"]
# DPDK loads every driver in its plugin directory at start-up; the guest's
# holds only these (and what they load), not the ~150 drivers of the host's.
DPDK_PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0"
DPDK_GUEST_DRIVERS = [
    "bus_pci", "bus_vdev", "mempool_ring", "mempool_stack",
    "net_virtio", "net_af_packet", "net_af_xdp", "net_memif", "net_ring", "net_null",
]
# Open MPI's components and help texts, loaded and read at run time.
OPENMPI_TREES = [
    "/usr/lib/x86_64-linux-gnu/openmpi",
    "/usr/lib/x86_64-linux-gnu/pmix2",
    "/usr/share/openmpi",
    "/etc/openmpi",
]
# Open MPI components that pull in whole stacks the guest does not need
# (CUDA-aware UCX, verbs through UCX, libfabric's psm, ...): left out, so
# mpirun cannot pick them either.
OPENMPI_SKIP = re.compile(r"mca_(pml_ucx|osc_ucx|spml_ucx|atomic_ucx|btl_uct|btl_openib|"
                          r"mtl_psm|mtl_psm2|btl_usnic|coll_hcoll|coll_fca)\.so$")


def unpack_uroce_tarball(tarball, cache):
    """Directory holding the tarball's tree (bin/uroce, lib/uroce/..., ...),
    unpacked once per tarball content."""
    h = hashlib.sha256(open(tarball, "rb").read()).hexdigest()[:12]
    tree = os.path.join(cache, f"uroce-{h}")
    if os.path.exists(os.path.join(tree, ".ok")):
        return tree
    tmp = tempfile.mkdtemp(prefix="uroce-tree.", dir=cache)
    try:
        run_cmd(["tar", "-xzf", tarball, "-C", tmp, "--strip-components=1"],
                "unpacking the uroce tarball", 120)
        if not os.path.exists(os.path.join(tmp, "bin", "uroce")):
            raise HarnessError(f"{tarball}: no bin/uroce inside (not a uroce tarball?)")
        open(os.path.join(tmp, ".ok"), "w").close()
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(tmp, tree)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Trees of older builds (one per tarball content) go after an hour.
    for old in glob.glob(os.path.join(cache, "uroce-*")):
        if old != tree and time.time() - os.path.getmtime(old) > 3600:
            shutil.rmtree(old, ignore_errors=True)
    return tree


def uroce_guest_inputs(tree, extras):
    """Host files the uroce guest holds beyond the rxe guest's (guest path ->
    host path): programs, DPDK's drivers, Open MPI, and every library they and
    the uroce tree (which goes under /usr separately) load."""
    files = {}
    libs = []
    for prog, package in UROCE_GUEST_PROGRAMS.items():
        host = need_tool(prog, package)
        files[f"/usr/bin/{prog}"] = host
        libs.append(host)
    for d in DPDK_GUEST_DRIVERS:
        found = glob.glob(os.path.join(DPDK_PLUGIN_DIR, f"librte_{d}.so"))
        if not found:
            raise HarnessError(f"DPDK driver librte_{d}.so is not in {DPDK_PLUGIN_DIR} "
                               "(Debian package dpdk / librte-*)")
        files[found[0]] = found[0]
        libs.append(found[0])
    for top in OPENMPI_TREES:
        if not os.path.exists(top):
            raise HarnessError(f"{top} does not exist (Debian package openmpi-bin)")
        for dirpath, _, names in os.walk(top):
            for n in names:
                path = os.path.join(dirpath, n)
                if OPENMPI_SKIP.search(n):
                    continue
                files[path] = path
                if n.endswith(".so") and not os.path.islink(path):
                    libs.append(path)
    for name in UROCE_GUEST_SCRIPTS:
        files[f"/usr/lib/uroce-vm/{name}"] = os.path.join(HERE, name)
    for host, guest in extras:
        if not os.path.isfile(host):
            raise HarnessError(f"--extra {host}: no such file")
        files[guest] = host
        libs.append(host)
    libs += [os.path.join(tree, "bin", "uroce")]
    libs += glob.glob(os.path.join(tree, "lib", "uroce", "*.so*"))
    libs += glob.glob(os.path.join(tree, "lib", "*.so"))
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(tree, "lib", "uroce"))
    for obj in libs:
        for lib in shared_libraries(obj, env):
            if not lib.startswith(tree):
                files[lib] = lib
    return files


def guest_path(p):
    """Where a host path lives in the image, whose /bin, /sbin, /lib and /lib64
    are symbolic links into /usr (merged /usr, as on Debian 12)."""
    for top in ("/bin/", "/sbin/", "/lib/", "/lib64/"):
        if p.startswith(top):
            return "/usr" + p
    return p


def copy_keeping_links(stage, guest, host):
    """Copies host to stage+guest; a symbolic link stays one (its target comes
    too). DPDK's drivers depend on it: /usr/lib/x86_64-linux-gnu/librte_X.so.23
    and the plugin directory's librte_X.so name one file, and two copies would
    be loaded twice (every driver registered twice)."""
    for _ in range(40):
        dst = stage + guest_path(guest)
        if os.path.lexists(dst):
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if guest != host or not os.path.islink(host):
            shutil.copy2(os.path.realpath(host), dst)
            return
        target = os.readlink(host)
        os.symlink(target, dst)
        host = guest = os.path.normpath(os.path.join(os.path.dirname(host), target))
    raise HarnessError(f"{host}: too many levels of symbolic links")


def prepare_initramfs(cache, kit, kind="rxe", tarball=None, extras=()):
    need_tool("cpio", "cpio")
    files = initramfs_inputs()
    tree = None
    if kind == "uroce":
        if not tarball:
            raise HarnessError("--kind uroce needs --uroce-tarball (bazel build //tools:uroce_tarball)")
        tree = unpack_uroce_tarball(tarball, cache)
        files.update(uroce_guest_inputs(tree, extras))
    release = open(os.path.join(kit, "release")).read().strip()
    h = hashlib.sha256()
    h.update(open(GUEST_INIT, "rb").read())
    h.update(kit.encode())
    h.update(f"{kind} {tree}".encode())
    for g in sorted(files):
        st = os.stat(files[g])
        h.update(f"{g} {files[g]} {st.st_size} {st.st_mtime_ns}\n".encode())
    image = os.path.join(cache, f"initramfs-{kind}-{h.hexdigest()[:12]}.cpio")
    if os.path.exists(image):
        return image
    log("building the initramfs")
    stage = tempfile.mkdtemp(prefix="initramfs.", dir=cache)
    try:
        for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "proc", "sys", "dev",
                  "tmp", "run", "root", "etc", "var"):
            os.makedirs(os.path.join(stage, d), exist_ok=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            os.symlink(f"usr/{link}", os.path.join(stage, link))
        os.symlink("../run", os.path.join(stage, "var", "run"))  # DPDK's runtime files
        for g, host in sorted(files.items()):
            copy_keeping_links(stage, g, host)
        if tree:
            # As the .deb installs it: /usr/bin/uroce, /usr/lib/uroce/, ...
            for dirpath, _, names in os.walk(tree):
                for n in names:
                    src = os.path.join(dirpath, n)
                    rel = os.path.relpath(src, tree)
                    if rel == ".ok":
                        continue
                    dst = os.path.join(stage, "usr", rel)
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    if not os.path.lexists(dst):
                        shutil.copy2(src, dst, follow_symlinks=False)
        # busybox applets for what no real program provides (mount, stty, ...).
        applets = subprocess.run([files["/usr/bin/busybox"], "--list"],
                                 capture_output=True, text=True, timeout=30).stdout
        for a in applets.split():
            if a in KMOD_NAMES or a in ("busybox", "sh", "init", "linuxrc"):
                continue
            if not os.path.lexists(os.path.join(stage, "usr/bin", a)):
                os.symlink("busybox", os.path.join(stage, "usr/bin", a))
        for a in KMOD_NAMES:
            os.symlink("../bin/kmod", os.path.join(stage, "usr/sbin", a))
        os.symlink("dash", os.path.join(stage, "usr/bin/sh"))
        shutil.copytree(os.path.join(kit, "lib", "modules"),
                        os.path.join(stage, "usr/lib/modules"))
        shutil.copy2(GUEST_INIT, os.path.join(stage, "init"))
        os.chmod(os.path.join(stage, "init"), 0o755)
        etc = os.path.join(stage, "etc")
        with open(os.path.join(etc, "passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\n")
        with open(os.path.join(etc, "group"), "w") as f:
            f.write("root:x:0:\n")
        with open(os.path.join(etc, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost\n")
        with open(os.path.join(etc, "nsswitch.conf"), "w") as f:
            f.write("passwd: files\ngroup: files\nhosts: files\n")
        with open(os.path.join(etc, "ld.so.conf"), "w") as f:
            f.write("/usr/lib/x86_64-linux-gnu\n")
        run_cmd(["ldconfig", "-r", stage], "ldconfig for the initramfs", 60)
        tmp = image + ".tmp"
        listing = subprocess.run(["find", ".", "-mindepth", "1"], cwd=stage,
                                 capture_output=True, timeout=60, check=True).stdout
        with open(tmp, "wb") as out:
            # Uncompressed: TCG would spend seconds decompressing it.
            subprocess.run(["cpio", "-o", "-H", "newc", "-R", "0:0", "--quiet"],
                           cwd=stage, input=listing, stdout=out, timeout=120,
                           check=True)
        os.replace(tmp, image)
        log(f"release {release}; initramfs {os.path.getsize(image) >> 20} MiB")
    except subprocess.SubprocessError as e:
        raise HarnessError(f"building the initramfs: {e}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    # Older initramfs images of this cache are stale now.
    for old in glob.glob(os.path.join(cache, f"initramfs-{kind}-*.cpio")):
        if old != image and time.time() - os.path.getmtime(old) > 3600:
            os.unlink(old)
    return image


def prepare(kind="rxe", tarball=None, extras=()):
    """(vmlinux, initramfs), both cached."""
    need_tool("qemu-system-x86_64", "qemu-system-x86")
    cache = cache_dir()
    # One preparer at a time: tests that start together share the cache.
    with open(os.path.join(cache, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kit = prepare_kernel(cache)
        return os.path.join(kit, "vmlinux"), prepare_initramfs(cache, kit, kind, tarball, extras)


# --------------------------------------------------------------------------
# The running guest. `start` launches a supervisor process (this file's
# `_supervise`) that owns the namespace, the capture and qemu: it creates them,
# waits for qemu to end (powered off, killed, or its lifetime used up) and
# removes them again, whatever ended it. State lives in a directory:
#   config.json   what start was asked for    supervisor.pid, qemu.pid
#   console.log   the guest's ttyS0           capture.pcap  tcpdump on the tap
#   supervisor.log, supervisor.error          done          qemu's exit status
#   agent         directory of the agent's unix socket (short path: sun_path
#                 has 108 bytes, and test temp dirs are long)

def read_json(path):
    with open(path) as f:
        return json.load(f)


def supervise(state):
    cfg = read_json(os.path.join(state, "config.json"))
    ns, tap = cfg["netns"], cfg["tap"]
    procs = {}

    def on_term(signum, frame):
        raise SystemExit(f"supervisor: signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    taps, bridge = cfg.get("taps", [tap]), cfg.get("bridge")
    capture_tap = taps[-1]  # the one RoCE crosses: eth0, or DPDK's NIC
    status = "not started"
    try:
        nsrun = ["ip", "netns", "exec", ns]
        if bridge:
            # A network shared with other guests (`net-up` made it): only
            # this guest's taps are ours, plugged into the bridge.
            steps = []
            for t in taps:
                steps += [["ip", "tuntap", "add", "dev", t, "mode", "tap"],
                          ["ip", "link", "set", t, "mtu", str(cfg["mtu"]), "master", bridge,
                           "up"]]
        else:
            run_cmd(["ip", "netns", "add", ns], "creating the network namespace", 30)
            steps = [["ip", "link", "set", "lo", "up"]]
            for t in taps:
                steps.append(["ip", "tuntap", "add", "dev", t, "mode", "tap"])
            # One tap: the host's addresses on it. Two (DPDK's NIC beside
            # eth0): both on a bridge made here, which holds the addresses.
            host_if = tap if len(taps) == 1 else BRIDGE
            if len(taps) > 1:
                steps.append(["ip", "link", "add", BRIDGE, "type", "bridge"])
                for t in taps:
                    steps.append(["ip", "link", "set", t, "mtu", str(cfg["mtu"]), "master",
                                  BRIDGE, "up"])
            steps += [["ip", "link", "set", host_if, "address", HOST_MAC, "mtu",
                       str(cfg["mtu"]), "up"],
                      ["ip", "addr", "add", cfg["host_ip"], "dev", host_if],
                      ["ip", "-6", "addr", "add", cfg["host_ip6"], "dev", host_if, "nodad"]]
        for argv in steps:
            run_cmd(nsrun + argv, f"setting up {tap} in namespace {ns}", 30)
        # The capture starts before qemu so it holds the guest's first frame.
        # --immediate-mode and -U: each frame reaches the file at once, so
        # stopping tcpdump right after the guest loses none.
        cap_err = open(os.path.join(state, "tcpdump.log"), "w")
        procs["tcpdump"] = subprocess.Popen(
            nsrun + [cfg["tcpdump"], "-i", capture_tap, "--immediate-mode", "-U", "-s", "0", "-n",
                     "-w", os.path.join(state, "capture.pcap")],
            stdout=cap_err, stderr=cap_err)
        deadline = time.time() + 10
        while "listening on" not in open(os.path.join(state, "tcpdump.log")).read():
            if procs["tcpdump"].poll() is not None or time.time() > deadline:
                raise HarnessError("packet capture: tcpdump did not start: " +
                                   open(os.path.join(state, "tcpdump.log")).read())
            time.sleep(0.05)
        qemu = nsrun + ["timeout", "-k", "5", str(cfg["lifetime"])] + cfg["qemu_argv"]
        qlog = open(os.path.join(state, "qemu.log"), "w")
        procs["qemu"] = subprocess.Popen(qemu, stdout=qlog, stderr=qlog)
        with open(os.path.join(state, "qemu.pid"), "w") as f:
            f.write(f"{procs['qemu'].pid}\n")
        status = str(procs["qemu"].wait())
    except HarnessError as e:
        with open(os.path.join(state, "supervisor.error"), "w") as f:
            f.write(str(e) + "\n")
    except SystemExit as e:
        status = str(e)
    finally:
        for name in ("qemu", "tcpdump"):
            p = procs.get(name)
            if p and p.poll() is None:
                # tcpdump flushes and closes the file on SIGINT.
                p.send_signal(signal.SIGINT if name == "tcpdump" else signal.SIGTERM)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        remove_network(cfg)
        with open(os.path.join(state, "done"), "w") as f:
            f.write(status + "\n")


def remove_network(cfg):
    """Deletes the guest's taps, and the namespace unless it is a shared one
    (`net-up`'s); quiet when they are gone already."""
    ns = cfg["netns"]
    for t in cfg.get("taps", [cfg["tap"]]):
        subprocess.run(["ip", "-n", ns, "link", "del", t], capture_output=True, timeout=30)
    if not cfg.get("bridge"):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


BRIDGE = "rxebr0"


def net_up(args):
    """A network namespace with a bridge that guests started with --netns NS
    --bridge rxebr0 plug their taps into, as the VMs of one cloud subnet; the
    host's kernel has args.host_ip / host_ip6 on the bridge."""
    need_tool("ip", "iproute2")
    run_cmd(["ip", "netns", "add", args.netns], "creating the network namespace", 30)
    nsrun = ["ip", "netns", "exec", args.netns]
    try:
        for argv in (["ip", "link", "set", "lo", "up"],
                     ["ip", "link", "add", BRIDGE, "type", "bridge"],
                     ["ip", "link", "set", BRIDGE, "address", HOST_MAC, "mtu", str(args.mtu),
                      "up"],
                     ["ip", "addr", "add", args.host_ip, "dev", BRIDGE],
                     ["ip", "-6", "addr", "add", args.host_ip6, "dev", BRIDGE, "nodad"]):
            run_cmd(nsrun + argv, f"setting up {BRIDGE} in namespace {args.netns}", 30)
        # A bridge's ports forward at once (no STP learning delay).
        run_cmd(nsrun + ["ip", "link", "set", BRIDGE, "type", "bridge", "forward_delay", "0",
                         "stp_state", "0"], "bridge settings", 30)
    except HarnessError:
        subprocess.run(["ip", "netns", "del", args.netns], capture_output=True, timeout=30)
        raise
    print(f"RXE_VM_NETNS={args.netns}\nRXE_VM_BRIDGE={BRIDGE}")


def net_down(args):
    subprocess.run(["ip", "netns", "del", args.netns], capture_output=True, timeout=30)


def tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(none)\n"


def parse_extras(values):
    """--extra HOST[=GUEST] pairs; GUEST defaults to /usr/bin/<name>."""
    out = []
    for v in values or []:
        host, _, guest = v.partition("=")
        host = os.path.abspath(host)
        out.append((host, guest or f"/usr/bin/{os.path.basename(host)}"))
    return out


def start(state, args):
    """Boots a guest that keeps running; raises HarnessError on any failure."""
    vmlinux, initramfs = prepare(args.kind, args.uroce_tarball, parse_extras(args.extra))
    tcpdump = need_tool("tcpdump", "tcpdump")
    need_tool("ip", "iproute2")
    os.makedirs(state, exist_ok=True)
    for f in ("done", "supervisor.error", "console.log", "capture.pcap"):
        if os.path.exists(os.path.join(state, f)):
            os.unlink(os.path.join(state, f))
    agent_dir = tempfile.mkdtemp(prefix="uroce-rxe-")
    sock = os.path.join(agent_dir, "agent.sock")
    if args.bridge and not args.netns:
        raise HarnessError("--bridge needs --netns (the namespace `net-up` made)")
    netns = args.netns or f"uroce-rxe-{secrets.token_hex(4)}"
    tap = args.tap
    taps = [tap]
    cmdline = (f"console=ttyS0 panic=-1 {'' if args.verbose else 'quiet'} "
               f"uroce.ip4={args.guest_ip} uroce.ip6={args.guest_ip6} uroce.mtu={args.mtu} "
               f"uroce.kind={args.kind} uroce.hostname={args.hostname}")
    nic_argv = []
    if args.kind == "uroce":
        cmdline += f" uroce.nic={args.nic} uroce.hugepages={args.hugepages}"
        if args.nic == "pci":
            # The second NIC, DPDK's: its own tap (same bridge), its own
            # addresses, which the guest's kernel never sees.
            cmdline += f" uroce.dip4={args.dpdk_ip} uroce.dip6={args.dpdk_ip6}"
            if args.daemon_mac:
                cmdline += f" uroce.dmac={args.daemon_mac}"
            taps.append(tap + "d")
            nic_argv = [
                "-netdev", f"tap,id=net1,ifname={taps[1]},script=no,downscript=no",
                "-device", f"virtio-net-pci,netdev=net1,mac={args.dpdk_mac},romfile=,"
                           "addr=0x5",
            ]
    # DPDK needs more than TCG's default CPU model (qemu64) offers (see
    # --cpu); "max" is every feature TCG emulates.
    cpu = args.cpu or ("max" if args.kind == "uroce" else None)
    cpu_argv = ["-cpu", cpu] if cpu else []
    qemu_argv = [
        "qemu-system-x86_64", "-accel", "tcg", "-M", "pc", "-m", str(args.memory),
        "-smp", str(args.smp), "-nodefaults", "-no-user-config", "-display", "none",
        "-no-reboot", *cpu_argv,
        "-kernel", vmlinux, "-initrd", initramfs, "-append", cmdline,
        "-chardev", f"file,id=console,path={os.path.join(state, 'console.log')}",
        "-serial", "chardev:console",
        "-chardev", f"socket,id=agent,path={sock},server=on,wait=off",
        "-serial", "chardev:agent",
        "-netdev", f"tap,id=net0,ifname={tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=net0,mac={args.guest_mac},romfile=,addr=0x4",
        *nic_argv,
    ]
    cfg = {
        "netns": netns, "tap": tap, "taps": taps, "bridge": args.bridge,
        "mtu": args.mtu, "tcpdump": tcpdump,
        "host_ip": args.host_ip, "host_ip6": args.host_ip6,
        "guest_ip": args.guest_ip, "guest_ip6": args.guest_ip6,
        "guest_mac": args.guest_mac, "host_mac": HOST_MAC,
        "lifetime": args.lifetime, "agent_dir": agent_dir, "agent": sock,
        "qemu_argv": qemu_argv,
    }
    with open(os.path.join(state, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    slog = open(os.path.join(state, "supervisor.log"), "w")
    sup = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_supervise",
                            "--state", state], stdin=subprocess.DEVNULL, stdout=slog,
                           stderr=slog, start_new_session=True)
    with open(os.path.join(state, "supervisor.pid"), "w") as f:
        f.write(f"{sup.pid}\n")

    # Wait for the guest's "UROCE-READY" (or "UROCE-FAILED <step>").
    console = os.path.join(state, "console.log")
    deadline = time.time() + args.boot_timeout
    t0 = time.time()
    while True:
        text = open(console, errors="replace").read() if os.path.exists(console) else ""
        if "UROCE-READY" in text:
            break
        if "UROCE-FAILED " in text:
            # Let the guest finish printing its kernel log and power off.
            sup_deadline = time.time() + 10
            while not os.path.exists(os.path.join(state, "done")) and \
                    time.time() < sup_deadline:
                time.sleep(0.1)
            # Read the step again now: the first read may have caught its
            # line half written.
            text = open(console, errors="replace").read()
            m = re.search(r"UROCE-FAILED (.*)", text)
            raise HarnessError(f"guest set-up failed at: {m.group(1)}\n"
                               f"--- guest console ---\n{tail(console)}")
        if os.path.exists(os.path.join(state, "supervisor.error")):
            raise HarnessError(open(os.path.join(state, "supervisor.error")).read())
        if os.path.exists(os.path.join(state, "done")) or sup.poll() is not None:
            raise HarnessError(
                "qemu exited before the guest was ready\n"
                f"--- qemu ---\n{tail(os.path.join(state, 'qemu.log'))}"
                f"--- supervisor ---\n{tail(os.path.join(state, 'supervisor.log'))}"
                f"--- guest console ---\n{tail(console)}")
        if time.time() > deadline:
            raise HarnessError(f"the guest was not ready within {args.boot_timeout} s\n"
                               f"--- guest console ---\n{tail(console)}")
        time.sleep(0.1)
    log(f"guest ready in {time.time() - t0:.1f} s (namespace {netns}, tap {tap})")
    env = {
        "RXE_VM_STATE": os.path.abspath(state), "RXE_VM_NETNS": netns,
        "RXE_VM_TAP": tap, "RXE_VM_HOST_MAC": HOST_MAC, "RXE_VM_GUEST_MAC": args.guest_mac,
        "RXE_VM_HOST_IP": args.host_ip.split("/")[0],
        "RXE_VM_HOST_IP6": args.host_ip6.split("/")[0],
        "RXE_VM_GUEST_IP": args.guest_ip.split("/")[0],
        "RXE_VM_GUEST_IP6": args.guest_ip6.split("/")[0],
        "RXE_VM_CAPTURE": os.path.join(os.path.abspath(state), "capture.pcap"),
    }
    with open(os.path.join(state, "env"), "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in env.items())
    return env


def guest_exec(state, script, timeout):
    """Runs a shell script (dash) in the guest; returns (output bytes, status)."""
    cfg = read_json(os.path.join(state, "config.json"))
    if os.path.exists(os.path.join(state, "done")):
        raise HarnessError("the guest is not running (it powered off or was stopped)")
    token = "@@uroce-" + secrets.token_hex(8)
    request = (f"RUN {token} {int(timeout)} "
               f"{base64.b64encode(script.encode()).decode()}\n").encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The guest kills the command at `timeout`; the margin covers the serial port.
    s.settimeout(timeout + 30)
    try:
        s.connect(cfg["agent"])
        s.sendall(request)
        buf = b""
        begin, end = f"{token} BEGIN\n".encode(), re.compile(
            re.escape(f"\n{token} END ").encode() + rb"(\d+)\n")
        while True:
            chunk = s.recv(65536)
            if not chunk:
                raise HarnessError("the guest agent closed the connection "
                                   "(did the guest power off?)")
            buf += chunk
            m = end.search(buf)
            if m and begin in buf:
                out = buf[buf.index(begin) + len(begin):m.start()]
                return out, int(m.group(1))
    except socket.timeout:
        raise HarnessError(f"the guest agent did not answer within {timeout + 30} s")
    except OSError as e:
        raise HarnessError(f"cannot reach the guest agent at {cfg['agent']}: {e}")
    finally:
        s.close()


JOB_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def guest_spawn(state, job, script, timeout):
    """Starts a script in the guest in the background; its output and status go to
    /tmp/jobs/<job>.{out,rc} in the guest, for guest_wait."""
    if not JOB_NAME.match(job):
        raise HarnessError(f"job name '{job}': letters, digits, '_', '.', '-' only")
    encoded = base64.b64encode(script.encode()).decode()
    wrapper = (f"rm -f /tmp/jobs/{job}.rc /tmp/jobs/{job}.out\n"
               f"echo {encoded} | base64 -d > /tmp/jobs/{job}.sh\n"
               f"( timeout -k 2 {int(timeout)} stdbuf -oL -eL dash /tmp/jobs/{job}.sh "
               f"> /tmp/jobs/{job}.out 2>&1 < /dev/null; echo $? > /tmp/jobs/{job}.rc.tmp; "
               f"mv /tmp/jobs/{job}.rc.tmp /tmp/jobs/{job}.rc ) > /dev/null 2>&1 &\n")
    out, rc = guest_exec(state, wrapper, 30)
    if rc != 0:
        raise HarnessError(f"spawning job {job} in the guest failed ({rc}): {out!r}")


def guest_wait(state, job, timeout):
    """(output, status) of a spawned job once it ends; status 124 if it did not
    end within `timeout` seconds (the job keeps running then)."""
    script = (f"i=0; while [ ! -e /tmp/jobs/{job}.rc ]; do\n"
              f"  [ -e /tmp/jobs/{job}.sh ] || {{ echo 'no job named {job}'; exit 127; }}\n"
              f"  sleep 0.1; done\n"
              f"cat /tmp/jobs/{job}.out; exit $(cat /tmp/jobs/{job}.rc)\n")
    return guest_exec(state, script, timeout)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop(state, save_to=None, label="rxe_vm"):
    """Powers the guest off (or kills it), waits for the supervisor's clean-up,
    and copies the console log and the capture to save_to when given."""
    cfg_path = os.path.join(state, "config.json")
    if not os.path.exists(cfg_path):
        return
    cfg = read_json(cfg_path)
    done = os.path.join(state, "done")

    def wait_done(seconds):
        deadline = time.time() + seconds
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.1)
        return os.path.exists(done)

    if not os.path.exists(done):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(cfg["agent"])
            s.sendall(b"POWEROFF\n")
            # Stay connected until qemu ends: qemu drops what a client sent but
            # the guest had not read yet once the client hangs up.
            s.settimeout(15)
            while s.recv(4096):
                pass
        except OSError:
            pass
        finally:
            s.close()
        if not wait_done(15):
            # The guest did not power off: the supervisor kills qemu and cleans up.
            sup = int(open(os.path.join(state, "supervisor.pid")).read())
            if pid_alive(sup):
                os.kill(sup, signal.SIGTERM)
            if not wait_done(15) and pid_alive(sup):
                os.killpg(sup, signal.SIGKILL)
    # Whatever happened above, leave nothing behind.
    try:
        qpid = int(open(os.path.join(state, "qemu.pid")).read())
        if pid_alive(qpid):
            os.kill(qpid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    remove_network(cfg)
    shutil.rmtree(cfg["agent_dir"], ignore_errors=True)
    if save_to:
        os.makedirs(save_to, exist_ok=True)
        for f, suffix in (("capture.pcap", ".pcap"), ("console.log", ".console.log")):
            if os.path.exists(os.path.join(state, f)):
                shutil.copy2(os.path.join(state, f), os.path.join(save_to, label + suffix))
        log(f"saved {label}.pcap and {label}.console.log in {save_to}")


# --------------------------------------------------------------------------
# Command line.

def add_net_args(p):
    p.add_argument("--guest-ip", default="10.77.0.2/24", help="guest eth0 IPv4/prefix")
    p.add_argument("--guest-ip6", default="fd77::2/64", help="guest eth0 IPv6/prefix")
    p.add_argument("--host-ip", default="10.77.0.1/24",
                   help="the tap's IPv4/prefix in the namespace (host kernel side)")
    p.add_argument("--host-ip6", default="fd77::1/64", help="the tap's IPv6/prefix")
    p.add_argument("--guest-mac", default=GUEST_MAC)
    p.add_argument("--mtu", type=int, default=1500, help="MTU of eth0 and the tap")
    p.add_argument("--netns", help="namespace name (default: uroce-rxe-<random>); with "
                   "--bridge, the one `net-up` made")
    p.add_argument("--bridge", help="plug the taps into this bridge of --netns (made by "
                   "`net-up`) instead of a namespace of the guest's own")
    p.add_argument("--tap", default=TAP, help="the tap's name (unique per namespace)")
    p.add_argument("--kind", choices=("rxe", "uroce"), default="rxe",
                   help="rxe: kernel Soft-RoCE on eth0 (default); uroce: `uroce daemon` "
                        "serving uroce0")
    p.add_argument("--nic", choices=("pci", "kernel"), default="pci",
                   help="uroce guest: pci = DPDK's net_virtio on a second virtio NIC "
                        "(uio_pci_generic, hugepages); kernel = port kernel:eth0 "
                        "(net_af_xdp, else net_af_packet), shared with the guest kernel")
    p.add_argument("--dpdk-ip", default="10.77.0.12", help="uroce's IPv4 on the DPDK NIC")
    p.add_argument("--dpdk-ip6", default="fd77::12", help="uroce's IPv6 on the DPDK NIC")
    p.add_argument("--dpdk-mac", default="52:54:00:77:01:02", help="the DPDK NIC's MAC")
    p.add_argument("--daemon-mac", metavar="MAC",
                   help="uroce guest, pci mode: the daemon's `mac =` for the DPDK NIC "
                        "(default: port, the NIC's own); another address must be given "
                        "to the NIC, which filters unicast")
    p.add_argument("--hugepages", type=int, default=192,
                   help="uroce guest: 2 MiB pages reserved (pci mode)")
    p.add_argument("--uroce-tarball", help="uroce guest: the release tarball "
                   "(bazel build //tools:uroce_tarball)")
    p.add_argument("--extra", action="append", metavar="HOST[=GUEST]",
                   help="another program for the guest (default place /usr/bin/NAME)")
    p.add_argument("--smp", type=int, default=1, help="guest CPUs")
    p.add_argument("--cpu", help="qemu's -cpu model (default: qemu's own for rxe, max "
                   "for uroce: Debian's DPDK stops at start-up on qemu64, which lacks "
                   "SSE4.2)")
    p.add_argument("--hostname", default="vm", help="the guest's host name (Open MPI "
                   "tells nodes apart by it)")
    p.add_argument("--memory", type=int, default=0,
                   help="guest memory, MiB (default 512; 1536 for --kind uroce)")
    p.add_argument("--boot-timeout", type=int, default=120,
                   help="seconds until the guest must be ready")
    p.add_argument("--lifetime", type=int, default=1800,
                   help="seconds after which qemu is killed whatever happens")
    p.add_argument("--verbose", action="store_true", help="full kernel log on console")


def script_of(words):
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise HarnessError("no guest command given (after --)")
    return " ".join(words)


def emit(out):
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="boot, run a command, power off")
    add_net_args(p)
    p.add_argument("--timeout", type=int, default=120, help="command time limit, s")
    p.add_argument("--artifacts", default=os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR"),
                   help="where the capture and console log go "
                        "(default: $TEST_UNDECLARED_OUTPUTS_DIR)")
    p.add_argument("--save", choices=("failure", "always", "never"), default="failure",
                   help="when to copy them there: when the command or the harness "
                        "failed (default), always, or never")
    p.add_argument("--label", default="rxe_vm", help="file name stem of the artifacts")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("start", help="boot a guest that keeps running")
    add_net_args(p)
    p.add_argument("--state", required=True, help="state directory of this guest")
    for name, hlp in (("exec", "run a command in a started guest"),
                      ("spawn", "start a background job in a started guest")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("--state", required=True)
        p.add_argument("--timeout", type=int, default=120, help="time limit, s")
        if name == "spawn":
            p.add_argument("--job", required=True, help="job name, for wait")
        p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("wait", help="wait for a spawned job")
    p.add_argument("--state", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--timeout", type=int, default=120)
    p = sub.add_parser("stop", help="power off a started guest, clean up")
    p.add_argument("--state", required=True)
    p.add_argument("--save-to", help="copy the capture and console log here")
    p.add_argument("--label", default="rxe_vm", help="file name stem of the copies")
    p = sub.add_parser("prepare", help="fetch the kernel and build the initramfs only")
    p.add_argument("--kind", choices=("rxe", "uroce"), default="rxe")
    p.add_argument("--uroce-tarball")
    p.add_argument("--extra", action="append", metavar="HOST[=GUEST]")
    for name, hlp in (("net-up", "make a namespace with a bridge for several guests"),
                      ("net-down", "remove net-up's namespace")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("--netns", required=True)
        p.add_argument("--host-ip", default="10.77.0.1/24")
        p.add_argument("--host-ip6", default="fd77::1/64")
        p.add_argument("--mtu", type=int, default=1500)
    p = sub.add_parser("_supervise", help=argparse.SUPPRESS)
    p.add_argument("--state", required=True)
    args = ap.parse_args(argv)

    if args.cmd != "_supervise" and os.geteuid() != 0:
        print("rxe_vm: FAILED: needs root (network namespaces, tap devices)",
              file=sys.stderr)
        return HARNESS_ERROR
    # Signals end the program through the finally clauses (clean-up).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    try:
        if args.cmd == "_supervise":
            supervise(args.state)
            return 0
        if args.cmd in ("run", "start") and not args.memory:
            args.memory = 1536 if args.kind == "uroce" else 512
        if args.cmd == "net-up":
            net_up(args)
            return 0
        if args.cmd == "net-down":
            net_down(args)
            return 0
        if args.cmd == "prepare":
            vmlinux, initramfs = prepare(args.kind, args.uroce_tarball,
                                         parse_extras(args.extra))
            print(f"kernel {vmlinux}\ninitramfs {initramfs}")
            return 0
        if args.cmd == "run":
            script = script_of(args.command)
            state = tempfile.mkdtemp(prefix="uroce-rxe-vm.")
            ok = False
            try:
                start(state, args)
                out, rc = guest_exec(state, script, args.timeout)
                emit(out)
                ok = rc == 0
                return rc
            finally:
                keep = args.save == "always" or (args.save == "failure" and not ok)
                stop(state, args.artifacts if keep else None, args.label)
                shutil.rmtree(state, ignore_errors=True)
        if args.cmd == "start":
            try:
                env = start(args.state, args)
            except BaseException:
                stop(args.state)
                raise
            for k, v in env.items():
                print(f"{k}={v}")
            return 0
        if args.cmd == "exec":
            out, rc = guest_exec(args.state, script_of(args.command), args.timeout)
            emit(out)
            return rc
        if args.cmd == "spawn":
            guest_spawn(args.state, args.job, script_of(args.command), args.timeout)
            return 0
        if args.cmd == "wait":
            out, rc = guest_wait(args.state, args.job, args.timeout)
            emit(out)
            return rc
        if args.cmd == "stop":
            stop(args.state, args.save_to, args.label)
            return 0
    except HarnessError as e:
        print(f"rxe_vm: FAILED: {e}", file=sys.stderr)
        return HARNESS_ERROR
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
