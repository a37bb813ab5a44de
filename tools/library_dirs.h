// Where uroce's libibverbs.so.1, librdmacm.so.1 and libfabric provider
// (liburoce-fi.so) are: `uroce exec` puts them in front of a program, `uroce
// cdi` copies them for containers.
#pragma once

#include <string>

namespace uroce::tools {

// The absolute directory holding `name`: $env_var if set (and then only
// there), else PREFIX/lib/uroce of an install (tools/install), api/<subdir>
// beside this binary in Bazel's output tree, or in its runfiles. "" if none.
// Environment variables here choose which libraries a program loads, so they
// are read with secure_getenv(3): ignored in a set-user-ID process, as the
// dynamic loader ignores LD_LIBRARY_PATH there.
std::string FindLibraryDir(const char* env_var, const char* subdir, const char* name);

// realpath(3) of `path`, "" if it does not resolve.
std::string Absolute(const std::string& path);

}  // namespace uroce::tools
