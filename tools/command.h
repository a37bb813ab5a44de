// The subcommands of the `uroce` tool. Each lives in its own file and is
// listed once in uroce_main.cc.
#pragma once

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

}  // namespace uroce::tools
