#include "tools/library_dirs.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

namespace uroce::tools {
namespace {

bool HasFile(const std::string& dir, const char* name) { return access((dir + "/" + name).c_str(), R_OK) == 0; }

}  // namespace

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

std::string FindLibraryDir(const char* env_var, const char* subdir, const char* name) {
  if (const char* env = secure_getenv(env_var); env != nullptr && *env != '\0') {
    return HasFile(env, name) ? Absolute(env) : "";
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  const std::string exe = self;
  const std::string dir = exe.substr(0, exe.rfind('/'));
  const std::string rel = std::string("api/") + subdir;
  // An install (tools/install: PREFIX/bin/uroce, PREFIX/lib/uroce/*), the
  // Bazel output tree, the runfiles.
  for (const std::string& candidate : {dir + "/../lib/uroce", dir + "/../" + rel, exe + ".runfiles/uroce/" + rel,
                                       dir + "/uroce.runfiles/uroce/" + rel}) {
    if (HasFile(candidate, name)) return Absolute(candidate);
  }
  if (const char* rf = secure_getenv("RUNFILES_DIR"); rf != nullptr && HasFile(std::string(rf) + "/uroce/" + rel, name)) {
    return Absolute(std::string(rf) + "/uroce/" + rel);
  }
  return "";
}

}  // namespace uroce::tools
