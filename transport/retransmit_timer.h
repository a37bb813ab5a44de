// The requester's retransmission timing, one per reliable QP.
//
// A RoCE NIC retransmits only when the QP's local ACK timeout expires
// (IBTA vol. 1, 9.7.6.1.3): 4.096 us × 2^timeout, 67 ms at the usual 14. On a
// fabric without PFC that is what one lost tail packet costs. Here the
// retransmission timeout comes from the measured round trip instead, as TCP's
// does:
//   * a smoothed RTT and its variance (RFC 6298 section 2), in nanoseconds,
//     with a floor (EngineConfig::rto_min_ns), from one timed packet at a time,
//     never a retransmitted one (Karn's rule, RFC 6298 section 3);
//   * RTO = srtt + 4 * rttvar, doubled on each expiry without progress
//     (section 5.5), never above the application's timeout, and kept
//     doubled until a packet sent only once is acknowledged (Karn);
//   * a tail-loss probe (after RFC 8985 section 7): after about two RTTs
//     without progress, the last packet sent is sent again asking for an
//     ACK, so that a lost tail (or its lost ACK) costs a round trip or two
//     instead of a timeout.
// The application's timeout keeps its meaning: a retry of retry_cnt is spent
// only when that much time has passed without progress, so a dead peer fails
// after as long as it does on a NIC. The faster retransmissions before it
// spend nothing.
//
// Plain data and arithmetic on the engine's clock; engine thread only.
#pragma once

#include <cstdint>

#include "transport/wire_types.h"

namespace uroce::transport {

struct RetransmitTimerConfig {
  uint64_t rto_min_ns = 100'000;         // the RTO never goes below
  uint64_t rto_initial_ns = 1'000'000;   // before the first RTT sample
  uint64_t tail_probe_min_ns = 20'000;   // the probe never fires sooner; 0: no probes
};

class RetransmitTimer {
 public:
  // What RunTimers found due, in order of precedence.
  enum class Expiry {
    kNone,
    kLocalAckTimeout,  // the application's timeout: spend a retry, resend
    kRetransmit,       // the RTO: resend from the oldest unacknowledged PSN
    kTailProbe,        // send the last packet again, asking for an ACK
  };

  // A packet asking for an ACK was sent for the first time at `now_ns`:
  // timed, unless a timing is in progress.
  void OnFreshAckRequestSent(Psn psn, uint64_t now_ns) {
    if (timing_) return;
    timing_ = true;
    timed_psn_ = psn;
    timed_sent_ns_ = now_ns;
  }
  // Something is sent again: a sample could measure the original's ACK
  // against the copy's send time (Karn).
  void ForgetSample() { timing_ = false; }

  // A paced QP (congestion control) sends a packet every `gap_ns` at most:
  // its ACKs come that far apart even when nothing is lost, so the probe and
  // the RTO wait that much longer (as Linux adds its pacing delay to them).
  // 0: not paced.
  void SetPaceGap(uint64_t gap_ns) { pace_gap_ns_ = gap_ns; }

  // Packets went out with no timer running: both clocks start.
  void Arm(uint64_t now_ns, uint64_t local_ack_timeout_ns, const RetransmitTimerConfig& config);
  // The oldest unacknowledged PSN moved to `next` at `now_ns`: take an RTT
  // sample if the timed packet is covered, and end the backoff if one was
  // taken (Karn: without a sample the backed-off RTO stays); restart both
  // clocks if packets are still outstanding (else stop them). Returns the
  // sample in nanoseconds (for congestion control), 0 when none was taken.
  uint64_t OnProgress(Psn next, uint64_t now_ns, uint64_t local_ack_timeout_ns, bool outstanding,
                  const RetransmitTimerConfig& config);
  void Disarm() {
    local_ack_deadline_ns_ = 0;
    retransmit_deadline_ns_ = 0;
    deadline_ns_ = 0;
  }
  // The earliest deadline, 0 when none: the only thing a poll reads.
  uint64_t deadline_ns() const { return deadline_ns_; }
  // Called once deadline_ns() has passed: which expiry is due, with the
  // next deadlines set for it (the RTO backed off after kRetransmit and
  // kLocalAckTimeout, the RTO after a probe).
  Expiry Expire(uint64_t now_ns, uint64_t local_ack_timeout_ns, const RetransmitTimerConfig& config);

  // Expiries of the RTO (or the application's timeout) since the last
  // progress that carried a fresh sample: 1 right after the first.
  uint32_t backoff() const { return backoff_; }
  // For `uroce stats`: 0 before the first sample.
  uint64_t srtt_ns() const { return srtt_ns_; }
  uint64_t rttvar_ns() const { return rttvar_ns_; }
  // The RTO as it stands, backoff included.
  uint64_t rto_ns(const RetransmitTimerConfig& config, uint64_t local_ack_timeout_ns) const;

 private:
  void Sample(uint64_t rtt_ns);
  // The probe's delay: two smoothed RTTs, at least the configured minimum,
  // and 0 (no probe) before the first sample or when probes are off.
  uint64_t ProbeDelay(const RetransmitTimerConfig& config) const;
  void StartRetransmitClock(uint64_t now_ns, uint64_t local_ack_timeout_ns, const RetransmitTimerConfig& config);
  void UpdateEarliest();

  uint64_t srtt_ns_ = 0;
  uint64_t rttvar_ns_ = 0;
  uint32_t backoff_ = 0;  // expiries since the last progress: the RTO is doubled this often
  bool timing_ = false;
  Psn timed_psn_;
  uint64_t timed_sent_ns_ = 0;
  uint64_t local_ack_deadline_ns_ = 0;   // 0: the application's timeout is infinite or not armed
  uint64_t retransmit_deadline_ns_ = 0;  // the RTO or the probe
  bool probe_due_ = false;               // retransmit_deadline_ns_ is the probe's
  uint64_t deadline_ns_ = 0;
  uint64_t pace_gap_ns_ = 0;  // SetPaceGap
};

}  // namespace uroce::transport
