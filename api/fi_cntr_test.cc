// fi_cntr(3), rule by rule, through libfabric's inline calls on counters from
// uroce_cntr_open, fed by uroce_cntr_push_wc as the engine feeds them.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "api/fi_test_util.h"
#include "api/uroce_cq.h"

namespace uroce::testing {
namespace {

TEST(FiCntrOpen, NullArgumentsAreInvalid) {
  fi_cntr_attr attr = CntrAttr();
  fid_cntr* cntr = nullptr;
  EXPECT_EQ(uroce_cntr_open(nullptr, &cntr, nullptr), -FI_EINVAL);
  EXPECT_EQ(uroce_cntr_open(&attr, nullptr, nullptr), -FI_EINVAL);
}

TEST(FiCntrOpen, FlagsMustBeZero) {
  fi_cntr_attr attr = CntrAttr();
  attr.flags = 1;
  fid_cntr* cntr = nullptr;
  EXPECT_EQ(uroce_cntr_open(&attr, &cntr, nullptr), -FI_EINVAL);
}

TEST(FiCntrOpen, OnlyCompletionEventsAreCounted) {
  fi_cntr_attr attr = CntrAttr();
  attr.events = static_cast<fi_cntr_events>(1);
  fid_cntr* cntr = nullptr;
  EXPECT_EQ(uroce_cntr_open(&attr, &cntr, nullptr), -FI_EINVAL);
}

TEST(FiCntrOpen, WaitObjectsAreCheckedAsForCqs) {
  fid_cntr* cntr = nullptr;
  fi_cntr_attr attr = CntrAttr(FI_WAIT_SET);
  EXPECT_EQ(uroce_cntr_open(&attr, &cntr, nullptr), -FI_EINVAL);
  attr.wait_obj = static_cast<fi_wait_obj>(50);
  EXPECT_EQ(uroce_cntr_open(&attr, &cntr, nullptr), -FI_EINVAL);
  for (fi_wait_obj kind : {FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD,
                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    int marker;
    CntrPtr opened = OpenCntr(CntrAttr(kind), &marker);
    ASSERT_TRUE(opened) << kind;
    EXPECT_EQ(opened->fid.context, &marker);
    EXPECT_EQ(opened->fid.fclass, static_cast<size_t>(FI_CLASS_CNTR));
  }
}

// "Counters typically only count successful completions. However, if an
// operation completes in error, it may increment an associated error value."
TEST(FiCntrRead, SuccessfulCompletionsCountFailedOnesAreErrors) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  ibv_wc wcs[5] = {SuccessWc(1), SuccessWc(2),
                   FailedWc(3, IBV_WC_REM_ACCESS_ERR), SuccessWc(4),
                   FailedWc(5, IBV_WC_WR_FLUSH_ERR)};
  EXPECT_EQ(uroce_cntr_push_wc(cntr.get(), wcs, 5), 5);
  EXPECT_EQ(fi_cntr_read(cntr.get()), 3u);
  EXPECT_EQ(fi_cntr_readerr(cntr.get()), 2u);
}

TEST(FiCntrAdd, AddsToTheValueAndTheErrorValue) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  EXPECT_EQ(fi_cntr_add(cntr.get(), 10), 0);
  EXPECT_EQ(fi_cntr_add(cntr.get(), 5), 0);
  EXPECT_EQ(fi_cntr_adderr(cntr.get(), 2), 0);
  EXPECT_EQ(fi_cntr_read(cntr.get()), 15u);
  EXPECT_EQ(fi_cntr_readerr(cntr.get()), 2u);
}

TEST(FiCntrSet, SetsTheValueAndTheErrorValue) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  ASSERT_EQ(fi_cntr_add(cntr.get(), 10), 0);
  EXPECT_EQ(fi_cntr_set(cntr.get(), 3), 0);
  EXPECT_EQ(fi_cntr_seterr(cntr.get(), 7), 0);
  EXPECT_EQ(fi_cntr_read(cntr.get()), 3u);
  EXPECT_EQ(fi_cntr_readerr(cntr.get()), 7u);
  EXPECT_EQ(fi_cntr_seterr(cntr.get(), 0), 0);
  EXPECT_EQ(fi_cntr_readerr(cntr.get()), 0u);
}

TEST(FiCntrWait, RefusedWithoutAWaitObject) {
  CntrPtr cntr = OpenCntr(CntrAttr(FI_WAIT_NONE));
  EXPECT_EQ(fi_cntr_wait(cntr.get(), 0, 0), -FI_ENOSYS);
}

class FiCntrWaitObjects : public ::testing::TestWithParam<fi_wait_obj> {};

TEST_P(FiCntrWaitObjects, ReturnsAtOnceWhenTheThresholdIsReached) {
  CntrPtr cntr = OpenCntr(CntrAttr(GetParam()));
  ASSERT_EQ(fi_cntr_add(cntr.get(), 4), 0);
  EXPECT_EQ(fi_cntr_wait(cntr.get(), 4, -1), 0);
  EXPECT_EQ(fi_cntr_wait(cntr.get(), 0, 0), 0);
}

TEST_P(FiCntrWaitObjects, TimeoutReturnsEtimedoutAndLeavesTheErrorValue) {
  CntrPtr cntr = OpenCntr(CntrAttr(GetParam()));
  ASSERT_EQ(fi_cntr_adderr(cntr.get(), 1), 0);
  EXPECT_EQ(fi_cntr_wait(cntr.get(), 1, 5), -FI_ETIMEDOUT);
  EXPECT_EQ(fi_cntr_wait(cntr.get(), 1, 0), -FI_ETIMEDOUT);
  EXPECT_EQ(fi_cntr_readerr(cntr.get()), 1u);
}

TEST_P(FiCntrWaitObjects, CompletionsWakeAWaiter) {
  CntrPtr cntr = OpenCntr(CntrAttr(GetParam()));
  int result = 1;
  std::thread waiter(
      [&] { result = fi_cntr_wait(cntr.get(), 3, kHangGuardMs); });
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_wc wc = SuccessWc(i);
    ASSERT_EQ(uroce_cntr_push_wc(cntr.get(), &wc, 1), 1);
  }
  waiter.join();
  EXPECT_EQ(result, 0);
  EXPECT_GE(fi_cntr_read(cntr.get()), 3u);
}

// "Any change in a counter's error value will unblock any thread inside
// fi_cntr_wait."
TEST_P(FiCntrWaitObjects, AnErrorValueChangeUnblocksAWaiterWithEavail) {
  CntrPtr cntr = OpenCntr(CntrAttr(GetParam()));
  std::atomic<int> result{1};
  std::thread waiter(
      [&] { result = fi_cntr_wait(cntr.get(), 100, kHangGuardMs); });
  // The waiter may not have started yet; it compares with the error value
  // it finds, so keep changing it until it has returned.
  while (true) {
    ibv_wc wc = FailedWc(1, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(uroce_cntr_push_wc(cntr.get(), &wc, 1), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (fi_cntr_readerr(cntr.get()) > 1000) break;  // hang guard
    if (result != 1) break;
  }
  waiter.join();
  EXPECT_EQ(result.load(), -FI_EAVAIL);
}

INSTANTIATE_TEST_SUITE_P(AllBlockingKinds, FiCntrWaitObjects,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD));

TEST(FiCntrControl, GetAndSetOpsFlags) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  uint64_t flags = 1;
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETOPSFLAG, &flags), 0);
  EXPECT_EQ(flags, 0u);
  flags = FI_TRANSMIT_COMPLETE;
  ASSERT_EQ(fi_control(&cntr->fid, FI_SETOPSFLAG, &flags), 0);
  flags = 0;
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETOPSFLAG, &flags), 0);
  EXPECT_EQ(flags, FI_TRANSMIT_COMPLETE);
  EXPECT_EQ(fi_control(&cntr->fid, FI_GETOPSFLAG, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&cntr->fid, FI_ENABLE, nullptr), -FI_ENOSYS);
}

TEST(FiCntrControl, GetWaitGivesAnFdThatTryWaitArms) {
  CntrPtr cntr = OpenCntr(CntrAttr(FI_WAIT_FD));
  int fd = -1;
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  fi_wait_obj kind = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_FD);
  ASSERT_EQ(uroce_trywait(&cntr->fid), 0);
  ASSERT_EQ(fi_cntr_add(cntr.get(), 1), 0);
  pollfd pfd = {fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, kHangGuardMs), 1);
  // Changed since the application last read it: read first.
  EXPECT_EQ(uroce_trywait(&cntr->fid), -FI_EAGAIN);
  EXPECT_EQ(fi_cntr_read(cntr.get()), 1u);
  EXPECT_EQ(uroce_trywait(&cntr->fid), 0);
}

TEST(FiCntrControl, GetWaitOnWaitNoneIsEnodata) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  int fd = -1;
  EXPECT_EQ(fi_control(&cntr->fid, FI_GETWAIT, &fd), -FI_ENODATA);
  EXPECT_EQ(uroce_trywait(&cntr->fid), -FI_EINVAL);
}

TEST(FiCntrOps, UnsupportedOperationsAreEnosys) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  EXPECT_EQ(cntr->fid.ops->bind(&cntr->fid, &cntr->fid, 0), -FI_ENOSYS);
  void* ops = nullptr;
  EXPECT_EQ(fi_open_ops(&cntr->fid, "x", 0, &ops, nullptr), -FI_ENOSYS);
  EXPECT_EQ(cntr->ops->size, sizeof(fi_ops_cntr));
}

TEST(FiCntrClose, BusyWhileBoundToAnEndpoint) {
  fid_cntr* cntr = nullptr;
  fi_cntr_attr attr = CntrAttr(FI_WAIT_FD);
  ASSERT_EQ(uroce_cntr_open(&attr, &cntr, nullptr), 0);
  ASSERT_EQ(uroce_fid_bind_ep(&cntr->fid), 0);
  EXPECT_EQ(fi_close(&cntr->fid), -FI_EBUSY);
  ASSERT_EQ(uroce_fid_unbind_ep(&cntr->fid), 0);
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

TEST(UroceCntrPushWc, InvalidArgumentsAreRefused) {
  CntrPtr cntr = OpenCntr(CntrAttr());
  ibv_wc wc = SuccessWc(1);
  EXPECT_EQ(uroce_cntr_push_wc(nullptr, &wc, 1), -FI_EINVAL);
  EXPECT_EQ(uroce_cntr_push_wc(cntr.get(), nullptr, 1), -FI_EINVAL);
  CqPtr cq = OpenCq(CqAttr());
  EXPECT_EQ(uroce_cntr_push_wc(reinterpret_cast<fid_cntr*>(cq.get()), &wc, 1),
            -FI_EINVAL);
}

}  // namespace
}  // namespace uroce::testing
