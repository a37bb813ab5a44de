// The configuration flags every `uroce` subcommand that starts DPDK takes:
//   --config FILE             an INI file instead of the built-in one
//   --set SECTION.KEY=VALUE   override one key (repeatable), e.g.
//                             --set engine.progress=engine
//   --impair SPEC             network faults: the [impair] keys as
//                             key=value,... (e.g. loss=0.01,seed=7)
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/config.h"

namespace uroce::tools {

struct ConfigFlags {
  std::string file;
  std::vector<runtime::ConfigOverride> overrides;
};

// If argv[*i] is --config, --set or --impair, consumes it (and its value) and returns
// true; a malformed one sets *error.
bool TakeConfigFlag(int argc, char** argv, int* i, ConfigFlags* flags, std::string* error);

// --config FILE if given, else the built-in configs/<builtin>.ini; then the
// overrides.
StatusOr<runtime::UroceConfig> LoadToolConfig(const ConfigFlags& flags, const std::string& builtin);

}  // namespace uroce::tools
