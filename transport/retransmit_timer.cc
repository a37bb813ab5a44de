// See retransmit_timer.h.
#include "transport/retransmit_timer.h"

#include <algorithm>

namespace uroce::transport {
namespace {

// With an infinite application timeout (timeout 0) retransmissions still
// recover loss, backing off to at most this: the usual timeout, 14.
constexpr uint64_t kRtoMaxWithoutTimeoutNs = 4096ull << 14;

uint64_t RtoCap(uint64_t local_ack_timeout_ns) {
  return local_ack_timeout_ns != 0 ? local_ack_timeout_ns : kRtoMaxWithoutTimeoutNs;
}

}  // namespace

uint64_t RetransmitTimer::rto_ns(const RetransmitTimerConfig& config, uint64_t local_ack_timeout_ns) const {
  // RFC 6298 (2.2)/(2.3): srtt + max(G, 4 * rttvar); the clock granularity G
  // is far below the floor here, so the floor alone bounds it (2.4).
  uint64_t rto = srtt_ns_ == 0 ? config.rto_initial_ns : srtt_ns_ + 4 * rttvar_ns_;
  rto = std::max(rto, config.rto_min_ns);
  const uint64_t cap = RtoCap(local_ack_timeout_ns);
  for (uint32_t i = 0; i < backoff_ && rto < cap; ++i) rto *= 2;  // (5.5)
  return std::min(rto, cap);
}

void RetransmitTimer::Sample(uint64_t rtt_ns) {
  if (srtt_ns_ == 0) {  // (2.2)
    srtt_ns_ = std::max<uint64_t>(rtt_ns, 1);
    rttvar_ns_ = rtt_ns / 2;
    return;
  }
  // (2.3), alpha 1/8 and beta 1/4, in integers.
  const uint64_t error = srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
  rttvar_ns_ = (3 * rttvar_ns_ + error) / 4;
  srtt_ns_ = std::max<uint64_t>((7 * srtt_ns_ + rtt_ns) / 8, 1);
}

uint64_t RetransmitTimer::ProbeDelay(const RetransmitTimerConfig& config) const {
  if (config.tail_probe_min_ns == 0 || srtt_ns_ == 0) return 0;
  return std::max(2 * srtt_ns_, config.tail_probe_min_ns);
}

void RetransmitTimer::StartRetransmitClock(uint64_t now_ns, uint64_t local_ack_timeout_ns,
                                           const RetransmitTimerConfig& config) {
  const uint64_t rto = rto_ns(config, local_ack_timeout_ns);
  const uint64_t probe = backoff_ == 0 ? ProbeDelay(config) : 0;
  probe_due_ = probe != 0 && probe < rto;
  retransmit_deadline_ns_ = now_ns + (probe_due_ ? probe : rto) + pace_gap_ns_;
}

void RetransmitTimer::UpdateEarliest() {
  deadline_ns_ = retransmit_deadline_ns_;
  if (local_ack_deadline_ns_ != 0 && (deadline_ns_ == 0 || local_ack_deadline_ns_ < deadline_ns_)) {
    deadline_ns_ = local_ack_deadline_ns_;
  }
}

void RetransmitTimer::Arm(uint64_t now_ns, uint64_t local_ack_timeout_ns, const RetransmitTimerConfig& config) {
  local_ack_deadline_ns_ = local_ack_timeout_ns != 0 ? now_ns + local_ack_timeout_ns : 0;
  StartRetransmitClock(now_ns, local_ack_timeout_ns, config);
  UpdateEarliest();
}

uint64_t RetransmitTimer::OnProgress(Psn next, uint64_t now_ns, uint64_t local_ack_timeout_ns, bool outstanding,
                                     const RetransmitTimerConfig& config) {
  uint64_t sample = 0;
  if (timing_ && next.DistanceFrom(timed_psn_) > 0) {
    timing_ = false;
    if (now_ns >= timed_sent_ns_) {
      sample = std::max<uint64_t>(now_ns - timed_sent_ns_, 1);
      Sample(sample);
    }
  }
  // Karn's algorithm (RFC 6298 section 5, after rule 5.7): a backed-off RTO
  // stays until a packet sent only once is acknowledged and measured. Ended
  // on any progress, a peer slower than the initial RTO (a busy guest
  // behind a tap answers in milliseconds) would get every message resent
  // from its start again and again, each backoff starting over at 1 ms,
  // and no packet would ever be timed.
  if (sample != 0) backoff_ = 0;
  if (!outstanding) {
    Disarm();
    return sample;
  }
  Arm(now_ns, local_ack_timeout_ns, config);
  return sample;
}

RetransmitTimer::Expiry RetransmitTimer::Expire(uint64_t now_ns, uint64_t local_ack_timeout_ns,
                                                const RetransmitTimerConfig& config) {
  if (local_ack_deadline_ns_ != 0 && now_ns >= local_ack_deadline_ns_) {
    // The application's timeout: its clock starts again, and the RTO backs
    // off as after any expiry.
    local_ack_deadline_ns_ = now_ns + local_ack_timeout_ns;
    if (backoff_ < 63) ++backoff_;
    timing_ = false;
    StartRetransmitClock(now_ns, local_ack_timeout_ns, config);
    UpdateEarliest();
    return Expiry::kLocalAckTimeout;
  }
  if (retransmit_deadline_ns_ == 0 || now_ns < retransmit_deadline_ns_) {
    UpdateEarliest();
    return Expiry::kNone;
  }
  timing_ = false;
  if (probe_due_) {
    // One probe per silence; the RTO follows it, counted from now.
    probe_due_ = false;
    retransmit_deadline_ns_ = now_ns + rto_ns(config, local_ack_timeout_ns) + pace_gap_ns_;
    UpdateEarliest();
    return Expiry::kTailProbe;
  }
  if (backoff_ < 63) ++backoff_;
  StartRetransmitClock(now_ns, local_ack_timeout_ns, config);
  UpdateEarliest();
  return Expiry::kRetransmit;
}

}  // namespace uroce::transport
