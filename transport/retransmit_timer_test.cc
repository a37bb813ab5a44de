#include "transport/retransmit_timer.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kAppTimeout = 4096ull << 14;  // timeout 14: 67 ms

RetransmitTimerConfig Config() {
  RetransmitTimerConfig c;
  c.rto_min_ns = 100 * kUs;
  c.rto_initial_ns = 1 * kMs;
  c.tail_probe_min_ns = 20 * kUs;
  return c;
}

// One packet timed from `sent` and acknowledged at `acked`, nothing left
// outstanding afterwards unless `outstanding`.
void Exchange(RetransmitTimer& t, Psn psn, uint64_t sent, uint64_t acked, bool outstanding = false) {
  if (t.deadline_ns() == 0) t.Arm(sent, kAppTimeout, Config());
  t.OnFreshAckRequestSent(psn, sent);
  t.OnProgress(psn + 1, acked, kAppTimeout, outstanding, Config());
}

TEST(RetransmitTimerTest, BeforeAnySampleTheInitialRtoAndNoProbe) {
  RetransmitTimer t;
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 1 * kMs);
  t.Arm(0, kAppTimeout, Config());
  EXPECT_EQ(t.deadline_ns(), 1 * kMs);
  EXPECT_EQ(t.Expire(1 * kMs - 1, kAppTimeout, Config()), RetransmitTimer::Expiry::kNone);
  EXPECT_EQ(t.Expire(1 * kMs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  // Backed off: twice the RTO from the expiry.
  EXPECT_EQ(t.deadline_ns(), 3 * kMs);
}

TEST(RetransmitTimerTest, APacedQpWaitsItsPaceLongerForProbeAndRto) {
  RetransmitTimer t;
  Exchange(t, Psn(1), 0, 10 * kUs, /*outstanding=*/true);  // srtt 10 us: the probe after 20 us
  EXPECT_EQ(t.deadline_ns(), 10 * kUs + 20 * kUs);
  t.SetPaceGap(50 * kUs);  // one packet every 50 us: its ACKs come that far apart
  t.OnProgress(Psn(3), 20 * kUs, kAppTimeout, true, Config());
  EXPECT_EQ(t.deadline_ns(), 20 * kUs + 20 * kUs + 50 * kUs);
  EXPECT_EQ(t.Expire(90 * kUs, kAppTimeout, Config()), RetransmitTimer::Expiry::kTailProbe);
  // The RTO after the probe waits the pace too.
  EXPECT_EQ(t.deadline_ns(), 90 * kUs + t.rto_ns(Config(), kAppTimeout) + 50 * kUs);
  t.SetPaceGap(0);
  t.OnProgress(Psn(4), 100 * kUs, kAppTimeout, true, Config());
  EXPECT_EQ(t.deadline_ns(), 100 * kUs + 20 * kUs);
}

TEST(RetransmitTimerTest, SmoothsSamplesAsRfc6298Says) {
  RetransmitTimer t;
  Exchange(t, Psn(10), 0, 40 * kUs);
  EXPECT_EQ(t.srtt_ns(), 40 * kUs);    // (2.2): R
  EXPECT_EQ(t.rttvar_ns(), 20 * kUs);  // R/2
  Exchange(t, Psn(11), 100 * kUs, 180 * kUs);  // R' = 80 us
  // (2.3): rttvar = 3/4 * 20 + 1/4 * |40 - 80| = 25; srtt = 7/8 * 40 + 1/8 * 80 = 45.
  EXPECT_EQ(t.rttvar_ns(), 25 * kUs);
  EXPECT_EQ(t.srtt_ns(), 45 * kUs);
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 145 * kUs);  // srtt + 4 rttvar
}

TEST(RetransmitTimerTest, TheFloorAndTheApplicationsTimeoutBoundTheRto) {
  RetransmitTimer t;
  Exchange(t, Psn(1), 0, 2 * kUs);
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 100 * kUs);  // 2 + 4 * 1 us, floored
  RetransmitTimer slow;
  Exchange(slow, Psn(1), 0, 30 * kMs);
  EXPECT_EQ(slow.rto_ns(Config(), kAppTimeout), kAppTimeout);   // 30 + 60 ms capped at 67
  EXPECT_EQ(slow.rto_ns(Config(), 8192), 8192u);  // timeout 1: 8.2 us, below the floor even
}

TEST(RetransmitTimerTest, KarnNoSampleFromARetransmittedPacket) {
  RetransmitTimer t;
  t.Arm(0, kAppTimeout, Config());
  t.OnFreshAckRequestSent(Psn(5), 0);
  t.ForgetSample();  // PSN 5 was sent again
  t.OnProgress(Psn(6), 500 * kUs, kAppTimeout, false, Config());
  EXPECT_EQ(t.srtt_ns(), 0u);
  // An ACK that does not cover the timed packet takes no sample either.
  t.Arm(600 * kUs, kAppTimeout, Config());
  t.OnFreshAckRequestSent(Psn(9), 600 * kUs);
  t.OnProgress(Psn(8), 650 * kUs, kAppTimeout, true, Config());
  EXPECT_EQ(t.srtt_ns(), 0u);
  t.OnProgress(Psn(10), 700 * kUs, kAppTimeout, false, Config());
  EXPECT_EQ(t.srtt_ns(), 100 * kUs);
}

TEST(RetransmitTimerTest, ProbeAfterTwoRttsThenTheRtoThenBackoff) {
  RetransmitTimer t;
  Exchange(t, Psn(1), 0, 30 * kUs);  // srtt 30 us, rttvar 15: RTO 100 us (floor)
  const uint64_t sent = 1 * kMs;
  t.Arm(sent, kAppTimeout, Config());
  EXPECT_EQ(t.deadline_ns(), sent + 60 * kUs);  // two RTTs
  EXPECT_EQ(t.Expire(sent + 60 * kUs, kAppTimeout, Config()), RetransmitTimer::Expiry::kTailProbe);
  EXPECT_EQ(t.deadline_ns(), sent + 160 * kUs);  // then the RTO
  EXPECT_EQ(t.Expire(sent + 160 * kUs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  EXPECT_EQ(t.deadline_ns(), sent + 360 * kUs);  // doubled, and no second probe
  EXPECT_EQ(t.Expire(sent + 360 * kUs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  EXPECT_EQ(t.deadline_ns(), sent + 760 * kUs);
  // Progress without a sample (what is acknowledged was resent) keeps the
  // backoff (Karn): no probe, the RTO still doubled twice.
  t.OnProgress(Psn(3), sent + 400 * kUs, kAppTimeout, true, Config());
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 400 * kUs);
  EXPECT_EQ(t.deadline_ns(), sent + 800 * kUs);
  // A packet sent once and acknowledged ends it; the probe comes first again.
  t.OnFreshAckRequestSent(Psn(4), sent + 500 * kUs);
  t.OnProgress(Psn(5), sent + 530 * kUs, kAppTimeout, true, Config());
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 100 * kUs);
  EXPECT_EQ(t.deadline_ns(), sent + 530 * kUs + 60 * kUs);
}

// A peer slower than the initial RTO: the first message is resent as the
// RTO backs off, and the next one starts from the backed-off RTO, not from
// 1 ms again, so that its timed packet can be acknowledged before the RTO.
TEST(RetransmitTimerTest, ASlowPeerIsNotResentToFromTheInitialRtoAgain) {
  RetransmitTimer t;
  t.Arm(0, kAppTimeout, Config());
  t.OnFreshAckRequestSent(Psn(1), 0);
  EXPECT_EQ(t.Expire(1 * kMs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  EXPECT_EQ(t.Expire(3 * kMs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  EXPECT_EQ(t.Expire(7 * kMs, kAppTimeout, Config()), RetransmitTimer::Expiry::kRetransmit);
  t.OnProgress(Psn(2), 10 * kMs, kAppTimeout, false, Config());  // a 10 ms peer answers
  EXPECT_EQ(t.srtt_ns(), 0u) << "PSN 1 was resent: no sample";
  t.Arm(11 * kMs, kAppTimeout, Config());
  t.OnFreshAckRequestSent(Psn(2), 11 * kMs);
  EXPECT_EQ(t.deadline_ns(), 11 * kMs + 8 * kMs) << "the RTO as backed off";
  EXPECT_EQ(t.Expire(18 * kMs, kAppTimeout, Config()), RetransmitTimer::Expiry::kNone);
  t.OnProgress(Psn(3), 18 * kMs, kAppTimeout, false, Config());
  EXPECT_EQ(t.srtt_ns(), 7 * kMs);
  EXPECT_EQ(t.rto_ns(Config(), kAppTimeout), 7 * kMs + 4 * 3500 * kUs) << "from the sample, no backoff";
}

TEST(RetransmitTimerTest, ProbesOffMeansTheRtoFirst) {
  RetransmitTimerConfig c = Config();
  c.tail_probe_min_ns = 0;
  RetransmitTimer t;
  t.Arm(0, kAppTimeout, c);
  t.OnFreshAckRequestSent(Psn(1), 0);
  t.OnProgress(Psn(2), 30 * kUs, kAppTimeout, true, c);
  EXPECT_EQ(t.deadline_ns(), 130 * kUs);
  EXPECT_EQ(t.Expire(130 * kUs, kAppTimeout, c), RetransmitTimer::Expiry::kRetransmit);
}

TEST(RetransmitTimerTest, TheApplicationsTimeoutStillExpiresWithoutProgress) {
  // A dead peer: RTO expiries spend nothing; every 67 ms without progress
  // is a local ACK timeout, which RunTimers counts against retry_cnt.
  RetransmitTimer t;
  t.Arm(0, kAppTimeout, Config());
  int local_ack_timeouts = 0, retransmits = 0;
  for (uint64_t now = 0; now <= 4 * kAppTimeout; now = t.deadline_ns()) {
    switch (t.Expire(now, kAppTimeout, Config())) {
      case RetransmitTimer::Expiry::kLocalAckTimeout:
        ++local_ack_timeouts;
        break;
      case RetransmitTimer::Expiry::kRetransmit:
        ++retransmits;
        break;
      default:
        break;
    }
  }
  EXPECT_EQ(local_ack_timeouts, 4);
  // At 1, 3, 7, 15, 31 and 63 ms (the initial RTO, doubled each time);
  // then the RTO is the application's timeout, which resends itself.
  EXPECT_EQ(retransmits, 6);
}

TEST(RetransmitTimerTest, InfiniteTimeoutRetransmitsButNeverTimesOut) {
  RetransmitTimer t;
  t.Arm(0, 0, Config());
  uint64_t now = 0;
  for (int i = 0; i < 40; ++i) {
    now = t.deadline_ns();
    ASSERT_NE(now, 0u);
    EXPECT_EQ(t.Expire(now, 0, Config()), RetransmitTimer::Expiry::kRetransmit);
  }
  EXPECT_EQ(t.rto_ns(Config(), 0), 4096ull << 14);  // backed off to the usual timeout, no further
}

TEST(RetransmitTimerTest, NothingOutstandingDisarms) {
  RetransmitTimer t;
  Exchange(t, Psn(1), 0, 10 * kUs, /*outstanding=*/false);
  EXPECT_EQ(t.deadline_ns(), 0u);
}

}  // namespace
}  // namespace uroce::transport
