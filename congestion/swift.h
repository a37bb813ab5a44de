// A Swift-like delay window (Kumar et al., "Swift: Delay is Simple and
// Effective for Congestion Control in the Datacenter", SIGCOMM 2020,
// section 3 and algorithm 1), for networks with neither ECN nor PFC: the
// round trip itself is the signal, so nothing in the network has to help.
//
//   each ACK, delay below the target:   cwnd += ai * acked / cwnd
//                                       (cwnd < 1: cwnd += ai * acked)
//   delay above it, at most once per RTT:
//       cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)
//   a retransmission, at most once per RTT:   cwnd *= 1 - max_mdf
//
// Why Swift and not Timely: Timely reacts to the RTT's gradient, which a
// software path's scheduling noise (a poll that came late, a VM's stolen
// cycles) makes large and random; Swift compares the delay with a target,
// so noise below the target does nothing, and it keeps a window (bounded
// in-flight data) besides pacing. Machnet made the same choice for
// software NICs.
//
// Simplifications, said: one fixed target (CongestionParams::target_delay_ns)
// instead of Swift's fabric/endpoint split and flow scaling; the delay is
// the requester's RTT sample (RetransmitTimer's timed packet, about one per
// window), so it includes the peer's polling. Below one packet the window
// becomes a pace of cwnd packets per RTT, never below min_rate_mbps.
//
// Engine thread only.
#pragma once

#include "congestion/congestion_control.h"

namespace uroce::congestion {

struct SwiftParams {
  double additive_packets = 1;  // ai: packets added per RTT below the target
  double beta = 0.8;            // the multiplicative decrease's scale
  double max_decrease = 0.5;    // max_mdf: the deepest single cut
  double min_window = 0.01;     // packets
};

class Swift final : public CongestionControl {
 public:
  Swift(const CongestionParams& params, const SwiftParams& swift = {});

  const char* name() const override { return "swift"; }
  void OnAcked(uint64_t now_ns, uint32_t packets, uint64_t rtt_ns) override;
  void OnLoss(uint64_t now_ns) override;

  double window() const { return window_; }

 private:
  bool MayDecrease(uint64_t now_ns) const;
  void Decreased(uint64_t now_ns);
  void Publish();

  const SwiftParams swift_;
  double window_;          // cwnd, packets
  uint64_t delay_ns_ = 0;  // the last RTT sample
  uint64_t last_decrease_ns_ = 0;
  bool decreased_ = false;
};

}  // namespace uroce::congestion
