// The engine-side completion queue: polled rings (verbs) and the one-hop
// path to libfabric sinks with back-pressure.
#include "transport/completion_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::transport {
namespace {

ibv_wc Wc(uint64_t wr_id) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  return wc;
}

// A sink that takes at most `room` completions until given more.
class RecordingSink : public cq::CompletionSink {
 public:
  explicit RecordingSink(size_t room) : room_(room) {}
  size_t PushCompletions(const ibv_wc* wcs, size_t count) override {
    const size_t taken = std::min(count, room_);
    for (size_t i = 0; i < taken; ++i) ids.push_back(wcs[i].wr_id);
    room_ -= taken;
    ++calls;
    return taken;
  }
  void Give(size_t room) { room_ += room; }
  std::vector<uint64_t> ids;
  size_t calls = 0;

 private:
  size_t room_;
};

TEST(EngineCompletionQueue, WithoutSinksCompletionsWaitForAPoller) {
  CompletionQueue cq(4);
  ASSERT_TRUE(cq.Push(Wc(1)));
  ASSERT_TRUE(cq.Push(Wc(2)));
  ibv_wc out[4];
  ASSERT_EQ(cq.Poll(4, out), 2);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 2u);
  EXPECT_EQ(cq.pushed(), 2u);
}

TEST(EngineCompletionQueue, OverrunWhenFull) {
  CompletionQueue cq(1);
  size_t pushed = 0;
  while (cq.Push(Wc(pushed))) ++pushed;
  EXPECT_EQ(pushed, cq.capacity());
  EXPECT_TRUE(cq.overrun());
  EXPECT_EQ(cq.overruns(), 1u);
}

TEST(EngineCompletionQueue, WithSinksACompletionReachesThemAtOnce) {
  CompletionQueue cq(8);
  RecordingSink fabric_cq(100), counter(100);
  cq.AttachSinks(&fabric_cq, &counter);
  ASSERT_TRUE(cq.Push(Wc(7)));
  // No ForwardToSinks: the completion is in the sinks already (one hop).
  EXPECT_EQ(fabric_cq.ids, std::vector<uint64_t>{7});
  EXPECT_EQ(counter.ids, std::vector<uint64_t>{7});
  EXPECT_EQ(cq.ApproxDepth(), 0u);
  EXPECT_EQ(cq.ForwardToSinks(), 0u);
}

TEST(EngineCompletionQueue, AFullSinkHoldsCompletionsBackInOrderAndTheCounterCountsEachOnce) {
  CompletionQueue cq(8);
  RecordingSink fabric_cq(1), counter(100);
  cq.AttachSinks(&fabric_cq, &counter);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(cq.Push(Wc(id)));
  // 1 went through; 2 waits (the CQ was full); 3..5 queue behind it.
  EXPECT_EQ(fabric_cq.ids, std::vector<uint64_t>{1});
  EXPECT_EQ(cq.ForwardToSinks(), 0u);  // still full
  fabric_cq.Give(2);
  EXPECT_EQ(cq.ForwardToSinks(), 2u);
  EXPECT_EQ(fabric_cq.ids, (std::vector<uint64_t>{1, 2, 3}));
  // A new completion while some are held back goes behind them.
  ASSERT_TRUE(cq.Push(Wc(6)));
  EXPECT_EQ(fabric_cq.ids, (std::vector<uint64_t>{1, 2, 3}));
  fabric_cq.Give(100);
  EXPECT_EQ(cq.ForwardToSinks(), 3u);
  EXPECT_EQ(fabric_cq.ids, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(counter.ids, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  // Drained: the next one goes straight through again.
  ASSERT_TRUE(cq.Push(Wc(7)));
  EXPECT_EQ(fabric_cq.ids.back(), 7u);
  EXPECT_EQ(cq.pushed(), 7u);
  EXPECT_FALSE(cq.overrun());
}

TEST(EngineCompletionQueue, ACounterAloneTakesEverything) {
  CompletionQueue cq(2);
  RecordingSink counter(100);
  cq.AttachSinks(nullptr, &counter);
  for (uint64_t id = 1; id <= 10; ++id) ASSERT_TRUE(cq.Push(Wc(id)));
  EXPECT_EQ(counter.ids.size(), 10u);
  EXPECT_FALSE(cq.overrun());
}

TEST(EngineCompletionQueue, CompletionsPushedBeforeTheSinksCameAreForwardedFirst) {
  CompletionQueue cq(8);
  ASSERT_TRUE(cq.Push(Wc(1)));
  RecordingSink fabric_cq(100);
  cq.AttachSinks(&fabric_cq, nullptr);
  ASSERT_TRUE(cq.Push(Wc(2)));  // behind 1, which is still in the ring
  EXPECT_TRUE(fabric_cq.ids.empty());
  EXPECT_EQ(cq.ForwardToSinks(), 2u);
  EXPECT_EQ(fabric_cq.ids, (std::vector<uint64_t>{1, 2}));
}

}  // namespace
}  // namespace uroce::transport
