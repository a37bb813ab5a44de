// The subcommands of the `uroce` tool. Each lives in its own file and is
// listed once in uroce_main.cc.
#pragma once

#include <cstdio>

namespace uroce::tools {

// Each returns the process exit code. argv[0] is the subcommand's name.
int DemoCommand(int argc, char** argv);
int SoakCommand(int argc, char** argv);
int DumpCommand(int argc, char** argv);  // tools/dump.cc
int PerfCommand(int argc, char** argv);  // tools/perf.cc
int FloorCommand(int argc, char** argv);  // tools/floor.cc
int StatsCommand(int argc, char** argv); // tools/stats.cc
int ExecCommand(int argc, char** argv);  // tools/exec.cc
int DaemonCommand(int argc, char** argv);  // tools/daemon.cc
int CdiCommand(int argc, char** argv);  // tools/cdi.cc

// Each command's usage and options, to `out`: returns 0 for stdout (asked
// for: uroce help COMMAND), 2 otherwise (a bad command line).
int DemoUsage(FILE* out);
int SoakUsage(FILE* out);
int DumpUsage(FILE* out);
int PerfUsage(FILE* out);
int FloorUsage(FILE* out);
int StatsUsage(FILE* out);
int ExecUsage(FILE* out);
int DaemonUsage(FILE* out);
int CdiUsage(FILE* out);

}  // namespace uroce::tools
