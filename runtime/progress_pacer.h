// Inline progress: when the library's progress thread polls the engines and
// how long it sleeps between rounds. A pure policy (no clock, no thread, no
// engine), so that its choices can be tested one round at a time; the
// progress thread (Process::ProgressLoop) feeds it what it saw.
//
// Who drives the engines:
// - Nobody polls a CQ (a program blocked in read(), or waiting on a
//   completion channel): the thread polls, at once while there is work and
//   otherwise after a sleep of 1 us doubling up to [engine] progress_idle_us.
// - An application thread polls a CQ, so drives its engine itself
//   (ibv_poll_cq, fi_cq_read): the thread stays out of its way, sleeping
//   kApplicationDrivesSleepUs, since on a machine with as many busy threads as
//   cores a second poller only takes time slices from the one that polls.
//   After each such sleep the thread polls once, a probe.
// - An application that polls a CQ for its own completions and spins on its
//   memory for the peer's, as perftest's ib_write_lat does (it polls its send
//   CQ until its WRITE completes, then waits for the peer's RDMA WRITE to
//   change a byte of its buffer), polls busily yet does not drive: the
//   peer's frames wait for whoever polls next. When the thread's probe finds
//   frames waiting, the thread takes over and polls as if nobody did. It
//   hands back once the application's polls move more than kHandBackShare
//   times the thread's frames within a kWindowUs window: the application
//   polls for its frames again (a busy poller whose frame the probe happened
//   to find costs one window).
// An RDMA NIC places a WRITE without the program's help (IBTA 9.4.3: the
// responder places it and the requester completes it; nothing at the
// target polls); the thread is what stands in for that here.
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce::runtime {

class ProgressPacer {
 public:
  // How long the thread stays away while an application thread polls. A
  // wake-up costs a 2-core VM ~50 us of the CPU the application polls on;
  // every 50 us it took more than half of it (ibv_rc_pingpong 22-34 us per
  // iteration against 6.6-7.2).
  static constexpr unsigned kApplicationDrivesSleepUs = 2000;
  // The window over which the thread weighs its frames against the
  // application's before it hands back.
  static constexpr uint64_t kWindowUs = 2000;
  static constexpr uint64_t kHandBackShare = 8;

  explicit ProgressPacer(unsigned idle_us) : idle_us_(std::max(1u, idle_us)) {}

  // Start of a round, at `now_us`, with the application's poll count and the
  // frames its polls moved (both running totals), and whether a thread waits
  // for a completion (an armed CQ, a blocking fabric wait: then nobody polls,
  // whatever the count says). True: the thread polls the engines this round.
  bool StartRound(uint64_t now_us, uint64_t app_polls, uint64_t app_moved, bool waited_on) {
    const bool app_polled = app_polls != seen_app_polls_;
    seen_app_polls_ = app_polls;
    now_us_ = now_us;
    window_app_moved_ += app_moved - seen_app_moved_;
    seen_app_moved_ = app_moved;
    app_polled_ = app_polled;
    waited_on_ = waited_on;
    return waited_on || thread_drives_ || !app_polled_ || probe_due_;
  }

  // End of the round: the frames the thread's polls moved and the other work
  // it did (completion channels, events). Returns how long to sleep, in us
  // (0: at once).
  unsigned EndRound(unsigned thread_moved, unsigned other_work) {
    probe_due_ = false;
    window_thread_moved_ += thread_moved;
    if (!thread_drives_ && !waited_on_ && thread_moved != 0) {
      // Frames waited for the thread: nobody polls, or the application's
      // polls are not for them.
      thread_drives_ = true;
      if (app_polled_) takeovers_++;
      StartWindow();
    } else if (thread_drives_ && now_us_ - window_start_us_ >= kWindowUs) {
      if (window_app_moved_ > kHandBackShare * window_thread_moved_) thread_drives_ = false;
      StartWindow();
    }
    if (!thread_drives_ && !waited_on_ && app_polled_) {
      probe_due_ = true;
      backoff_us_ = idle_us_;
      return kApplicationDrivesSleepUs;
    }
    if (thread_moved != 0 || other_work != 0) {
      backoff_us_ = 0;  // busy: at once again
      return 0;
    }
    backoff_us_ = backoff_us_ == 0 ? 1 : std::min(backoff_us_ * 2, idle_us_);
    return backoff_us_;
  }

  bool thread_drives() const { return thread_drives_; }
  // How often the thread took over from an application that polled.
  uint64_t takeovers() const { return takeovers_; }

 private:
  void StartWindow() {
    window_start_us_ = now_us_;
    window_app_moved_ = 0;
    window_thread_moved_ = 0;
  }

  const unsigned idle_us_;
  uint64_t seen_app_polls_ = 0;
  uint64_t seen_app_moved_ = 0;
  uint64_t now_us_ = 0;
  bool app_polled_ = false;
  bool waited_on_ = false;
  bool probe_due_ = false;
  bool thread_drives_ = false;
  uint64_t window_start_us_ = 0;
  uint64_t window_app_moved_ = 0;
  uint64_t window_thread_moved_ = 0;
  unsigned backoff_us_ = 0;
  uint64_t takeovers_ = 0;
};

}  // namespace uroce::runtime
