// Work queues and the poll: SRQs, inline data, work request storage and SGE limits, fences,
// idle QPs, flushes and the asynchronous events of a QP in error, progress tokens.
#include "transport/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// An exit handler run by a signal on top of a control call must know that
// this thread holds a progress token (runtime/process.cc Shutdown).
TEST(ProgressTokenTest, AThreadKnowsItHoldsAControlToken) {
  EngineConfig config;
  config.max_qps = 4;
  EngineCore core(config);
  EXPECT_FALSE(ThisThreadHoldsAControlToken());
  {
    ProgressToken token(core);
    EXPECT_TRUE(ThisThreadHoldsAControlToken());
    bool other_thread_sees = true;
    std::thread([&] { other_thread_sees = ThisThreadHoldsAControlToken(); }).join();
    EXPECT_FALSE(other_thread_sees);
  }
  EXPECT_FALSE(ThisThreadHoldsAControlToken());
}

TEST_F(EngineTest, IdleQpsLeaveThePollAndComeBackWhenPostedTo) {
  // A poll runs only the QPs with work (the ready list).
  Start();
  std::vector<std::pair<QueuePair*, QueuePair*>> pairs;
  for (int i = 0; i < 4; ++i) {
    auto qps = pair_->ConnectQps({});
    ASSERT_TRUE(qps.ok()) << qps.status().ToString();
    pairs.push_back(*qps);
  }
  Buffer src = Register(pair_->a(), 64, 3);
  Buffer dst = Register(pair_->b(), 64, 0);
  for (int i = 0; i < 10; ++i) pair_->PollOnce();
  EXPECT_EQ(pair_->a().engine->busy_qp_count(), 0u) << "connected QPs with nothing to do";
  EXPECT_EQ(pair_->b().engine->busy_qp_count(), 0u);
  // Each QP in turn: a message, then it is idle again.
  for (uint64_t round = 0; round < 3; ++round) {
    for (auto [qa, qb] : pairs) {
      PostRecv(pair_->b(), qb, dst, round);
      ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, round), 0);
      EXPECT_EQ(pair_->WaitCompletions(pair_->b().cq, 1).size(), 1u);
      EXPECT_EQ(pair_->WaitCompletions(pair_->a().cq, 1).size(), 1u);
    }
  }
  for (int i = 0; i < 10; ++i) pair_->PollOnce();
  EXPECT_EQ(pair_->a().engine->busy_qp_count(), 0u);
  // A QP destroyed while its doorbell waits for the engine: nothing of it
  // stays behind (ASan would see a poll touch it).
  auto [qa, qb] = pairs.back();
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 99), 0);
  ASSERT_TRUE(pair_->a().engine->DestroyQp(qa).ok());
  for (int i = 0; i < 10; ++i) pair_->PollOnce();
  EXPECT_EQ(pair_->a().engine->busy_qp_count(), 0u);
  // A receive posted in the error state is flushed by the next polls.
  QueuePair* other = pairs.front().second;
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_TRUE(pair_->b().engine->ModifyQp(other, err, IBV_QP_STATE).ok());
  for (int i = 0; i < 10; ++i) pair_->PollOnce();
  PostRecv(pair_->b(), other, dst, 1234);
  auto flushed = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 1234u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  (void)qb;
}

TEST_F(EngineTest, SharedReceiveQueueFeedsTwoQpsAndRaisesItsLimitEvent) {
  Start();
  auto srq = pair_->b().engine->CreateSrq(pair_->b().pd, 64, 1, /*limit=*/3);
  ASSERT_TRUE(srq.ok()) << srq.status().ToString();
  RcConnectOptions connect;
  connect.srq_b = *srq;
  auto first = pair_->ConnectQps(connect);
  auto second = pair_->ConnectQps(connect);
  ASSERT_TRUE(first.ok() && second.ok());
  Buffer dst = Register(pair_->b(), 64 * 8, 0);
  for (uint32_t i = 0; i < 8; ++i) {
    ibv_sge sge{dst.addr() + 64 * i, 64, dst.keys.lkey};
    ibv_recv_wr wr = RecvWr(100 + i, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(pair_->b().engine->PostSrqRecv(*srq, &wr, &bad), 0);
  }
  // Posting to a QP that has an SRQ is refused.
  ibv_sge sge{dst.addr(), 64, dst.keys.lkey};
  ibv_recv_wr direct = RecvWr(0, &sge);
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(pair_->b().engine->PostRecv(first->second, &direct, &bad), EINVAL);

  Buffer src = Register(pair_->a(), 64, 5);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostSend(pair_->a(), first->first, IBV_WR_SEND, src, 64, i), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostSend(pair_->a(), second->first, IBV_WR_SEND, src, 64, 10 + i), 0);
  auto wc = pair_->WaitCompletions(pair_->b().cq, 6);
  ASSERT_EQ(wc.size(), 6u);
  int on_first = 0;
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_GE(w.wr_id, 100u);
    on_first += w.qp_num == first->second->qpn;
  }
  EXPECT_EQ(on_first, 3);
  // 2 left < limit 3: the event fired once.
  AsyncEvent event;
  bool limit_seen = false;
  while (pair_->b().engine->NextAsyncEvent(&event)) limit_seen |= event.type == IBV_EVENT_SRQ_LIMIT_REACHED;
  EXPECT_TRUE(limit_seen);
  EXPECT_EQ((*srq)->limit_events.load(), 1u);
  EXPECT_EQ((*srq)->limit.load(), 0u) << "disarmed after firing";
}

TEST_F(EngineTest, InlineDataIsCopiedAtPostTime) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer dst = Register(pair_->b(), 128, 0);
  PostRecv(pair_->b(), qb, dst, 1);
  std::vector<uint8_t> unregistered(100, 0x5C);  // inline data needs no MR
  ibv_sge sge{reinterpret_cast<uint64_t>(unregistered.data()), 100, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  std::fill(unregistered.begin(), unregistered.end(), 0);  // reusable at once
  auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(dst.bytes[i], 0x5C);
}

// Memory per QP: a QP's send and receive queues and its window
// are sized from its capabilities. ibv_rc_pingpong's 256/256 work requests
// with one SGE each and no inline data take at most 64 KiB, and such a QP
// still runs several full send queues' worth of traffic (its slots are
// reused many times over).
TEST_F(EngineTest, WorkRequestStorageFollowsTheCapabilities) {
  Start();
  RcConnectOptions small;
  small.max_send_wr = 256;
  small.max_recv_wr = 256;
  small.max_send_sge = 1;
  small.max_recv_sge = 1;
  small.max_inline_data = 0;
  auto qps = pair_->ConnectQps(small);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  EXPECT_LE(qa->WorkRequestBytes(), 64u * 1024);
  EXPECT_LE(qb->WorkRequestBytes(), 64u * 1024);

  RcConnectOptions large = small;
  large.max_send_sge = kMaxSendSge;
  large.max_recv_sge = kMaxRecvSge;
  large.max_inline_data = kMaxInlineData;
  auto large_qps = pair_->ConnectQps(large);
  ASSERT_TRUE(large_qps.ok()) << large_qps.status().ToString();
  EXPECT_GT(large_qps->first->WorkRequestBytes(), qa->WorkRequestBytes());
  RecordProperty("bytes_256_256_1_1_0", std::to_string(qa->WorkRequestBytes()));
  RecordProperty("bytes_256_256_16_16_256", std::to_string(large_qps->first->WorkRequestBytes()));

  // More SGEs or inline bytes than the capabilities allow are refused.
  Buffer src = Register(pair_->a(), 256 * 64, 0);
  Pattern(src, 16);
  ibv_sge two[2] = {{src.addr(), 8, src.keys.lkey}, {src.addr() + 8, 8, src.keys.lkey}};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = two;
  wr.num_sge = 2;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), EINVAL);
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), EINVAL);

  Buffer dst = Register(pair_->b(), 256 * 64, 0);
  for (int round = 0; round < 3; ++round) {
    std::fill(dst.bytes.begin(), dst.bytes.end(), 0);
    for (uint32_t i = 0; i < 256; ++i) PostRecv(pair_->b(), qb, dst, i, i * 64, 64);
    for (uint32_t i = 0; i < 256; ++i) {
      ibv_sge sge{src.addr() + i * 64, 64, src.keys.lkey};
      wr = SignaledSendWr(1000 + i, IBV_WR_SEND, &sge);
      ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0) << "round " << round << " request " << i;
    }
    auto recv = pair_->WaitCompletions(pair_->b().cq, 256);
    ASSERT_EQ(recv.size(), 256u);
    for (uint32_t i = 0; i < 256; ++i) {
      EXPECT_EQ(recv[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(recv[i].wr_id, i);
    }
    auto sent = pair_->WaitCompletions(pair_->a().cq, 256);
    ASSERT_EQ(sent.size(), 256u);
    for (uint32_t i = 0; i < 256; ++i) {
      EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(sent[i].wr_id, 1000 + i);
    }
    EXPECT_EQ(dst.bytes, src.bytes);
  }
}

// The other end of that sizing: a QP with the device's most SGEs and
// most inline data still carries requests that use all of them, on the
// send side (gather, multi-packet), the receive side (scatter) and for a
// READ's response (scatter into the requester's 16 SGEs).
TEST_F(EngineTest, MaxSgesAndMaxInlineDataStillWork) {
  Start();
  RcConnectOptions connect;
  connect.max_send_sge = kMaxSendSge;
  connect.max_recv_sge = kMaxRecvSge;
  connect.max_inline_data = kMaxInlineData;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  constexpr uint32_t kChunk = 300;  // 16 x 300 B: five packets at MTU 1024
  constexpr uint32_t kTotal = kMaxSendSge * kChunk;
  Buffer src = Register(pair_->a(), kTotal, 0);
  Pattern(src, 17);
  // Gathered in reverse: SGE i names chunk 15 - i.
  ibv_sge gather[kMaxSendSge];
  std::vector<uint8_t> message;
  for (uint32_t i = 0; i < kMaxSendSge; ++i) {
    const uint32_t chunk = kMaxSendSge - 1 - i;
    gather[i] = ibv_sge{src.addr() + chunk * kChunk, kChunk, src.keys.lkey};
    message.insert(message.end(), src.bytes.begin() + chunk * kChunk, src.bytes.begin() + (chunk + 1) * kChunk);
  }
  // Scattered with a 16-byte gap after each SGE (stays 0xEE).
  constexpr uint32_t kStride = kChunk + 16;
  Buffer dst = Register(pair_->b(), kMaxRecvSge * kStride, 0xEE);
  ibv_sge scatter[kMaxRecvSge];
  for (uint32_t i = 0; i < kMaxRecvSge; ++i) scatter[i] = ibv_sge{dst.addr() + i * kStride, kChunk, dst.keys.lkey};
  auto scattered = [&](size_t bytes) {
    std::vector<uint8_t> out;
    for (uint32_t i = 0; i < kMaxRecvSge && out.size() < bytes; ++i) {
      const size_t n = std::min<size_t>(kChunk, bytes - out.size());
      out.insert(out.end(), dst.bytes.begin() + i * kStride, dst.bytes.begin() + i * kStride + n);
      for (uint32_t g = kChunk; g < kStride; ++g) EXPECT_EQ(dst.bytes[i * kStride + g], 0xEE);
    }
    return out;
  };
  ibv_recv_wr rwr{};
  rwr.sg_list = scatter;
  rwr.num_sge = kMaxRecvSge;
  const ibv_recv_wr* rbad = nullptr;

  // 1. SEND, 16 SGEs each way.
  rwr.wr_id = 1;
  ASSERT_EQ(pair_->b().engine->PostRecv(qb, &rwr, &rbad), 0);
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = gather;
  wr.num_sge = kMaxSendSge;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, kTotal);
  EXPECT_EQ(scattered(kTotal), message);
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].wr_id, 2u);

  // 2. Inline SEND of kMaxInlineData bytes gathered from 16 pieces.
  std::vector<uint8_t> inline_bytes(kMaxInlineData);
  for (uint32_t i = 0; i < kMaxInlineData; ++i) inline_bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  constexpr uint32_t kPiece = kMaxInlineData / kMaxSendSge;
  ibv_sge pieces[kMaxSendSge];
  for (uint32_t i = 0; i < kMaxSendSge; ++i) {
    pieces[i] = ibv_sge{reinterpret_cast<uint64_t>(inline_bytes.data() + i * kPiece), kPiece, 0};
  }
  std::fill(dst.bytes.begin(), dst.bytes.end(), 0xEE);
  rwr.wr_id = 3;
  ASSERT_EQ(pair_->b().engine->PostRecv(qb, &rwr, &rbad), 0);
  wr.wr_id = 4;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.sg_list = pieces;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  const std::vector<uint8_t> posted = inline_bytes;
  std::fill(inline_bytes.begin(), inline_bytes.end(), 0);  // copied at post time
  recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, kMaxInlineData);
  EXPECT_EQ(scattered(kMaxInlineData), posted);
  sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  // One byte more than max_inline_data is refused.
  std::vector<uint8_t> too_long(kMaxInlineData + 1, 1);
  ibv_sge one{reinterpret_cast<uint64_t>(too_long.data()), kMaxInlineData + 1, 0};
  wr.sg_list = &one;
  wr.num_sge = 1;
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), EINVAL);

  // 3. RDMA READ of b's (contiguous) buffer into a's 16 SGEs, and a WRITE
  // back from them.
  Buffer remote = Register(pair_->b(), kTotal, 0);
  Pattern(remote, 18);
  Buffer local = Register(pair_->a(), kMaxSendSge * kStride, 0xEE);
  ibv_sge read_sges[kMaxSendSge];
  for (uint32_t i = 0; i < kMaxSendSge; ++i) read_sges[i] = ibv_sge{local.addr() + i * kStride, kChunk, local.keys.lkey};
  wr = {};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = read_sges;
  wr.num_sge = kMaxSendSge;
  wr.wr.rdma.remote_addr = remote.addr();
  wr.wr.rdma.rkey = remote.keys.rkey;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].byte_len, kTotal);
  for (uint32_t i = 0; i < kMaxSendSge; ++i) {
    ASSERT_EQ(0, std::memcmp(local.bytes.data() + i * kStride, remote.bytes.data() + i * kChunk, kChunk)) << i;
    for (uint32_t g = kChunk; g < kStride; ++g) ASSERT_EQ(local.bytes[i * kStride + g], 0xEE);
  }
  Buffer back = Register(pair_->b(), kTotal, 0);
  wr.wr_id = 6;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = back.addr();
  wr.wr.rdma.rkey = back.keys.rkey;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(back.bytes, remote.bytes);
}

TEST_F(EngineTest, FencedRequestWaitsForAnEarlierRead) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 8192, 0);
  Buffer remote = Register(pair_->b(), 8192, 0);
  Pattern(remote, 31);
  // READ the first half into local[0..4096), then a fenced WRITE of that same
  // local range to remote[4096..): the WRITE must carry the READ's data.
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_READ, local, 4096, 1, remote.addr(), remote.keys.rkey), 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 4096, 2, remote.addr() + 4096, remote.keys.rkey,
                     IBV_SEND_SIGNALED | IBV_SEND_FENCE),
            0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(0, std::memcmp(remote.bytes.data(), remote.bytes.data() + 4096, 4096));
}

TEST_F(EngineTest, ModifyQpToErrorFlushesPostedReceives) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qa;
  Buffer dst = Register(pair_->b(), 64, 0);
  PostRecv(pair_->b(), qb, dst, 1);
  PostRecv(pair_->b(), qb, dst, 2);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_TRUE(pair_->b().engine->ModifyQp(qb, attr, IBV_QP_STATE).ok());
  auto wc = pair_->WaitCompletions(pair_->b().cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RECV);
}

// A consumer that moves its QP to ERR gets the flush and no
// affiliated asynchronous error; FailQp (the peer's process ended) raises
// IBV_EVENT_QP_FATAL with its flush.
TEST_F(EngineTest, OnlyAnErrorTheConsumerDidNotAskForRaisesQpFatal) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer dst_b = Register(pair_->b(), 64, 0);
  Buffer dst_a = Register(pair_->a(), 64, 0);
  PostRecv(pair_->b(), qb, dst_b, 1);
  PostRecv(pair_->a(), qa, dst_a, 2);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_TRUE(pair_->b().engine->ModifyQp(qb, attr, IBV_QP_STATE).ok());
  ASSERT_TRUE(pair_->a().engine->FailQp(qa).ok());
  ASSERT_EQ(pair_->WaitCompletions(pair_->b().cq, 1).size(), 1u);
  ASSERT_EQ(pair_->WaitCompletions(pair_->a().cq, 1).size(), 1u);
  AsyncEvent event;
  unsigned fatal_b = 0, fatal_a = 0;
  while (pair_->b().engine->NextAsyncEvent(&event)) fatal_b += event.type == IBV_EVENT_QP_FATAL;
  while (pair_->a().engine->NextAsyncEvent(&event)) fatal_a += event.type == IBV_EVENT_QP_FATAL && event.qpn == qa->qpn;
  EXPECT_EQ(fatal_b, 0u) << "moved to ERR by its consumer";
  EXPECT_EQ(fatal_a, 1u) << "FailQp";
}

}  // namespace
}  // namespace uroce::transport
