// uroce's XDP program (xdp/uroce_steer.bpf.c), compiled by Bazel with
// clang's BPF target and carried inside the binary, so the daemon needs no
// file at run time.
#pragma once

#include <string_view>

namespace uroce::xdp {

// The program's name as the kernel reports it (bpftool, `ip link`): the
// daemon recognizes a program a daemon that died left attached by it.
constexpr const char* kSteerProgramName = "uroce_steer";

// The ELF object (BTF included) that DPDK's af_xdp driver loads with libbpf.
std::string_view SteerProgramObject();

}  // namespace uroce::xdp
