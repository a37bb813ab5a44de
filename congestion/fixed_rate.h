// A fixed pace: every QP sends at CongestionParams::min_rate_mbps from its
// first packet, whatever the network says. A baseline to compare the
// adaptive algorithms with, and the worked example of docs/congestion.md,
// "Adding an algorithm": the smallest complete algorithm.
//
// Engine thread only.
#pragma once

#include "congestion/congestion_control.h"

namespace uroce::congestion {

class FixedRate final : public CongestionControl {
 public:
  explicit FixedRate(const CongestionParams& params) : CongestionControl(params) {
    allowance_.rate_mbps = params.min_rate_mbps;  // paced from the first packet
  }
  const char* name() const override { return "fixed_rate"; }
};

}  // namespace uroce::congestion
