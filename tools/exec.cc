// `uroce exec [--config FILE] -- PROGRAM [ARGS...]`: runs an unmodified
// verbs program over uroce. It puts the directory of uroce's
// libibverbs.so.1 first in LD_LIBRARY_PATH (so the program's libibverbs.so.1
// dependency, Debian's rdma-core one, resolves to uroce's) and names the
// configuration in UROCE_CONFIG, then execs the program: its exit status,
// signals and stdio are the program's own.
//
// The library is found, in order: $UROCE_VERBS_LIB_DIR; beside this binary
// in Bazel's output tree (bazel-bin/tools/uroce -> bazel-bin/api/verbs); in
// this binary's runfiles (bazel run / bazel test).
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/command.h"

namespace uroce::tools {
namespace {

bool HasLibrary(const std::string& dir) { return access((dir + "/libibverbs.so.1").c_str(), R_OK) == 0; }

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

std::string FindLibraryDir() {
  if (const char* env = getenv("UROCE_VERBS_LIB_DIR"); env != nullptr && *env != '\0') {
    return HasLibrary(env) ? Absolute(env) : "";
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  const std::string exe = self;
  const std::string dir = exe.substr(0, exe.rfind('/'));
  for (const std::string& candidate :
       {dir + "/../api/verbs", exe + ".runfiles/uroce/api/verbs", dir + "/uroce.runfiles/uroce/api/verbs"}) {
    if (HasLibrary(candidate)) return Absolute(candidate);
  }
  if (const char* rf = getenv("RUNFILES_DIR"); rf != nullptr && HasLibrary(std::string(rf) + "/uroce/api/verbs")) {
    return Absolute(std::string(rf) + "/uroce/api/verbs");
  }
  return "";
}

int Usage() {
  std::fprintf(stderr,
               "usage: uroce exec [--config FILE] -- PROGRAM [ARGS...]\n"
               "  runs PROGRAM with uroce's libibverbs.so.1 (uroce devices from FILE, or from $UROCE_CONFIG)\n");
  return 2;
}

}  // namespace

int ExecCommand(int argc, char** argv) {
  std::string config;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--config" && i + 1 < argc) {
      config = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config = a.substr(9);
    } else if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "uroce exec: unknown argument '%s'\n", a.c_str());
      return Usage();
    }
  }
  if (i >= argc) return Usage();
  if (!config.empty()) {
    const std::string abs = Absolute(config);
    if (abs.empty()) {
      std::fprintf(stderr, "uroce exec: cannot read configuration '%s': %s\n", config.c_str(), std::strerror(errno));
      return 2;
    }
    setenv("UROCE_CONFIG", abs.c_str(), 1);
  } else if (getenv("UROCE_CONFIG") == nullptr) {
    std::fprintf(stderr, "uroce exec: give --config FILE (or set UROCE_CONFIG)\n");
    return 2;
  }
  const std::string lib = FindLibraryDir();
  if (lib.empty()) {
    std::fprintf(stderr,
                 "uroce exec: cannot find uroce's libibverbs.so.1 (build //api/verbs:libibverbs.so.1, or set "
                 "UROCE_VERBS_LIB_DIR)\n");
    return 2;
  }
  std::string path = lib;
  if (const char* old = getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0') path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  execvp(argv[i], argv + i);
  std::fprintf(stderr, "uroce exec: cannot run '%s': %s\n", argv[i], std::strerror(errno));
  return 127;
}

}  // namespace uroce::tools
