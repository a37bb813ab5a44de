// The rate limiter of one QP: a packet may leave once the clock has reached
// the time the bytes before it earned at the allowed rate. A sender that
// was idle (or a poll that came late) may catch up by at most `burst_ns`,
// so the rate holds over any stretch longer than that and the queue it
// builds downstream stays below one burst. This is a software NIC's answer
// to a NIC's per-QP rate limiter; eRPC paces the same way in software
// (NSDI 2019, section 5.2.2, "Carousel").
//
// Plain data and arithmetic on the engine's clock; engine thread only.
// No allocation, no system call: it is on the fast path.
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce::congestion {

class Pacer {
 public:
  // The longest idle stretch a sender may catch up on.
  static constexpr double kBurstNs = 4'000;

  // Whether a packet may leave at `now_ns`.
  bool Ready(uint64_t now_ns) const { return static_cast<double>(now_ns) >= next_ns_; }
  // A packet of `bytes` left at `now_ns` under `rate_mbps` (> 0): the next
  // may leave once these bytes' time at the rate has passed.
  void Spend(uint64_t now_ns, uint32_t bytes, uint64_t rate_mbps) {
    const double now = static_cast<double>(now_ns);
    next_ns_ = std::max(next_ns_, now - kBurstNs) + static_cast<double>(bytes) * 8'000.0 / static_cast<double>(rate_mbps);
  }
 private:
  double next_ns_ = 0;
};

}  // namespace uroce::congestion
