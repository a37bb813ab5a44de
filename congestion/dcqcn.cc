// See dcqcn.h.
#include "congestion/dcqcn.h"

#include <algorithm>

namespace uroce::congestion {
namespace {

// A QP idle for long catches up on at most this many periods at once: alpha
// has decayed to nothing by then and the rate is back at the line rate.
constexpr uint32_t kMaxCatchUp = 4096;

}  // namespace

Dcqcn::Dcqcn(const CongestionParams& params, const DcqcnParams& dcqcn)
    : CongestionControl(params),
      dcqcn_(dcqcn),
      current_(static_cast<double>(params.line_rate_mbps)),
      target_(static_cast<double>(params.line_rate_mbps)) {
  Publish();
}

void Dcqcn::Publish() {
  const double line = static_cast<double>(params_.line_rate_mbps);
  const double floor = static_cast<double>(params_.min_rate_mbps);
  current_ = std::clamp(current_, floor, line);
  target_ = std::clamp(target_, floor, line);
  // At the line rate: not paced (the QP's own window is the only limit).
  allowance_.rate_mbps = current_ >= line ? 0 : static_cast<uint64_t>(current_);
  if (allowance_.rate_mbps == 0 && current_ < line) allowance_.rate_mbps = 1;
}

void Dcqcn::Increase() {
  const uint32_t f = dcqcn_.fast_recovery_steps;
  if (timer_events_ > f && byte_events_ > f) {
    const uint32_t i = std::min(timer_events_, byte_events_) - f;
    target_ += i * dcqcn_.hyper_mbps;
  } else if (timer_events_ > f || byte_events_ > f) {
    target_ += dcqcn_.additive_mbps;
  }
  target_ = std::min(target_, static_cast<double>(params_.line_rate_mbps));
  current_ = (target_ + current_) / 2;
  // Close enough to the line rate is the line rate: stop pacing.
  if (static_cast<double>(params_.line_rate_mbps) - current_ < 1) current_ = static_cast<double>(params_.line_rate_mbps);
}

void Dcqcn::Advance(uint64_t now_ns) {
  if (!started_) {
    started_ = true;
    alpha_since_ns_ = now_ns;
    timer_since_ns_ = now_ns;
    return;
  }
  if (now_ns > alpha_since_ns_ + dcqcn_.alpha_period_ns) {
    const uint64_t periods = (now_ns - alpha_since_ns_) / dcqcn_.alpha_period_ns;
    for (uint64_t k = 0; k < std::min<uint64_t>(periods, kMaxCatchUp); ++k) alpha_ *= 1 - dcqcn_.g;
    alpha_since_ns_ += periods * dcqcn_.alpha_period_ns;
  }
  if (now_ns > timer_since_ns_ + dcqcn_.increase_period_ns) {
    const uint64_t periods = (now_ns - timer_since_ns_) / dcqcn_.increase_period_ns;
    for (uint64_t k = 0; k < std::min<uint64_t>(periods, kMaxCatchUp); ++k) {
      ++timer_events_;
      Increase();
    }
    timer_since_ns_ += periods * dcqcn_.increase_period_ns;
  }
}

void Dcqcn::OnSent(uint64_t now_ns, uint32_t bytes) {
  Advance(now_ns);
  bytes_since_ += bytes;
  if (bytes_since_ >= dcqcn_.increase_bytes) {
    bytes_since_ = 0;
    ++byte_events_;
    Increase();
  }
  Publish();
}

void Dcqcn::OnAcked(uint64_t now_ns, uint32_t packets, uint64_t rtt_ns) {
  (void)packets;
  (void)rtt_ns;
  // Only the clocks: a QP that waits on its window still recovers its rate.
  Advance(now_ns);
  Publish();
}

void Dcqcn::OnCongestionNotified(uint64_t now_ns) {
  Advance(now_ns);
  target_ = current_;
  current_ *= 1 - alpha_ / 2;
  alpha_ = (1 - dcqcn_.g) * alpha_ + dcqcn_.g;
  // The increase stages start again from this cut (figure 7).
  alpha_since_ns_ = now_ns;
  timer_since_ns_ = now_ns;
  bytes_since_ = 0;
  timer_events_ = 0;
  byte_events_ = 0;
  Publish();
}

}  // namespace uroce::congestion
