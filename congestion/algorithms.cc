// See algorithms.h.
#include "congestion/algorithms.h"

#include "congestion/dcqcn.h"
#include "congestion/fixed_rate.h"
#include "congestion/swift.h"

namespace uroce::congestion {
namespace {

struct Algorithm {
  const char* name;
  std::unique_ptr<CongestionControl> (*make)(const CongestionParams& params);
};

// One line per algorithm. "none" makes nothing: the engine then checks no
// allowance and calls no signal, so it costs nothing.
const Algorithm kAlgorithms[] = {
    {"none", nullptr},
    {"dcqcn", [](const CongestionParams& p) -> std::unique_ptr<CongestionControl> { return std::make_unique<Dcqcn>(p); }},
    {"swift", [](const CongestionParams& p) -> std::unique_ptr<CongestionControl> { return std::make_unique<Swift>(p); }},
    {"fixed_rate",
     [](const CongestionParams& p) -> std::unique_ptr<CongestionControl> { return std::make_unique<FixedRate>(p); }},
};

const Algorithm* Find(std::string_view name) {
  for (const Algorithm& a : kAlgorithms) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

}  // namespace

bool IsKnownAlgorithm(std::string_view name) { return Find(name) != nullptr; }

std::string KnownAlgorithms() {
  std::string names;
  for (const Algorithm& a : kAlgorithms) {
    if (!names.empty()) names += ", ";
    names += a.name;
  }
  return names;
}

std::unique_ptr<CongestionControl> MakeCongestionControl(std::string_view name, const CongestionParams& params) {
  const Algorithm* a = Find(name);
  if (a == nullptr || a->make == nullptr) return nullptr;
  return a->make(params);
}

}  // namespace uroce::congestion
