// DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale
// RDMA Deployments", SIGCOMM 2015, section 3 and figure 7): RoCEv2's own
// congestion control. Switches mark ECN-capable packets CE above a queue
// threshold; the receiver (the notification point, transport/responder.cc)
// answers with a CNP, at most one per QP per interval; this sender cuts
// its rate on each CNP and recovers it on a timer and a byte counter.
//
//   on a CNP:   Rt = Rc;  Rc = Rc (1 - alpha/2);  alpha = (1 - g) alpha + g
//               (the increase stages start again)
//   every K without a CNP:  alpha = (1 - g) alpha
//   every T, and every B bytes sent (each an increase event):
//     fast recovery (fewer than F events of either kind):  Rc = (Rt + Rc) / 2
//     additive increase (one kind past F):   Rt += R_AI;  Rc = (Rt + Rc) / 2
//     hyper increase (both past F):          Rt += i R_HAI; Rc = (Rt + Rc) / 2
//
// Rates stay within [min_rate_mbps, line_rate_mbps]. At the line rate the QP
// is not paced at all, so an uncongested QP runs as with no control. The
// timers are kept lazily: each signal first catches up on the periods that
// passed, so nothing runs while a QP is idle.
//
// Engine thread only.
#pragma once

#include "congestion/congestion_control.h"

namespace uroce::congestion {

struct DcqcnParams {
  double g = 1.0 / 256;                 // alpha's gain (the paper's g)
  uint64_t alpha_period_ns = 55'000;    // K
  uint64_t increase_period_ns = 55'000; // T
  uint64_t increase_bytes = 10u << 20;  // B
  uint32_t fast_recovery_steps = 5;     // F
  double additive_mbps = 40;            // R_AI
  double hyper_mbps = 200;              // R_HAI
};

class Dcqcn final : public CongestionControl {
 public:
  Dcqcn(const CongestionParams& params, const DcqcnParams& dcqcn = {});

  const char* name() const override { return "dcqcn"; }
  bool ecn_capable() const override { return true; }
  void OnSent(uint64_t now_ns, uint32_t bytes) override;
  void OnAcked(uint64_t now_ns, uint32_t packets, uint64_t rtt_ns) override;
  void OnCongestionNotified(uint64_t now_ns) override;

  double current_rate_mbps() const { return current_; }
  double target_rate_mbps() const { return target_; }
  double alpha() const { return alpha_; }

 private:
  // Catches up on the alpha decay and the timer's increase events up to now.
  void Advance(uint64_t now_ns);
  void Increase();
  void Publish();

  const DcqcnParams dcqcn_;
  double current_;  // Rc, Mbit/s
  double target_;   // Rt
  double alpha_ = 1;
  uint64_t alpha_since_ns_ = 0;     // the last alpha update (or CNP)
  uint64_t timer_since_ns_ = 0;     // the last timer increase event (or CNP)
  uint64_t bytes_since_ = 0;        // sent since the last byte-counter event
  uint32_t timer_events_ = 0;       // T: increase events of the timer since the last CNP
  uint32_t byte_events_ = 0;        // BC: of the byte counter
  bool started_ = false;            // the clocks have a starting point
};

}  // namespace uroce::congestion
