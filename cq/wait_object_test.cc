#include "cq/wait_object.h"

#include <poll.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace uroce::cq {
namespace {

std::unique_ptr<WaitObject> Make(fi_wait_obj kind) {
  auto made = WaitObject::Create(kind, nullptr);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(*made) : nullptr;
}

TEST(Deadline, NegativeTimeoutMeansNever) {
  Deadline never = Deadline::AfterMilliseconds(-1);
  EXPECT_TRUE(never.never());
  EXPECT_FALSE(never.Expired());
  EXPECT_TRUE(Deadline::AfterMilliseconds(0).Expired());
  EXPECT_FALSE(Deadline::AfterMilliseconds(60000).Expired());
}

TEST(WaitObject, CreateChecksTheKind) {
  auto none = WaitObject::Create(FI_WAIT_NONE, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto unspec = Make(FI_WAIT_UNSPEC);
  ASSERT_NE(unspec, nullptr);
  EXPECT_EQ(unspec->kind(), FI_WAIT_FD);  // what ofi_rxm can epoll
  auto mutex_cond = Make(FI_WAIT_MUTEX_COND);  // kept when asked for
  ASSERT_NE(mutex_cond, nullptr);
  EXPECT_EQ(mutex_cond->kind(), FI_WAIT_MUTEX_COND);
  EXPECT_EQ(WaitObject::Create(FI_WAIT_SET, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  fid_wait wait_set = {};
  EXPECT_EQ(WaitObject::Create(FI_WAIT_SET, &wait_set).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(WaitObject::Create(FI_WAIT_POLLFD, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(WaitObject, ReadyConditionEndsTheWaitAtOnce) {
  for (fi_wait_obj kind : {FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    auto wait = Make(kind);
    EXPECT_EQ(wait->Wait([] { return true; }, Deadline::Never()),
              WaitOutcome::kReady);
    EXPECT_EQ(wait->Wait([] { return false; },
                         Deadline::AfterMilliseconds(1)),
              WaitOutcome::kTimedOut);
  }
}

TEST(WaitObject, InterruptWithoutWaiterIsKeptForTheNextWait) {
  for (fi_wait_obj kind : {FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    auto wait = Make(kind);
    wait->Interrupt();
    EXPECT_EQ(wait->Wait([] { return false; }, Deadline::Never()),
              WaitOutcome::kInterrupted);
    EXPECT_EQ(wait->Wait([] { return false; }, Deadline::AfterMilliseconds(1)),
              WaitOutcome::kTimedOut);
  }
}

TEST(WaitObject, NotifyWakesABlockedWaiter) {
  for (fi_wait_obj kind : {FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    auto wait = Make(kind);
    std::atomic<bool> published{false};
    WaitOutcome outcome = WaitOutcome::kTimedOut;
    std::thread waiter([&] {
      outcome = wait->Wait([&] { return published.load(); },
                           Deadline::AfterMilliseconds(30000));
    });
    published.store(true, std::memory_order_seq_cst);
    wait->NotifyAfterPublish();
    waiter.join();
    EXPECT_EQ(outcome, WaitOutcome::kReady);
  }
}

TEST(WaitObject, FdIsWrittenOnlyAfterTryWait) {
  auto wait = Make(FI_WAIT_FD);
  int fd = -1;
  ASSERT_EQ(wait->GetWait(&fd), 0);
  pollfd pfd = {fd, POLLIN, 0};
  wait->NotifyAfterPublish();  // nobody announced: no write
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  EXPECT_EQ(wait->TryWait([] { return false; }), 0);
  wait->NotifyAfterPublish();
  EXPECT_EQ(poll(&pfd, 1, 0), 1);
  // The announcement was used up by that signal.
  EXPECT_EQ(wait->TryWait([] { return true; }), -FI_EAGAIN);  // drains
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  EXPECT_EQ(wait->GetWait(nullptr), -FI_EINVAL);
}

TEST(WaitObject, YieldHasNoNativeObject) {
  auto wait = Make(FI_WAIT_YIELD);
  int fd;
  EXPECT_EQ(wait->GetWait(&fd), -FI_ENODATA);
  EXPECT_EQ(wait->TryWait([] { return false; }), -FI_EINVAL);
}

}  // namespace
}  // namespace uroce::cq
