// `uroce`: one command for uroce's tools. `uroce help` lists them, `uroce
// help COMMAND` shows one with examples, and `uroce help --man` writes the
// same texts as the uroce(1) man page (the install's, tools/BUILD).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/command.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);
  int (*usage)(FILE* out);
  const char* summary;
  // Lines of shell, each run as it stands from the source tree (configs/...)
  // or, installed, from PREFIX/share/uroce (tools/install).
  const char* examples;
};

constexpr Subcommand kSubcommands[] = {
    {"exec", uroce::tools::ExecCommand, uroce::tools::ExecUsage,
     "run an unmodified verbs, rdma_cm or libfabric program over uroce",
     "# two processes on one host over a memif pair, started in any order:\n"
     "uroce exec --config configs/pair-a.ini -- ibv_rc_pingpong -g 0 &\n"
     "uroce exec --config configs/pair-b.ini -- ibv_rc_pingpong -g 0 127.0.0.1\n"
     "# the same with libfabric (FI_EP_RDM through ofi_rxm):\n"
     "uroce exec --config configs/pair-a.ini -- fi_pingpong -p 'uroce;ofi_rxm' -e rdm &\n"
     "uroce exec --config configs/pair-b.ini -- fi_pingpong -p 'uroce;ofi_rxm' -e rdm 127.0.0.1\n"
     "# the same under network faults from a seed (README, \"Fault injection\"):\n"
     "uroce exec --config configs/pair-a.ini --impair loss=0.02,reorder=0.01,seed=7 -- ibv_rc_pingpong -g 0 -c &\n"
     "uroce exec --config configs/pair-b.ini --impair loss=0.02,reorder=0.01,seed=7 -- ibv_rc_pingpong -g 0 -c 127.0.0.1\n"
     "# attached to the host's running uroce daemon (no configuration):\n"
     "uroce exec -- ibv_devinfo\n"},
    {"daemon", uroce::tools::DaemonCommand, uroce::tools::DaemonUsage,
     "the host's uroce device, shared by every process: daemon --config FILE",
     "# the machine's NIC, shared with the kernel (root):\n"
     "uroce daemon --config configs/daemon-kernel.ini &\n"
     "uroce exec -- ibv_devinfo\n"
     "uroce stats --daemon\n"},
    {"cdi", uroce::tools::CdiCommand, uroce::tools::CdiUsage,
     "hand the host's daemon to containers: a CDI spec, device uroce.dev/rdma=uroce0",
     "# as root, with the daemon running; then any container may be given the device:\n"
     "uroce cdi\n"
     "podman run --rm --cap-drop=all --device uroce.dev/rdma=uroce0 IMAGE ibv_devices\n"
     "# the spec to stdout, for a daemon on another socket:\n"
     "uroce cdi --output - --socket /run/uroce-ci/uroce.sock\n"
     "# for the rootless containers of user alice (root's daemon):\n"
     "uroce cdi --rootless --name uroce0-rootless --output /etc/cdi/uroce-rootless.json\n"
     "setfacl -m u:alice:rw /run/uroce/uroce.sock\n"},
    {"perf", uroce::tools::PerfCommand, uroce::tools::PerfUsage,
     "latency, bandwidth and message rate per RDMA operation (like perftest)",
     "uroce perf --port ring --test all --size 64,65536 --verify\n"
     "uroce perf --port memif --role server &\n"
     "uroce perf --port memif --role client --test send_lat,write_bw --csv\n"},
    {"floor", uroce::tools::FloorCommand, uroce::tools::FloorUsage,
     "raw frames bounced and streamed over perf's port, no transport: the medium's floor",
     "uroce floor --role server &\n"
     "uroce floor --role client --size 64\n"},
    {"stats", uroce::tools::StatsCommand, uroce::tools::StatsUsage,
     "counters of a running uroce process, from DPDK telemetry",
     "uroce stats --pid \"$(pgrep -n ibv_rc_pingpong)\"\n"
     "uroce stats --file-prefix my-prefix --json\n"
     "uroce stats --daemon\n"},
    {"dump", uroce::tools::DumpCommand, uroce::tools::DumpUsage,
     "decode the RoCEv2 frames of a pcap file and check their ICRC",
     "tcpdump -i eth0 -w roce.pcap udp port 4791\n"
     "uroce dump roce.pcap\n"
     "uroce dump --json roce.pcap | tail -n 1\n"},
    {"demo", uroce::tools::DemoCommand, uroce::tools::DemoUsage,
     "two endpoints exchange traffic over DPDK virtual devices",
     "uroce demo\n"
     "uroce demo --iterations 1000\n"},
    {"soak", uroce::tools::SoakCommand, uroce::tools::SoakUsage,
     "randomized RDMA workload over a lossy in-memory link, all checked",
     "uroce soak --loss 0.02 --reorder 0.01 --seed 7 --messages 5000\n"
     "uroce soak --port ring --ops send,write,read,atomic\n"},
};

int Usage(FILE* out) {
  std::fprintf(out, "usage: uroce COMMAND [ARGS...]\n\ncommands:\n");
  for (const Subcommand& c : kSubcommands) std::fprintf(out, "  %-8s %s\n", c.name, c.summary);
  std::fprintf(out, "  %-8s %s\n", "help", "this text; help COMMAND: one command, with examples");
  return out == stdout ? 0 : 2;
}

int Help(const Subcommand& c) {
  c.usage(stdout);
  std::printf("\nexamples:\n");
  std::string line;
  for (const char* p = c.examples; *p != '\0'; ++p) {
    if (*p != '\n') {
      line += *p;
      continue;
    }
    std::printf("  %s\n", line.c_str());
    line.clear();
  }
  return 0;
}

// troff wants a backslash doubled and a line that starts with '.' or '\''
// escaped.
std::string Roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\') {
      out += "\\e";
    } else if (ch == '-') {
      out += "\\-";
    } else {
      out += ch;
    }
    line_start = ch == '\n';
  }
  return out;
}

// The usage text of a command, as printed.
std::string UsageText(const Subcommand& c) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* memory = open_memstream(&buffer, &size);
  if (memory == nullptr) return "";
  c.usage(memory);
  std::fclose(memory);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

// uroce(1), from the same texts as `uroce help COMMAND`.
int Man() {
  std::printf(".TH UROCE 1 \"\" \"uroce\" \"User Commands\"\n");
  std::printf(".SH NAME\nuroce \\- RoCEv2 in software, in user space: tools and the launcher of RDMA programs\n");
  std::printf(".SH SYNOPSIS\n.B uroce\n.I COMMAND\n[\\fIARGS\\fR...]\n");
  std::printf(".SH DESCRIPTION\n"
              "uroce does what an RDMA NIC does (RoCEv2: segmentation, PSNs, ACKs, retransmission, "
              "placement into registered memory, READ and atomics) in a poll-mode engine on DPDK ports. "
              "Unmodified verbs, rdma_cm and libfabric programs run over it through\n"
              ".B uroce exec\n"
              "(uroce's libibverbs.so.1, librdmacm.so.1 and libfabric provider \\fBuroce\\fR). "
              "Configurations (INI files) name each device's port and addresses; "
              "installed ones are in PREFIX/share/uroce/configs.\n");
  std::printf(".SH COMMANDS\n");
  for (const Subcommand& c : kSubcommands) {
    std::printf(".SS %s\n%s.\n.PP\n.nf\n%s.fi\n", c.name, Roff(c.summary).c_str(), Roff(UsageText(c)).c_str());
    std::printf(".PP\nExamples:\n.PP\n.RS\n.nf\n%s.fi\n.RE\n", Roff(c.examples).c_str());
  }
  std::printf(".SH ENVIRONMENT\n.TP\n.B UROCE_CONFIG\nthe configuration a program's devices come from "
              "(uroce exec \\-\\-config sets it)\n.TP\n.B UROCE_DAEMON\nthe daemon's control socket "
              "(default /run/uroce/uroce.sock)\n.TP\n.B UROCE_DAEMON_UID\na uid, besides root and the "
              "program's own, whose daemon is accepted\n.TP\n.B UROCE_PAIR\nchooses the memif socket of a "
              "port that names none, so that two pairs on one host never meet\n");
  std::printf(".SH SEE ALSO\n.BR ibv_devinfo (1),\n.BR ibv_rc_pingpong (1),\n.BR fi_pingpong (1),\n"
              ".BR rping (1)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  if (!std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    if (argc < 3) return Usage(stdout);
    if (!std::strcmp(argv[2], "--man")) return Man();
    for (const Subcommand& c : kSubcommands) {
      if (!std::strcmp(argv[2], c.name)) return Help(c);
    }
    std::fprintf(stderr, "uroce help: unknown command '%s'\n", argv[2]);
    return Usage(stderr);
  }
  for (const Subcommand& c : kSubcommands) {
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "uroce: unknown command '%s'\n", argv[1]);
  return Usage(stderr);
}
