#include "cq/counter.h"

#include <rdma/fi_errno.h>

#include <cstring>

#include <gtest/gtest.h>

namespace uroce::cq {
namespace {

// Counts what a counter tells the progress it was opened with.
struct CountingProgress final : Progress {
  void Drive() override { ++drives; }
  void NoteBlocking() override { ++blocks; }
  int drives = 0;
  int blocks = 0;
};

std::unique_ptr<Counter> Open(fi_wait_obj wait_obj, Progress* progress = nullptr) {
  fi_cntr_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = wait_obj;
  auto opened = Counter::Open(attr, nullptr, progress);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(*opened) : nullptr;
}

ibv_wc Wc(ibv_wc_status status) {
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.status = status;
  return wc;
}

TEST(Counter, PushTakesEverythingAndCountsBothValues) {
  auto cntr = Open(FI_WAIT_NONE);
  CompletionSink* sink = cntr.get();
  ibv_wc wcs[4] = {Wc(IBV_WC_SUCCESS), Wc(IBV_WC_REM_OP_ERR),
                   Wc(IBV_WC_SUCCESS), Wc(IBV_WC_SUCCESS)};
  EXPECT_EQ(sink->PushCompletions(wcs, 4), 4u);
  EXPECT_EQ(sink->PushCompletions(wcs, 0), 0u);
  EXPECT_EQ(cntr->Read(), 3u);
  EXPECT_EQ(cntr->ReadErr(), 1u);
}

TEST(Counter, FromFidKnowsOnlyUroceCounters) {
  auto cntr = Open(FI_WAIT_NONE);
  EXPECT_EQ(Counter::FromFid(cntr->fid()), cntr.get());
  EXPECT_EQ(Counter::FromFid(&cntr->fid()->fid), cntr.get());
  EXPECT_EQ(Counter::FromFid(static_cast<fid_cntr*>(nullptr)), nullptr);
  fid_cntr foreign;
  std::memset(&foreign, 0, sizeof(foreign));
  foreign.fid.fclass = FI_CLASS_CNTR;
  EXPECT_EQ(Counter::FromFid(&foreign), nullptr);
}

TEST(Counter, TryWaitSeesChangesSinceTheLastRead) {
  auto cntr = Open(FI_WAIT_MUTEX_COND);
  EXPECT_EQ(cntr->TryWait(), 0);
  ibv_wc wc = Wc(IBV_WC_SUCCESS);
  cntr->PushCompletions(&wc, 1);
  EXPECT_EQ(cntr->TryWait(), -FI_EAGAIN);
  cntr->Read();
  EXPECT_EQ(cntr->TryWait(), 0);
  wc = Wc(IBV_WC_FATAL_ERR);
  cntr->PushCompletions(&wc, 1);
  EXPECT_EQ(cntr->TryWait(), -FI_EAGAIN);
  cntr->ReadErr();
  EXPECT_EQ(cntr->TryWait(), 0);
}

TEST(Counter, EveryReadDrivesProgress) {
  CountingProgress progress;
  auto cntr = Open(FI_WAIT_NONE, &progress);
  cntr->Read();
  cntr->ReadErr();
  EXPECT_EQ(progress.drives, 2);
  EXPECT_EQ(progress.blocks, 0);
}

TEST(Counter, ProgressIsToldBeforeAWaiterMaySleep) {
  CountingProgress progress;
  auto cntr = Open(FI_WAIT_MUTEX_COND, &progress);
  const int& blocks = progress.blocks;
  EXPECT_EQ(cntr->TryWait(), 0);
  EXPECT_EQ(blocks, 1);
  EXPECT_EQ(cntr->Wait(1, 1), -FI_ETIMEDOUT);
  EXPECT_EQ(blocks, 2);
  ibv_wc wc = Wc(IBV_WC_SUCCESS);
  cntr->PushCompletions(&wc, 1);
  EXPECT_EQ(cntr->TryWait(), -FI_EAGAIN);
  EXPECT_EQ(blocks, 2);
}

TEST(Counter, WaitReturnsAvailWhenOnlyTheErrorValueMoved) {
  auto cntr = Open(FI_WAIT_YIELD);
  // Already changed before the wait began: not a change "while inside".
  cntr->AddErr(1);
  EXPECT_EQ(cntr->Wait(1, 0), -FI_ETIMEDOUT);
  cntr->Add(1);
  EXPECT_EQ(cntr->Wait(1, 0), 0);
}

}  // namespace
}  // namespace uroce::cq
