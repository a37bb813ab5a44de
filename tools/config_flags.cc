#include "tools/config_flags.h"

#include <cstring>

#include "configs/builtin_configs.h"

namespace uroce::tools {

bool TakeConfigFlag(int argc, char** argv, int* i, ConfigFlags* flags, std::string* error) {
  const char* arg = argv[*i];
  std::string value;
  bool is_set = false;
  if (!std::strcmp(arg, "--impair") || !std::strncmp(arg, "--impair=", 9)) {
    if (arg[8] == '=') {
      value = arg + 9;
    } else if (*i + 1 >= argc) {
      *error = "--impair needs a value (e.g. loss=0.01,seed=7)";
      return true;
    } else {
      value = argv[++*i];
    }
    auto items = runtime::ParseImpairSpec(value);
    if (!items.ok()) {
      *error = items.status().message();
    } else {
      flags->overrides.insert(flags->overrides.end(), items->begin(), items->end());
    }
    return true;
  }
  if (!std::strcmp(arg, "--config") || !std::strcmp(arg, "--set")) {
    is_set = !std::strcmp(arg, "--set");
    if (*i + 1 >= argc) {
      *error = std::string(arg) + " needs a value";
      return true;
    }
    value = argv[++*i];
  } else if (!std::strncmp(arg, "--config=", 9)) {
    value = arg + 9;
  } else if (!std::strncmp(arg, "--set=", 6)) {
    is_set = true;
    value = arg + 6;
  } else {
    return false;
  }
  if (!is_set) {
    flags->file = value;
    return true;
  }
  auto o = runtime::ParseOverride(value);
  if (!o.ok()) {
    *error = o.status().message();
  } else {
    flags->overrides.push_back(*o);
  }
  return true;
}

StatusOr<runtime::UroceConfig> LoadToolConfig(const ConfigFlags& flags, const std::string& builtin) {
  if (!flags.file.empty()) return runtime::LoadConfigFile(flags.file, flags.overrides);
  const char* text = configs::BuiltinConfig(builtin.c_str());
  if (text == nullptr) return Internal("no built-in configuration " + builtin);
  return runtime::LoadConfigText(text, "configs/" + builtin + ".ini (built in)", flags.overrides);
}

}  // namespace uroce::tools
