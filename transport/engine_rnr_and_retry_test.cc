// When the peer cannot take a request: RNR NAKs and retries, a dead peer, lost packets
// recovered, PSN wrap, and the IBTA timer tables behind them.
#include "transport/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

TEST_F(EngineTest, ReceiverNotReadyExhaustsRnrRetry) {
  Start();
  RcConnectOptions connect;
  connect.rnr_retry = 2;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer src = Register(pair_->a(), 64, 1);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 1), 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 2), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(pair_->a().engine->counters().rnr_naks_received, 3u);  // first try + 2 retries
}

TEST_F(EngineTest, ReceiveArrivingLateIsWaitedFor) {
  Start();
  auto qps = pair_->ConnectQps({});  // rnr_retry 7: for ever
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 64, 1);
  Buffer dst = Register(pair_->b(), 64, 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 1), 0);
  for (int i = 0; i < 200; ++i) pair_->PollOnce();
  EXPECT_GT(pair_->a().engine->counters().rnr_naks_received, 0u);
  PostRecv(pair_->b(), qb, dst, 9);
  auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(dst.bytes, src.bytes);
}

TEST_F(EngineTest, RnrStormNaksSendsThatHaveAReceive) {
  // [impair] rnr_storm: with a receive posted, the responder still answers
  // RNR NAK with the storm's probability; rnr_retry 7 carries every message
  // through, data intact; a storm of 1 exhausts a finite rnr_retry.
  EnginePairOptions options;
  options.engine_template.rnr_storm = 0.5;
  options.engine_template.rnr_storm_seed = 9;
  Start(options);
  auto qps = pair_->ConnectQps({});  // rnr_retry 7: for ever
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 64, 1);
  Buffer dst = Register(pair_->b(), 64, 0);
  for (uint64_t i = 0; i < 20; ++i) {
    PostRecv(pair_->b(), qb, dst, 100 + i);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, i), 0);
    auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
    auto got = pair_->WaitCompletions(pair_->b().cq, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(dst.bytes, src.bytes);
  const EngineCounters cb = pair_->b().engine->counters();
  EXPECT_GT(cb.rnr_storm_naks, 3u);
  EXPECT_LT(cb.rnr_storm_naks, 40u);
  EXPECT_EQ(cb.rnr_naks_sent, cb.rnr_storm_naks);
  EXPECT_EQ(pair_->a().engine->counters().rnr_naks_received, cb.rnr_storm_naks);
}

TEST_F(EngineTest, RnrStormExhaustsAFiniteRnrRetry) {
  EnginePairOptions options;
  options.engine_template.rnr_storm = 1.0;
  Start(options);
  RcConnectOptions connect;
  connect.rnr_retry = 1;
  auto qps2 = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps2.ok());
  Buffer src2 = Register(pair_->a(), 64, 1);
  Buffer dst2 = Register(pair_->b(), 64, 0);
  PostRecv(pair_->b(), qps2->second, dst2, 1);
  ASSERT_EQ(PostSend(pair_->a(), qps2->first, IBV_WR_SEND, src2, 64, 1), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(pair_->b().engine->counters().rnr_storm_naks, 2u);  // first try + 1 retry
}

TEST_F(EngineTest, DeadPeerIsRetryExceededAndFlushesTheRest) {
  Start();
  RcConnectOptions connect;
  connect.retry_cnt = 3;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  LinkImpairments dead;
  dead.loss = 1.0;
  pair_->link().set_impairments(dead);
  Buffer src = Register(pair_->a(), 64, 1);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, id), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 3);
  ASSERT_EQ(wc.size(), 3u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(pair_->a().engine->counters().timeouts, 4u);  // the first try and 3 retries
  EXPECT_EQ(qa->state.load(), IBV_QPS_ERR);
  // Posting in ERR still completes, as flushed.
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 4), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[0].wr_id, 4u);
}

TEST_F(EngineTest, PsnWrapsInsideAMultiPacketMessage) {
  Start();
  RcConnectOptions connect;
  connect.psn_a = 0xFFFFFE;
  connect.psn_b = 0xFFFFFD;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 8000, 0);
  Pattern(src, 5);
  Buffer dst = Register(pair_->b(), 8000, 0);
  for (int round = 0; round < 3; ++round) {
    PostRecv(pair_->b(), qb, dst, round);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 8000, round), 0);
    auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(dst.bytes, src.bytes);
  }
  EXPECT_LT(qa->req.psn.value(), 0x100u) << "the PSN wrapped";
}

TEST_F(EngineTest, TheMessageSequenceNumberWrapsAfter2To24Messages) {
  // A connection carries more than 2^24 messages: the AETH's MSN is 24 bits
  // (IBTA 9.3.5) and wraps. The responder starts a few messages short of
  // the wrap here instead of after 16,777,213 messages.
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  qb->resp.msn = 0xFFFFFD;
  Buffer src = Register(pair_->a(), 64, 0);
  Pattern(src, 6);
  Buffer dst = Register(pair_->b(), 64, 0);
  Buffer readback = Register(pair_->a(), 64, 0);
  for (uint64_t i = 0; i < 8; ++i) {
    // WRITEs are acknowledged with the MSN, READs answered with it.
    const ibv_wr_opcode op = i % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    Buffer& local = i % 2 ? readback : src;
    ASSERT_EQ(PostSend(pair_->a(), qa, op, local, 64, i, dst.addr(), dst.keys.rkey), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << "message " << i;
  }
  EXPECT_EQ(readback.bytes, src.bytes);
  EXPECT_EQ(pair_->b().engine->counters().tx_build_errors, 0u);
  EXPECT_EQ(qb->resp.msn, 0x1000005u);
}

// The BTH opcode of a frame built by the engine (IPv4, no VLAN).
uint8_t FrameOpcode(const rte_mbuf* m) { return rte_pktmbuf_mtod(m, const uint8_t*)[14 + 20 + 8]; }

TEST_F(EngineTest, LostReadResponseIsRecovered) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 4096, 0);
  Buffer remote = Register(pair_->b(), 4096, 0);
  Pattern(remote, 12);
  for (uint8_t victim : {uint8_t(0x0D), uint8_t(0x0E), uint8_t(0x0F), uint8_t(0x0C)}) {
    int dropped = 0;
    pair_->link().set_drop_filter([&](const rte_mbuf* m) {
      if (dropped == 0 && FrameOpcode(m) == victim) return ++dropped, true;
      return false;
    });
    std::fill(local.bytes.begin(), local.bytes.end(), 0);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_READ, local, 4096, victim, remote.addr(), remote.keys.rkey), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u) << int(victim);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << int(victim);
    EXPECT_EQ(dropped, 1);
    EXPECT_EQ(local.bytes, remote.bytes) << int(victim);
  }
}

TEST_F(EngineTest, LostAtomicRequestOrResponseIsRecovered) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer result = Register(pair_->a(), 8, 0);
  Buffer target = Register(pair_->b(), 8, 0);
  uint64_t expected = 0;
  for (uint8_t victim : {uint8_t(0x14), uint8_t(0x12)}) {
    int dropped = 0;
    pair_->link().set_drop_filter([&](const rte_mbuf* m) {
      if (dropped == 0 && FrameOpcode(m) == victim) return ++dropped, true;
      return false;
    });
    ibv_sge sge{result.addr(), 8, result.keys.lkey};
    ibv_send_wr wr = SignaledSendWr(victim, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge);
    wr.wr.atomic.remote_addr = target.addr();
    wr.wr.atomic.rkey = target.keys.rkey;
    wr.wr.atomic.compare_add = 1;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << int(victim);
    uint64_t original, now;
    std::memcpy(&original, result.bytes.data(), 8);
    std::memcpy(&now, target.bytes.data(), 8);
    EXPECT_EQ(original, expected) << "a replayed atomic returns the first result";
    EXPECT_EQ(now, expected + 1) << "and is not executed twice";
    expected = now;
  }
}

// Lost tails, on a QP whose application timeout is the usual 67 ms: the
// round trip is measured first, then the last SEND of a burst (or its ACK,
// or the probe too) is lost. Recovery takes round trips or an RTO of about
// 100 us, never the application's timeout, and spends no retry.
class LostTailTest : public EngineTest {
 protected:
  void SetUp() override {
    Start();
    RcConnectOptions connect;
    connect.timeout = 14;
    connect.retry_cnt = 1;
    auto qps = pair_->ConnectQps(connect);
    ASSERT_TRUE(qps.ok());
    qa_ = qps->first;
    qb_ = qps->second;
    src_ = Register(pair_->a(), 64, 1);
    dst_ = Register(pair_->b(), 64 * 64, 0);
    for (uint64_t id = 0; id < 8; ++id) SendOne(id);  // RTT samples
    ASSERT_NE(qa_->req.timer.srtt_ns(), 0u);
    remote_ = Register(pair_->b(), kReadBytes, 0);
    Pattern(remote_, 35);
    local_ = Register(pair_->a(), kReadBytes, 0);
  }
  // A READ of kReadBytes (16 packets) of b's pattern; the virtual time it took.
  uint64_t ReadOne(uint64_t id) {
    std::fill(local_.bytes.begin(), local_.bytes.end(), 0);
    const uint64_t start = pair_->now_ns();
    EXPECT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_READ, local_, kReadBytes, id, remote_.addr(), remote_.keys.rkey),
              0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (!wc.empty()) {
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    }
    EXPECT_TRUE(local_.bytes == remote_.bytes) << "the READ's data, every byte in its place";
    return pair_->now_ns() - start;
  }
  // One SEND and its completion; the virtual time it took.
  uint64_t SendOne(uint64_t id) {
    PostRecv(pair_->b(), qb_, dst_, id, static_cast<uint32_t>(64 * (id % 64)));
    const uint64_t start = pair_->now_ns();
    EXPECT_EQ(PostSend(pair_->a(), qa_, IBV_WR_SEND, src_, 64, id), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (!wc.empty()) {
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(pair_->WaitCompletions(pair_->b().cq, 1).size(), 1u);
    return pair_->now_ns() - start;
  }
  // The next `count` frames with this BTH opcode are lost.
  void Drop(uint8_t opcode, int count) {
    pair_->link().set_drop_filter([this, opcode, count](const rte_mbuf* m) {
      if (FrameOpcode(m) >= 0x0D && FrameOpcode(m) <= 0x10) ++read_responses_;  // READ response opcodes
      if (dropped_ < count && FrameOpcode(m) == opcode) return ++dropped_, true;
      return false;
    });
  }
  static constexpr uint32_t kReadBytes = 16 * 1024;
  QueuePair* qa_ = nullptr;
  QueuePair* qb_ = nullptr;
  Buffer src_, dst_;
  Buffer remote_, local_;
  int dropped_ = 0;
  int read_responses_ = 0;  // sent, lost or not
};

constexpr uint8_t kRcSendOnlyOpcode = 0x04, kRcAcknowledgeOpcode = 0x11;
constexpr uint8_t kRcReadRequestOpcode = 0x0C, kRcReadResponseMiddleOpcode = 0x0E,
                  kRcReadResponseLastOpcode = 0x0F;

TEST_F(LostTailTest, LostSendIsProbedAfterTwoRoundTrips) {
  Drop(kRcSendOnlyOpcode, 1);
  const uint64_t took = SendOne(100);
  EXPECT_EQ(dropped_, 1);
  EXPECT_LT(took, 60'000u) << "a probe, not the 67 ms timeout";
  EXPECT_EQ(qa_->counters.tail_probes, 1u);
  EXPECT_EQ(qa_->counters.rto_expiries, 0u);
  EXPECT_EQ(qa_->counters.timeouts, 0u);
}

TEST_F(LostTailTest, LostAckIsProbedAndAnsweredAsADuplicate) {
  Drop(kRcAcknowledgeOpcode, 1);
  const uint64_t took = SendOne(100);
  EXPECT_EQ(dropped_, 1);
  EXPECT_LT(took, 60'000u);
  EXPECT_EQ(qa_->counters.tail_probes, 1u);
  EXPECT_EQ(qb_->counters.duplicates, 1u) << "the probe arrived twice";
  EXPECT_EQ(qa_->counters.timeouts, 0u);
}

TEST_F(LostTailTest, ARunLostWithNothingAfterItGoesAgainWholeOnTheSecondRto) {
  // A WRITE of 32 packets loses packets 10..31 and the probe: the responder
  // holds nothing after the gap, so nothing makes it NAK. The first RTO
  // resends the oldest packet alone (a selective responder may hold the
  // rest); the second, still without a fresh sample, resends everything
  // from the oldest unacknowledged PSN. One packet per backed-off RTO would
  // reach the 67 ms timeout.
  constexpr uint32_t kPackets = 32;
  Buffer local = Register(pair_->a(), kPackets * 1024, 0);
  Pattern(local, 36);
  Buffer remote = Register(pair_->b(), kPackets * 1024, 0);
  int writes = 0;
  pair_->link().set_drop_filter([&writes](const rte_mbuf* m) {
    const int opcode = FrameOpcode(m);
    if (opcode < 0x06 || opcode > 0x08) return false;  // RC WRITE First, Middle, Last
    ++writes;
    return writes > 10 && writes <= 33;  // packets 10..31 as first sent, then the probe
  });
  const uint64_t start = pair_->now_ns();
  ASSERT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_WRITE, local, kPackets * 1024, 7, remote.addr(), remote.keys.rkey),
            0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_EQ(qa_->counters.timeouts, 0u);
  EXPECT_EQ(qa_->counters.rto_expiries, 2u);
  EXPECT_LT(pair_->now_ns() - start, 2'000'000u);
}

TEST_F(LostTailTest, LostProbeFallsBackToTheRto) {
  Drop(kRcSendOnlyOpcode, 2);  // the SEND and its probe
  const uint64_t took = SendOne(100);
  EXPECT_EQ(dropped_, 2);
  EXPECT_GE(took, 100'000u) << "the RTO's floor";
  EXPECT_LT(took, 400'000u);
  EXPECT_EQ(qa_->counters.tail_probes, 1u);
  EXPECT_EQ(qa_->counters.rto_expiries, 1u);
  EXPECT_EQ(qa_->counters.timeouts, 0u);
  // The retry budget was never touched: retry_cnt 1 would have failed a
  // second local ACK timeout.
  EXPECT_EQ(qa_->req.retries_left, 1u);
}

// Selective READ (docs/transport.md): a response packet lost in the middle
// is asked for alone, and what came after it is placed as it arrives.
TEST_F(LostTailTest, LostReadResponseIsAskedForAlone) {
  ASSERT_TRUE(qa_->req.selective);
  Drop(kRcReadResponseMiddleOpcode, 1);
  const uint64_t took = ReadOne(200);
  EXPECT_EQ(dropped_, 1);
  EXPECT_LT(took, 60'000u);
  EXPECT_EQ(qa_->counters.selective_resends, 1u);
  EXPECT_EQ(qb_->counters.duplicates, 1u) << "one request for the missing run";
  EXPECT_EQ(read_responses_, 17) << "16 responses and the one lost, again";
  EXPECT_EQ(qa_->counters.timeouts, 0u);
}

// Two READs outstanding, a response of the first lost: the second's
// responses are placed while the first waits, and only the lost packet is
// sent again.
TEST_F(LostTailTest, LaterReadIsPlacedWhileTheFirstWaits) {
  std::fill(local_.bytes.begin(), local_.bytes.end(), 0);
  Drop(kRcReadResponseMiddleOpcode, 1);
  constexpr uint32_t kHalf = kReadBytes / 2;
  for (uint32_t half = 0; half < 2; ++half) {
    ibv_sge sge{local_.addr() + half * kHalf, kHalf, local_.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = 300 + half;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote_.addr() + half * kHalf;
    wr.wr.rdma.rkey = remote_.keys.rkey;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(pair_->a().engine->PostSend(qa_, &wr, &bad), 0);
  }
  auto wc = pair_->WaitCompletions(pair_->a().cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(wc[i].wr_id, 300u + i);
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_TRUE(local_.bytes == remote_.bytes);
  EXPECT_EQ(dropped_, 1);
  EXPECT_EQ(read_responses_, 17) << "16 responses and the one lost, again";
  EXPECT_EQ(qa_->counters.timeouts, 0u);
}

// The last response packet of a READ lost: nothing after it reveals the
// gap; the RTO asks for it (the probe never copies a READ), not the 67 ms
// timeout, and for it alone.
TEST_F(LostTailTest, LostLastReadResponseIsAskedForOnTheRto) {
  Drop(kRcReadResponseLastOpcode, 1);
  const uint64_t took = ReadOne(201);
  EXPECT_EQ(dropped_, 1);
  EXPECT_LT(took, 1'000'000u) << "the RTO, not the 67 ms timeout";
  EXPECT_EQ(qa_->counters.rto_expiries, 1u);
  EXPECT_EQ(qa_->counters.tail_probes, 0u);
  EXPECT_EQ(qa_->counters.timeouts, 0u);
  EXPECT_EQ(read_responses_, 17) << "16 responses and the last one again";
}

// The READ request itself lost: asked for again on the RTO too.
TEST_F(LostTailTest, LostReadRequestIsAskedForOnTheRto) {
  Drop(kRcReadRequestOpcode, 1);
  const uint64_t took = ReadOne(202);
  EXPECT_EQ(dropped_, 1);
  EXPECT_LT(took, 1'000'000u);
  EXPECT_EQ(qa_->counters.rto_expiries, 1u);
  EXPECT_EQ(qa_->counters.timeouts, 0u);
}

TEST(TimerTableTest, LocalAckTimeoutFollowsIbta) {
  EXPECT_EQ(LocalAckTimeoutNs(0), 0u);  // "infinite"
  EXPECT_EQ(LocalAckTimeoutNs(1), 8192u);
  EXPECT_EQ(LocalAckTimeoutNs(14), 67108864u);  // 4.096 us * 2^14 = 67.1 ms
}

TEST(TimerTableTest, RnrTimerFollowsIbtaTable45) {
  EXPECT_EQ(RnrTimerNs(0), 655360000u);  // 655.36 ms
  EXPECT_EQ(RnrTimerNs(1), 10000u);      // 0.01 ms
  EXPECT_EQ(RnrTimerNs(14), 1280000u);   // 1.28 ms
  EXPECT_EQ(RnrTimerNs(31), 491520000u); // 491.52 ms
}

}  // namespace
}  // namespace uroce::transport
