#include "runtime/progress_pacer.h"

#include <gtest/gtest.h>

namespace uroce::runtime {
namespace {

constexpr unsigned kIdleUs = 50;

// Drives a pacer round by round on a clock of its own, as the progress
// thread does: the application's running totals go in, sleeps come out.
class PacerRounds {
 public:
  PacerRounds() : pacer_(kIdleUs) {}

  // One round: the application polled `polls` times and its polls moved
  // `app_moved` frames since the last; the thread's poll (if it polls)
  // would move `thread_moved`. Returns the sleep; `polled` says whether the
  // thread polled.
  unsigned Round(uint64_t polls, uint64_t app_moved, unsigned thread_moved, bool waited_on = false) {
    app_polls_ += polls;
    app_moved_ += app_moved;
    polled = pacer_.StartRound(now_us_, app_polls_, app_moved_, waited_on);
    const unsigned sleep_us = pacer_.EndRound(polled ? thread_moved : 0, 0);
    now_us_ += sleep_us + 1;  // a round takes about a microsecond
    return sleep_us;
  }
  void Pass(uint64_t us) { now_us_ += us; }

  ProgressPacer& pacer() { return pacer_; }
  bool polled = false;

 private:
  ProgressPacer pacer_;
  uint64_t now_us_ = 1000;
  uint64_t app_polls_ = 0;
  uint64_t app_moved_ = 0;
};

TEST(ProgressPacerTest, WithNobodyPollingTheThreadPollsAtOnceWhileBusyAndBacksOffWhenIdle) {
  PacerRounds r;
  EXPECT_EQ(r.Round(0, 0, 3), 0u);
  EXPECT_TRUE(r.polled);
  EXPECT_EQ(r.Round(0, 0, 0), 1u);
  EXPECT_EQ(r.Round(0, 0, 0), 2u);
  EXPECT_EQ(r.Round(0, 0, 0), 4u);
  for (int i = 0; i < 10; ++i) r.Round(0, 0, 0);
  EXPECT_EQ(r.Round(0, 0, 0), kIdleUs);
  EXPECT_TRUE(r.polled);
  EXPECT_EQ(r.Round(0, 0, 1), 0u);  // work again: at once
}

TEST(ProgressPacerTest, AnApplicationThatPollsBusilyIsLeftAloneExceptForAProbeAfterEachLongSleep) {
  PacerRounds r;
  // ibv_rc_pingpong: thousands of polls between two looks; its polls move
  // the frames, so the probe after each long sleep finds none.
  EXPECT_EQ(r.Round(5000, 40, 0), ProgressPacer::kApplicationDrivesSleepUs);
  EXPECT_FALSE(r.polled);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(r.Round(5000, 40, 0), ProgressPacer::kApplicationDrivesSleepUs);
    EXPECT_TRUE(r.polled);
  }
  EXPECT_FALSE(r.pacer().thread_drives());
  EXPECT_EQ(r.pacer().takeovers(), 0u);
}

TEST(ProgressPacerTest, AFrameTheProbeFindsBesideABusyPollerCostsOneWindow) {
  PacerRounds r;
  r.Round(5000, 40, 0);
  // The probe catches a frame that had just arrived: the thread takes over...
  EXPECT_EQ(r.Round(5000, 40, 1), 0u);
  EXPECT_TRUE(r.pacer().thread_drives());
  // ...and the application's polls keep moving the frames: it hands back
  // once the window is over, and probes every long sleep again.
  uint64_t thread_rounds = 0;
  while (r.Round(100, 20, 0) != ProgressPacer::kApplicationDrivesSleepUs) {
    ASSERT_LT(++thread_rounds, 1000u);
  }
  EXPECT_FALSE(r.pacer().thread_drives());
  EXPECT_GT(thread_rounds, ProgressPacer::kWindowUs / (kIdleUs + 1) - 1);
  EXPECT_EQ(r.Round(5000, 40, 0), ProgressPacer::kApplicationDrivesSleepUs);
  EXPECT_TRUE(r.polled);
}

TEST(ProgressPacerTest, AnApplicationSpinningOnItsMemoryIsTakenOverAndStaysTakenOver) {
  PacerRounds r;
  // ib_write_lat: it polls its send CQ until its WRITE completes (its polls
  // move the WRITE and its ACK), then spins on its buffer while the peer's
  // WRITE waits in the ring until someone polls.
  EXPECT_EQ(r.Round(300, 2, 0), ProgressPacer::kApplicationDrivesSleepUs);
  EXPECT_FALSE(r.polled);
  // The probe after the sleep finds the WRITE waiting: the thread takes over.
  EXPECT_EQ(r.Round(300, 2, 2), 0u);
  EXPECT_TRUE(r.polled);
  EXPECT_TRUE(r.pacer().thread_drives());
  EXPECT_EQ(r.pacer().takeovers(), 1u);
  // Now an iteration takes microseconds: the application's polls send its
  // own WRITE and take its ACK; the thread places the peer's and sends its
  // ACK. Many windows long, the thread keeps polling every round and never
  // sleeps long.
  for (int iteration = 0; iteration < 2000; ++iteration) {
    EXPECT_LE(r.Round(40, 2, 0), kIdleUs);
    EXPECT_TRUE(r.polled);
    EXPECT_LE(r.Round(0, 0, 0), kIdleUs);
    EXPECT_EQ(r.Round(0, 0, 2), 0u);
    EXPECT_TRUE(r.polled);
  }
  EXPECT_TRUE(r.pacer().thread_drives());
  EXPECT_EQ(r.pacer().takeovers(), 1u);
}

TEST(ProgressPacerTest, TheThreadHandsBackOnceTheApplicationsPollsMoveTheFramesAgain) {
  PacerRounds r;
  r.Round(0, 0, 5);  // nobody polls: the thread moves frames
  ASSERT_TRUE(r.pacer().thread_drives());
  // The application starts polling its CQ busily: its polls move the frames,
  // the thread's find nothing. Within a window or two it hands back, and
  // probes.
  unsigned sleep_us = 0;
  for (int round = 0; round < 400 && r.pacer().thread_drives(); ++round) sleep_us = r.Round(100, 20, 0);
  EXPECT_FALSE(r.pacer().thread_drives());
  EXPECT_EQ(sleep_us, ProgressPacer::kApplicationDrivesSleepUs);
  // A probe that finds frames waiting takes over again at once.
  EXPECT_EQ(r.Round(100, 0, 2), 0u);
  EXPECT_TRUE(r.pacer().thread_drives());
}

TEST(ProgressPacerTest, WhileAThreadWaitsForACompletionTheThreadPollsWithoutTakingOver) {
  PacerRounds r;
  // An armed CQ: whatever the poll count says, nobody polls for it.
  EXPECT_EQ(r.Round(5000, 40, 1, /*waited_on=*/true), 0u);
  EXPECT_TRUE(r.polled);
  EXPECT_EQ(r.Round(5000, 40, 0, true), 1u);
  EXPECT_EQ(r.Round(5000, 0, 0, true), 2u);
  EXPECT_FALSE(r.pacer().thread_drives());
  EXPECT_EQ(r.pacer().takeovers(), 0u);
  // The wait ends and the application polls again: the long sleep.
  EXPECT_EQ(r.Round(5000, 40, 0), ProgressPacer::kApplicationDrivesSleepUs);
}

TEST(ProgressPacerTest, SparsePollsWithNothingWaitingAreNoTakeover) {
  PacerRounds r;
  // A program that computes and polls its CQ now and then, with no traffic:
  // the probes find nothing, so the thread keeps sleeping long.
  for (int i = 0; i < 10; ++i) {
    r.Pass(5000);
    EXPECT_EQ(r.Round(1, 0, 0), ProgressPacer::kApplicationDrivesSleepUs);
  }
  EXPECT_FALSE(r.pacer().thread_drives());
}

}  // namespace
}  // namespace uroce::runtime
