// Just enough JSON to read DPDK telemetry's answers in `uroce stats`:
// objects (keys in order), arrays, strings, numbers, true/false/null.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace uroce::tools {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // strings; numbers as written
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;

  // The member called `key`, or null.
  const JsonValue* Get(const std::string& key) const;
};

StatusOr<JsonValue> ParseJson(const std::string& text);

}  // namespace uroce::tools
