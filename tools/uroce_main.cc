// `uroce`: one command for uroce's tools. `uroce help` lists them.
#include <cstdio>
#include <cstring>

#include "tools/command.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"demo", uroce::tools::DemoCommand, "two endpoints exchange traffic over DPDK virtual devices"},
    {"soak", uroce::tools::SoakCommand, "randomized RDMA workload over a lossy in-memory link, all checked"},
    {"dump", uroce::tools::DumpCommand, "decode the RoCEv2 frames of a pcap file and check their ICRC"},
    {"perf", uroce::tools::PerfCommand, "latency, bandwidth and message rate per RDMA operation (like perftest)"},
    {"floor", uroce::tools::FloorCommand, "raw frames bounced and streamed over perf's port, no transport: the medium's floor"},
    {"stats", uroce::tools::StatsCommand, "counters of a running uroce process, from DPDK telemetry"},
    {"daemon", uroce::tools::DaemonCommand, "the host's uroce device, shared by every process: daemon --config FILE"},
    {"exec", uroce::tools::ExecCommand, "run an unmodified verbs program over uroce: exec [--config FILE] [--impair SPEC] -- PROGRAM ..."},
};

int Usage(FILE* out) {
  std::fprintf(out, "usage: uroce COMMAND [ARGS...]\n\ncommands:\n");
  for (const Subcommand& c : kSubcommands) std::fprintf(out, "  %-8s %s\n", c.name, c.summary);
  std::fprintf(out, "  %-8s %s\n", "help", "this text");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  if (!std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    return Usage(stdout);
  }
  for (const Subcommand& c : kSubcommands) {
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "uroce: unknown command '%s'\n", argv[1]);
  return Usage(stderr);
}
