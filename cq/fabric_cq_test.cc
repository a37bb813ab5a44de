#include "cq/fabric_cq.h"
#include "cq/wc_mapping.h"

#include <rdma/fi_errno.h>

#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace uroce::cq {
namespace {

fi_cq_attr Attr(size_t size, fi_wait_obj wait_obj = FI_WAIT_NONE) {
  fi_cq_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = size;
  attr.format = FI_CQ_FORMAT_DATA;
  attr.wait_obj = wait_obj;
  return attr;
}

ibv_wc Wc(uint64_t wr_id, ibv_wc_status status = IBV_WC_SUCCESS) {
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  return wc;
}

// Counts what a CQ tells the progress it was opened with.
struct CountingProgress final : Progress {
  void Drive() override { ++drives; }
  void NoteBlocking() override { ++blocks; }
  int drives = 0;
  int blocks = 0;
};

std::unique_ptr<FabricCq> Open(const fi_cq_attr& attr, Progress* progress = nullptr) {
  auto opened = FabricCq::Open(attr, nullptr, progress);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(*opened) : nullptr;
}

TEST(FabricCq, CapacityIsRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(Open(Attr(5))->capacity(), 8u);
  EXPECT_EQ(Open(Attr(8))->capacity(), 8u);
  EXPECT_EQ(Open(Attr(0))->capacity(), kDefaultCqSize);
  EXPECT_EQ(Open(Attr(1))->capacity(), 1u);
}

TEST(FabricCq, RingWrapsAroundManyTimesInOrder) {
  auto cq = Open(Attr(4));
  uint64_t pushed = 0, read = 0;
  std::vector<ibv_wc> burst;
  while (read < 1000) {
    burst.clear();
    for (uint64_t i = 0; i < 3; ++i) burst.push_back(Wc(pushed + i));
    pushed += cq->PushCompletions(burst.data(), burst.size());
    EXPECT_LE(cq->Available(), cq->capacity());
    fi_cq_data_entry entries[3];
    const ssize_t n = cq->ReadFrom(entries, 2, nullptr);
    for (ssize_t i = 0; i < n; ++i) {
      ASSERT_EQ(entries[i].op_context, reinterpret_cast<void*>(read++));
    }
  }
}

TEST(FabricCq, SourcesReachReadFrom) {
  auto cq = Open(Attr(8));
  ibv_wc wcs[2] = {Wc(1), Wc(2)};
  fi_addr_t sources[2] = {17, 42};
  ASSERT_EQ(cq->PushCompletionsFrom(wcs, sources, 2), 2u);
  fi_cq_data_entry entries[2];
  fi_addr_t read_sources[2] = {};
  ASSERT_EQ(cq->ReadFrom(entries, 2, read_sources), 2);
  EXPECT_EQ(read_sources[0], 17u);
  EXPECT_EQ(read_sources[1], 42u);
}

TEST(FabricCq, EveryReadDrivesProgress) {
  CountingProgress progress;
  auto cq = Open(Attr(8), &progress);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_read(cq->fid(), nullptr, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_read(cq->fid(), &entry, 1), -FI_EAGAIN);
  fi_cq_err_entry err = {};
  EXPECT_EQ(fi_cq_readerr(cq->fid(), &err, 0), -FI_EAGAIN);
  EXPECT_EQ(progress.drives, 3);
  EXPECT_EQ(progress.blocks, 0);
}

TEST(FabricCq, ProgressIsToldBeforeAReaderMaySleep) {
  // The provider's progress thread must drive the engines while a reader
  // sleeps (runtime/process.h NoteBlocking): told before every sleep,
  // and by a fi_trywait that allows one, never by one that refuses.
  CountingProgress progress;
  auto cq = Open(Attr(8, FI_WAIT_UNSPEC), &progress);
  int& blocks = progress.blocks;
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_sread(cq->fid(), &entry, 1, nullptr, 1), -FI_EAGAIN);
  EXPECT_GE(blocks, 1);
  blocks = 0;
  EXPECT_EQ(cq->TryWait(), FI_SUCCESS);
  EXPECT_EQ(blocks, 1);
  ibv_wc wc = Wc(7);
  cq->PushCompletions(&wc, 1);
  EXPECT_EQ(cq->TryWait(), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_sread(cq->fid(), &entry, 1, nullptr, 1000), 1);  // no sleep: it was there
  EXPECT_EQ(blocks, 1);
}

TEST(FabricCq, FromFidKnowsOnlyUroceCqs) {
  auto cq = Open(Attr(8));
  EXPECT_EQ(FabricCq::FromFid(cq->fid()), cq.get());
  EXPECT_EQ(FabricCq::FromFid(static_cast<fid_cq*>(nullptr)), nullptr);
  fid_cq foreign;
  std::memset(&foreign, 0, sizeof(foreign));
  foreign.fid.fclass = FI_CLASS_CQ;
  EXPECT_EQ(FabricCq::FromFid(&foreign), nullptr);
}

TEST(FabricCq, BindingsBlockClose) {
  auto cq = Open(Attr(8));
  EXPECT_EQ(cq->CheckClosable(), 0);
  cq->bindings().Add();
  EXPECT_EQ(cq->CheckClosable(), -FI_EBUSY);
  EXPECT_TRUE(cq->bindings().Remove());
  EXPECT_FALSE(cq->bindings().Remove());
  EXPECT_EQ(cq->CheckClosable(), 0);
}

// The engine-side interface the transport will use.
TEST(FabricCq, IsACompletionSink) {
  auto cq = Open(Attr(2, FI_WAIT_UNSPEC));
  CompletionSink* sink = cq.get();
  ibv_wc wcs[3] = {Wc(1), Wc(2, IBV_WC_WR_FLUSH_ERR), Wc(3)};
  EXPECT_EQ(sink->PushCompletions(wcs, 3), 2u);  // back-pressure
  EXPECT_EQ(cq->Available(), 2u);
}

// An operation that asked for no completion (fi_inject) still completes in
// verbs when it fails or is flushed; the CQ takes such a completion and keeps
// nothing of it, on a full ring too, so the engine does not hold it back.
TEST(FabricCq, TakesAndDropsCompletionsNobodyAskedFor) {
  auto cq = Open(Attr(2));
  ibv_wc wcs[5] = {Wc(1), Wc(kNoCompletionWrId, IBV_WC_REM_ACCESS_ERR), Wc(2, IBV_WC_WR_FLUSH_ERR),
                   Wc(kNoCompletionWrId, IBV_WC_WR_FLUSH_ERR), Wc(3)};
  // Two slots: 1 and 2 are queued, both unasked ones are taken, 3 waits.
  ASSERT_EQ(cq->PushCompletions(wcs, 5), 4u);
  EXPECT_EQ(cq->Available(), 2u);
  fi_cq_data_entry entry;
  ASSERT_EQ(cq->ReadFrom(&entry, 1, nullptr), 1);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(1));
  EXPECT_EQ(cq->ReadFrom(&entry, 1, nullptr), -FI_EAVAIL);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  ASSERT_EQ(cq->ReadErr(&err, 0), 1);
  EXPECT_EQ(err.op_context, reinterpret_cast<void*>(2));
  EXPECT_EQ(err.err, FI_ECANCELED);
  // Only unasked completions: all taken, nothing queued, nothing published.
  ASSERT_EQ(cq->PushCompletions(wcs + 1, 1), 1u);
  EXPECT_EQ(cq->Available(), 0u);
  ASSERT_EQ(cq->PushCompletions(wcs + 4, 1), 1u);
  ASSERT_EQ(cq->ReadFrom(&entry, 1, nullptr), 1);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(3));
}

TEST(FabricCq, ProducerThreadAgainstBlockedReader) {
  auto cq = Open(Attr(16, FI_WAIT_FD));
  constexpr uint64_t kTotal = 10000;
  std::thread producer([&] {
    for (uint64_t id = 0; id < kTotal;) {
      ibv_wc wc = Wc(id);
      id += cq->PushCompletions(&wc, 1);
    }
  });
  uint64_t expected = 0;
  while (expected < kTotal) {
    fi_cq_data_entry entries[4];
    const ssize_t n = cq->SReadFrom(entries, 4, nullptr, nullptr, 30000);
    ASSERT_GT(n, 0);
    for (ssize_t i = 0; i < n; ++i) {
      ASSERT_EQ(entries[i].op_context, reinterpret_cast<void*>(expected++));
    }
  }
  producer.join();
}

}  // namespace
}  // namespace uroce::cq
