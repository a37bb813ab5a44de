// The congestion control algorithms by name, as the configuration's
// [congestion] section names them: "none" (no object: the QP sends as its
// window allows, uroce's behaviour before congestion control), "dcqcn"
// (dcqcn.h), "swift" (swift.h) and "fixed_rate" (fixed_rate.h, a fixed
// pace at min_rate_mbps: a baseline). Adding an algorithm is one file and one
// line in algorithms.cc (docs/congestion.md, "Adding an algorithm").
//
// Control path (creation); the objects are then the engine thread's.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "congestion/congestion_control.h"

namespace uroce::congestion {

// Whether `name` is an algorithm ("none" included).
bool IsKnownAlgorithm(std::string_view name);
// The known names, for error messages: "none, dcqcn, swift, fixed_rate".
std::string KnownAlgorithms();
// A new object of the algorithm `name`; null for "none" and for a name that
// is not known (callers check with IsKnownAlgorithm first).
std::unique_ptr<CongestionControl> MakeCongestionControl(std::string_view name, const CongestionParams& params);

}  // namespace uroce::congestion
