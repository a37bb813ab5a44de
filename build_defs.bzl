"""Shared compiler options and rule wrappers for uroce's own code.

One place for warnings and DPDK's flags, the way abseil keeps its copts in one
.bzl file. Warnings are errors for our code only: system headers come in through
-isystem (see //third_party:system_library.bzl) and never trip -Werror.
"""

load("@dpdk//:flags.bzl", DPDK_COMPILE_FLAGS = "COMPILE_FLAGS")

UROCE_WARNINGS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wshadow",
    "-Wnon-virtual-dtor",
    "-Wno-unused-parameter",
]

# C++17, plus the flags `pkg-config libdpdk` gives (include paths as -isystem,
# -include rte_config.h, -march). DPDK's inline fast-path headers need them.
UROCE_COPTS = ["-std=c++17"] + UROCE_WARNINGS + DPDK_COMPILE_FLAGS
UROCE_C_COPTS = UROCE_WARNINGS + DPDK_COMPILE_FLAGS

def uroce_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = UROCE_COPTS + copts, **kwargs)

def uroce_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = UROCE_COPTS + copts, **kwargs)

def uroce_cc_test(name, copts = [], deps = [], tags = [], **kwargs):
    """A GoogleTest test (gtest_main unless the test has its own main)."""
    native.cc_test(
        name = name,
        copts = UROCE_COPTS + copts,
        deps = deps + ["@gtest_main"],
        tags = tags,
        **kwargs
    )

def uroce_cc_benchmark(name, copts = [], deps = [], **kwargs):
    """A Google Benchmark binary; run it with `bazel run`, never as a test."""
    native.cc_binary(
        name = name,
        copts = UROCE_COPTS + copts,
        deps = deps + ["@benchmark_main"],
        **kwargs
    )

def uroce_cc_fuzz(name, srcs, deps = [], corpus = [], copts = [], **kwargs):
    """A libFuzzer target (LLVMFuzzerTestOneInput).

    With `--config=fuzz` (clang, -fsanitize=fuzzer) `name` is a libFuzzer
    binary. Otherwise it links a small replay driver instead, and `name_replay`
    is a test that feeds it every file of `corpus`, so fuzz targets build and
    run on every CI run and cannot rot.
    """
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = UROCE_COPTS + copts,
        deps = deps + select({
            "//:fuzzing": [],
            "//conditions:default": ["//common:fuzz_replay_main"],
        }),
        linkopts = select({
            "//:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        **kwargs
    )
    native.sh_test(
        name = name + "_replay",
        srcs = ["//common:fuzz_replay_test.sh"],
        args = ["$(location :%s)" % name] + ["$(locations %s)" % c for c in corpus],
        data = [":" + name] + corpus,
    )
