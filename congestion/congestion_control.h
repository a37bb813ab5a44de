// The interface of a congestion control algorithm: one object per reliable
// QP, created on the control path when the QP is connected, then driven by
// the engine thread with signals on the engine's clock (nanoseconds):
//
//   OnSent            a request packet left (bytes on the wire)
//   OnAcked           the oldest unacknowledged PSN moved: how many packets
//                     that acknowledged, and a round-trip sample when the
//                     timed packet was among them (0 when not; RFC 6298
//                     section 3: never from a retransmitted packet)
//   OnCongestionNotified   a CNP arrived for the QP (RoCEv2, IBTA vol. 1
//                     annex A17.9.3): a packet of ours was marked CE on the way
//   OnLoss            the requester retransmits (a NAK, a gap, the RTO)
//
// and it answers with an Allowance, plain fields the transmit stage reads
// before each packet without a virtual call: at most `window_packets`
// packets outstanding (0: only the QP's own window), and one packet every
// `bytes * 8 / rate_mbps` microseconds (rate 0: unpaced).
//
// An algorithm must keep the QP moving whatever the signals say: a window
// of at least one packet and a rate of at least CongestionParams::
// min_rate_mbps, so that a flood of forged CNPs or delayed ACKs slows a QP
// down but never stops it. Signals come from the wire and may be hostile;
// an algorithm trusts none of them beyond its own floors.
//
// docs/congestion.md has a worked example of a new algorithm.
//
// Engine thread only (construction: the control path, before the engine
// sees the object).
#pragma once

#include <cstdint>

namespace uroce::congestion {

// What every algorithm is given at creation (from the configuration's
// [congestion] section and the QP).
struct CongestionParams {
  // The port's speed: where a rate starts and the most it recovers to. A
  // software port has no fixed speed; the default is above what one engine
  // core sends, so that an uncongested QP is never paced.
  uint64_t line_rate_mbps = 100'000;
  // No algorithm paces a QP below this.
  uint64_t min_rate_mbps = 10;
  // The QP's path MTU and its own window (EngineConfig::max_unacked_packets).
  uint32_t mtu_bytes = 1024;
  uint32_t max_window_packets = 128;
  // Delay-based algorithms: the round trip they aim for.
  uint64_t target_delay_ns = 50'000;
};

struct Allowance {
  uint32_t window_packets = 0;  // 0: the QP's own window only
  uint64_t rate_mbps = 0;       // 0: not paced
};

class CongestionControl {
 public:
  explicit CongestionControl(const CongestionParams& params) : params_(params) {}
  virtual ~CongestionControl() = default;
  CongestionControl(const CongestionControl&) = delete;
  CongestionControl& operator=(const CongestionControl&) = delete;

  // The name the configuration uses ("dcqcn").
  virtual const char* name() const = 0;
  // Whether the QP's packets leave ECN-capable, ECT(0) (RFC 3168 section 5),
  // so that a congested queue marks them CE instead of dropping them.
  virtual bool ecn_capable() const { return false; }

  virtual void OnSent(uint64_t now_ns, uint32_t bytes) {
    (void)now_ns;
    (void)bytes;
  }
  virtual void OnAcked(uint64_t now_ns, uint32_t packets, uint64_t rtt_ns) {
    (void)now_ns;
    (void)packets;
    (void)rtt_ns;
  }
  virtual void OnCongestionNotified(uint64_t now_ns) { (void)now_ns; }
  virtual void OnLoss(uint64_t now_ns) { (void)now_ns; }

  const Allowance& allowance() const { return allowance_; }

 protected:
  const CongestionParams params_;
  Allowance allowance_;
};

}  // namespace uroce::congestion
