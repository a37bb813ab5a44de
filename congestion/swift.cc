// See swift.h.
#include "congestion/swift.h"

#include <algorithm>
#include <cmath>

namespace uroce::congestion {

Swift::Swift(const CongestionParams& params, const SwiftParams& swift)
    : CongestionControl(params), swift_(swift), window_(static_cast<double>(params.max_window_packets)) {
  Publish();
}

bool Swift::MayDecrease(uint64_t now_ns) const {
  // Once per round trip (algorithm 1, "can_decrease"): a cut shows in the
  // delay only a round trip later.
  return !decreased_ || delay_ns_ == 0 || now_ns - last_decrease_ns_ >= delay_ns_;
}

void Swift::Decreased(uint64_t now_ns) {
  decreased_ = true;
  last_decrease_ns_ = now_ns;
}

void Swift::OnAcked(uint64_t now_ns, uint32_t packets, uint64_t rtt_ns) {
  if (rtt_ns != 0) delay_ns_ = rtt_ns;
  if (delay_ns_ == 0) return;  // no sample yet: nothing to compare
  const double target = static_cast<double>(params_.target_delay_ns);
  const double delay = static_cast<double>(delay_ns_);
  if (delay < target) {
    const double acked = static_cast<double>(packets);
    if (window_ >= 1) window_ += swift_.additive_packets * acked / window_;
    else window_ += swift_.additive_packets * acked;
  } else if (rtt_ns != 0 && MayDecrease(now_ns)) {
    // Only a fresh sample above the target cuts: the same sample, seen again
    // with a later ACK, says nothing new.
    window_ *= std::max(1 - swift_.beta * (delay - target) / delay, 1 - swift_.max_decrease);
    Decreased(now_ns);
  }
  Publish();
}

void Swift::OnLoss(uint64_t now_ns) {
  if (!MayDecrease(now_ns)) return;
  window_ *= 1 - swift_.max_decrease;
  Decreased(now_ns);
  Publish();
}

void Swift::Publish() {
  window_ = std::clamp(window_, swift_.min_window, static_cast<double>(params_.max_window_packets));
  allowance_.window_packets = std::max<uint32_t>(1, static_cast<uint32_t>(window_));
  allowance_.rate_mbps = 0;
  if (window_ < 1 && delay_ns_ != 0) {
    // A fraction of a packet per round trip: paced (Swift section 3.4).
    const double mbps = window_ * params_.mtu_bytes * 8'000.0 / static_cast<double>(delay_ns_);
    allowance_.rate_mbps = std::max<uint64_t>(params_.min_rate_mbps, static_cast<uint64_t>(std::llround(mbps)));
  }
}

}  // namespace uroce::congestion
