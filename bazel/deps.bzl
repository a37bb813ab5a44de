"""The repositories uroce's build needs, for uroce's own WORKSPACE and for a
workspace that uses uroce (bazel/defs.bzl's uroce_test):

    local_repository(name = "uroce", path = "/path/to/uroce")
    load("@uroce//bazel:deps.bzl", "uroce_dependencies")
    uroce_dependencies()

Nothing is downloaded: every one is a Debian package on the machine
(uroce's tools/setup installs them) or a directory of uroce's.
"""

load("//third_party:system_library.bzl", "pkg_config_library", "system_library")

def _uroce_directory_impl(rctx):
    # A directory of uroce's own (third_party/NAME) as a repository of its
    # own, wherever uroce itself was checked out.
    third_party = rctx.path(Label("//third_party:BUILD")).dirname
    source = third_party.get_child(rctx.attr.directory)
    for entry in source.readdir():
        rctx.symlink(entry, entry.basename)

_uroce_directory = repository_rule(
    implementation = _uroce_directory_impl,
    attrs = {"directory": attr.string(mandatory = True)},
    local = True,
)

def uroce_dependencies():
    """Everything for a workspace beside uroce: Debian bazel-bootstrap's
    stand-ins (rules_java, rules_cc, remote_coverage_tools, which it would
    otherwise fetch) and the system libraries."""
    native.local_repository(
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
    _uroce_directory(name = "rules_cc", directory = "rules_cc")
    _uroce_directory(name = "remote_coverage_tools", directory = "remote_coverage_tools")
    uroce_system_libraries()

def uroce_system_libraries():
    """DPDK, libpcap, Open MPI, libbpf, nlohmann-json, GoogleTest, Google
    Benchmark and rdma-core's and libfabric's headers, from the machine's
    packages."""

    # DPDK's compiler and linker flags come from `pkg-config libdpdk` when Bazel
    # configures the workspace; nothing is copied by hand.
    pkg_config_library(
        name = "dpdk",
        package = "libdpdk",
    )

    pkg_config_library(
        name = "libpcap",
        package = "libpcap",
    )

    # Open MPI (Debian's libopenmpi-dev), for the MPI program of the libfabric
    # tests (tests/mpi_pingpong.c). Its headers live under
    # /usr/include/x86_64-linux-gnu/mpi (an alternatives link); the program adds
    # that directory as -isystem.
    system_library(
        name = "openmpi",
        linkopts = ["-lmpi"],
        probe_header = "x86_64-linux-gnu/mpi/mpi.h",
    )

    # libbpf (Debian's libbpf-dev): the daemon recognizes and detaches an XDP
    # program a daemon that died left on its interface (host/kernel_uplink.cc).
    # Its headers also serve the XDP program itself (xdp/).
    system_library(
        name = "libbpf",
        linkopts = ["-lbpf"],
        probe_header = "bpf/libbpf.h",
    )

    # nlohmann-json (Debian's nlohmann-json3-dev), header-only: `uroce stats`
    # parses the answers of DPDK's telemetry socket with it (tools/stats.cc).
    system_library(
        name = "nlohmann_json",
        probe_header = "nlohmann/json.hpp",
    )

    system_library(
        name = "gtest",
        linkopts = ["-lgtest", "-lpthread"],
        probe_header = "gtest/gtest.h",
    )

    system_library(
        name = "gtest_main",
        linkopts = ["-lgtest_main", "-lgtest", "-lpthread"],
        probe_header = "gtest/gtest.h",
    )

    system_library(
        name = "gmock",
        linkopts = ["-lgmock", "-lgtest", "-lpthread"],
        probe_header = "gmock/gmock.h",
    )

    system_library(
        name = "benchmark",
        linkopts = ["-lbenchmark", "-lpthread"],
        probe_header = "benchmark/benchmark.h",
    )

    system_library(
        name = "benchmark_main",
        linkopts = ["-lbenchmark_main", "-lbenchmark", "-lpthread"],
        probe_header = "benchmark/benchmark.h",
    )

    # rdma-core's headers (struct ibv_wc, struct ibv_send_wr, ...). uroce uses the
    # types; it never links the system libibverbs into the engine.
    system_library(
        name = "ibverbs_headers",
        probe_header = "infiniband/verbs.h",
    )

    system_library(
        name = "rdmacm_headers",
        probe_header = "rdma/rdma_cma.h",
    )

    system_library(
        name = "libfabric_headers",
        probe_header = "rdma/fabric.h",
    )
