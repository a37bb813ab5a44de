// Staged chunks end to end between two engines (transport/pull_descriptor.h,
// transport/peer_memory.h): the double is one payload area both engines
// share, as a link's file is, and decides what a link would (where a frame
// came from, a chunk the sender filled again while it was copied).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <cstring>
#include <string>
#include <vector>

#include "transport/engine.h"
#include "transport/engine_test_fixture.h"
#include "transport/packet_parser.h"
#include "transport/pull_descriptor.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

class AreaPeerMemory final : public PeerMemory {
 public:
  // More than a QP's READ answers may hold (Responder::kMaxStagedReadChunks),
  // so that the cap, not the area, is what a test of it sees.
  static constexpr uint32_t kChunks = 16;
  bool stage = true;               // a chunk is free
  bool from_link = true;           // frames come over the link
  bool refill_while_copied = false;  // the next chunk read was filled again meanwhile
  bool reader_takes = true;        // TakeStaged reaches the holder
  uint32_t in_use = 0;             // bit i: chunk i held by the sender
  int stages = 0, unstages = 0, reads = 0, takes = 0;

  bool TakesPulls(uint32_t, const Gid&) override { return false; }
  uint32_t PullSource(const rte_mbuf*) override { return 0; }
  bool Pull(uint32_t, const iovec*, uint32_t, const iovec*, uint32_t) override { return false; }

  bool Stage(uint32_t, const Gid&, const iovec* pieces, uint32_t count, StageTicket* ticket, StageCopy) override {
    if (!stage || in_use == (1u << kChunks) - 1) return false;
    const uint32_t chunk = static_cast<uint32_t>(__builtin_ctz(~in_use));
    in_use |= 1u << chunk;
    uint8_t* dest = area_.data() + size_t{chunk} * kStagedChunkBytes;
    for (uint32_t i = 0; i < count; ++i) {
      std::memcpy(dest, pieces[i].iov_base, pieces[i].iov_len);
      dest += pieces[i].iov_len;
    }
    sequence_[chunk] += 2;
    *ticket = {kLink, chunk, sequence_[chunk]};
    ++stages;
    return true;
  }
  void Unstage(const StageTicket& ticket) override {
    EXPECT_EQ(ticket.link, kLink);
    EXPECT_TRUE(in_use & (1u << ticket.chunk)) << "a chunk given back twice";
    in_use &= ~(1u << ticket.chunk);
    ++unstages;
  }
  uint32_t LinkSource(const rte_mbuf*) override { return from_link ? kLink : 0; }
  const uint8_t* StagedData(uint32_t link, uint32_t chunk, uint64_t sequence, uint32_t length) override {
    EXPECT_EQ(link, kLink);
    ++reads;
    if (chunk >= kChunks || sequence != sequence_[chunk] || length > kStagedChunkBytes) return nullptr;
    return area_.data() + size_t{chunk} * kStagedChunkBytes;
  }
  bool StagedIntact(uint32_t, uint32_t chunk, uint64_t sequence) override {
    if (refill_while_copied) {
      refill_while_copied = false;
      return false;
    }
    return chunk < kChunks && sequence == sequence_[chunk];
  }
  void TakeStaged(uint32_t link, uint32_t chunk, uint64_t sequence) override {
    EXPECT_EQ(link, kLink);
    ++takes;
    if (reader_takes && chunk < kChunks) taken_[chunk] = sequence;
  }
  bool StageTaken(const StageTicket& ticket) override {
    return ticket.chunk < kChunks && taken_[ticket.chunk] == ticket.sequence;
  }

 private:
  static constexpr uint32_t kLink = 5;
  std::vector<uint8_t> area_ = std::vector<uint8_t>(size_t{kChunks} * kStagedChunkBytes);
  uint64_t sequence_[kChunks] = {};
  uint64_t taken_[kChunks] = {};
};

bool IsStagedChunk(const rte_mbuf* m) {
  PacketView view;
  return ParsePacket(m, ParseOptions{}, &view) == ParseError::kOk && view.opcode != nullptr &&
         (view.fields.bth.reserved7 & kBthStagedChunk) != 0;
}

class EngineStagedTest : public EngineTest {
 protected:
  void StartWithArea(bool selective = true) {
    EnginePairOptions options;
    options.engine_template.selective_retransmission = selective;
    options.port_mtu = 1500;  // path MTU 1024: a chunk is 64 packets
    options.engine_template.peer_memory = &peer_;
    options.engine_template.pull_min_bytes = 16384;
    Start(options);
  }
  // Starts with the area and posts a 256 KiB WRITE from a to b whose
  // chunks the link drops, so that a's QP (returned; null on a failure)
  // holds chunks that are never acknowledged.
  QueuePair* PostUnacknowledgedChunks(const RcConnectOptions& connect) {
    StartWithArea();
    auto qps = pair_->ConnectQps(connect);
    if (!qps.ok()) return nullptr;
    QueuePair* qa = qps->first;
    held_local_ = Register(pair_->a(), 1 << 18, 0);
    held_remote_ = Register(pair_->b(), 1 << 18, 0);
    pair_->link().set_drop_filter([](const rte_mbuf* m) { return IsStagedChunk(m); });
    if (PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, held_local_, 1 << 18, 1, held_remote_.addr(),
                 held_remote_.keys.rkey) != 0) {
      return nullptr;
    }
    return qa;
  }
  AreaPeerMemory peer_;
  Buffer held_local_, held_remote_;
};

// READ responses as staged chunks: `a` reads `size` bytes of `b`'s memory
// and waits for the completion; its status.
class EngineStagedReadTest : public EngineStagedTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    EngineStagedTest::SetUp();
    StartWithArea(/*selective=*/GetParam());
    auto qps = pair_->ConnectQps({});
    ASSERT_TRUE(qps.ok()) << qps.status().ToString();
    qa_ = qps->first;
    qb_ = qps->second;
  }
  ibv_wc_status Read(uint32_t size, uint8_t seed) {
    local_ = Register(pair_->a(), size + 64, 0xEE);
    remote_ = Register(pair_->b(), size, 0);
    Pattern(remote_, seed);
    if (PostSend(pair_->a(), qa_, IBV_WR_RDMA_READ, local_, size, 1, remote_.addr(), remote_.keys.rkey) != 0) {
      return IBV_WC_GENERAL_ERR;
    }
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    return wc.size() == 1 ? wc[0].status : IBV_WC_GENERAL_ERR;
  }
  bool ArrivedWhole(uint32_t size) const {
    return std::memcmp(local_.bytes.data(), remote_.bytes.data(), size) == 0 && local_.bytes[size] == 0xEE;
  }
  QueuePair* qa_ = nullptr;
  QueuePair* qb_ = nullptr;
  Buffer local_, remote_;
};

INSTANTIATE_TEST_SUITE_P(Recovery, EngineStagedReadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("Selective") : std::string("GoBackN");
                         });

TEST_P(EngineStagedReadTest, ReadsComeBackAsChunksAndArriveWhole) {
  constexpr uint32_t kSize = 1 << 20;
  const uint64_t frames_before = pair_->b().engine->counters().tx_frames;
  ASSERT_EQ(Read(kSize, 31), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kSize));
  const EngineCounters responder = pair_->b().engine->counters();
  const EngineCounters requester = pair_->a().engine->counters();
  // 16 chunks of 64 packets, the responder waiting for the reader to take
  // its first eight (up to kStagedReadWaitNs: a slow poll, as under a
  // sanitizer, leaves the rest to packets).
  EXPECT_GE(responder.staged_sent, 8u);
  EXPECT_EQ(requester.staged_received, responder.staged_sent);
  EXPECT_EQ(responder.tx_frames - frames_before,
            responder.staged_sent + (kSize - requester.staged_bytes) / 1024);
  EXPECT_EQ(peer_.takes, static_cast<int>(responder.staged_sent)) << "the reader takes each chunk once copied";
  EXPECT_EQ(requester.retransmits, 0u);

  // Again, a size that ends inside a chunk and inside a packet: the taken
  // chunks are filled again.
  constexpr uint32_t kOdd = 3 * kStagedChunkBytes + 1000;
  ASSERT_EQ(Read(kOdd, 32), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kOdd));
  EXPECT_GT(pair_->b().engine->counters().staged_sent, responder.staged_sent);
  EXPECT_LE(__builtin_popcount(peer_.in_use), 8) << "a QP's READs hold at most kMaxStagedReadChunks";
  // A reset gives back what the responder still holds.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_TRUE(pair_->b().engine->ModifyQp(qb_, reset, IBV_QP_STATE).ok());
  EXPECT_EQ(peer_.in_use, 0u);
}

TEST_P(EngineStagedReadTest, AReadChunkFilledAgainWhileCopiedIsAskedForAgain) {
  constexpr uint32_t kSize = 1 << 18;
  peer_.refill_while_copied = true;
  ASSERT_EQ(Read(kSize, 33), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kSize));
  EXPECT_EQ(pair_->a().engine->counters().staged_failures, 1u);
  EXPECT_GT(pair_->a().engine->counters().retransmits, 0u);
  EXPECT_EQ(qb_->state.load(), IBV_QPS_RTS) << "the responder's QP is untouched";
}

TEST_P(EngineStagedReadTest, ALostReadChunkIsAskedForAgain) {
  constexpr uint32_t kSize = 1 << 19;
  int chunks_seen = 0;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) { return IsStagedChunk(m) && ++chunks_seen == 3; });
  ASSERT_EQ(Read(kSize, 34), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kSize));
  EXPECT_GT(pair_->a().engine->counters().retransmits, 0u);
  EXPECT_EQ(pair_->a().engine->counters().timeouts, 0u);
}

// A requester that never says it took a chunk (another process: its word)
// costs its QP's READs the chunks they may hold, and nothing else: the
// rest goes as packets, and the chunks come back when the QP lets go.
TEST_P(EngineStagedReadTest, AReaderThatNeverTakesItsChunksGetsPacketsAfterEight) {
  constexpr uint32_t kSize = 1 << 20;
  peer_.reader_takes = false;
  ASSERT_EQ(Read(kSize, 35), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kSize));
  ASSERT_EQ(Read(kSize, 36), IBV_WC_SUCCESS);
  EXPECT_TRUE(ArrivedWhole(kSize));
  // Eight chunks held, the rest as packets (after kStagedReadHoldNs a
  // chunk is given up and may be filled again: more than eight staged in
  // all on a slow machine, never more than eight held).
  const EngineCounters responder = pair_->b().engine->counters();
  EXPECT_GE(responder.staged_sent, 8u);
  EXPECT_GT(responder.tx_frames, responder.staged_sent + 1024) << "most of two 1 MiB READs as packets";
  EXPECT_LE(__builtin_popcount(peer_.in_use), 8);
  EXPECT_GE(__builtin_popcount(peer_.in_use), 1);
  ASSERT_TRUE(pair_->b().engine->DestroyQp(qb_).ok());
  EXPECT_EQ(peer_.in_use, 0u);
  EXPECT_EQ(peer_.unstages, peer_.stages);
}

// A region deregistered while its READ's answer streams (ibv_dereg_mr(3):
// no access after it returns): the chunks staged before stay what they
// were, nothing of the region is copied after, and the READ ends with the
// remote access error the packets would give (IBTA 9.7.5.1.3).
TEST_P(EngineStagedReadTest, ARegionDeregisteredWhileItsReadStreamsIsNotReadAgain) {
  constexpr uint32_t kSize = 1 << 20;
  Buffer local = Register(pair_->a(), kSize, 0xEE);
  Buffer remote = Register(pair_->b(), kSize, 0);
  Pattern(remote, 37);
  ASSERT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_READ, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  // Until the responder has staged some of the answer, and not all of it.
  ASSERT_TRUE(pair_->RunUntil([&] { return peer_.stages > 0; }));
  const int staged_before = peer_.stages;
  ASSERT_LT(staged_before, 16);
  ASSERT_TRUE(pair_->b().engine->DeregMr(remote.keys.lkey).ok());
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(peer_.stages, staged_before) << "a chunk copied from a deregistered region";
  EXPECT_EQ(qb_->state.load(), IBV_QPS_ERR);
}

TEST_F(EngineStagedTest, LargeMessagesGoAsChunksAndArriveWhole) {
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  constexpr uint32_t kSize = 1 << 20;
  Buffer local = Register(pair_->a(), kSize, 0);
  Pattern(local, 21);
  Buffer remote = Register(pair_->b(), kSize + 64, 0xEE);
  const uint64_t frames_before = pair_->a().engine->counters().tx_frames;

  // WRITE: 16 chunks instead of 1024 packets.
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(remote.bytes.data(), local.bytes.data(), kSize));
  EXPECT_EQ(remote.bytes[kSize], 0xEE) << "nothing past the message";
  EXPECT_EQ(pair_->a().engine->counters().tx_frames - frames_before, 16u);
  EXPECT_EQ(pair_->a().engine->counters().staged_sent, 16u);
  EXPECT_EQ(pair_->b().engine->counters().staged_received, 16u);
  EXPECT_EQ(pair_->b().engine->counters().staged_bytes, kSize);
  EXPECT_EQ(peer_.in_use, 0u) << "every chunk back once acknowledged";

  // SEND with immediate from two SGEs into a receive of three: the chunk
  // boundary falls inside the first SGE and across the receive's.
  Buffer dst = Register(pair_->b(), 3 * 30000, 0x55);
  ASSERT_EQ(PostRecvSges(pair_->b(), qb, 9,
                         {{dst.addr(), 30000, dst.keys.lkey},
                          {dst.addr() + 30000, 30000, dst.keys.lkey},
                          {dst.addr() + 60000, 30000, dst.keys.lkey}}),
            0);
  ASSERT_EQ(PostSendSges(pair_->a(), qa, IBV_WR_SEND_WITH_IMM, 2,
                         {{local.addr(), 70000, local.keys.lkey}, {local.addr() + 500000, 15000, local.keys.lkey}},
                         htonl(0xC0FFEE)),
            0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, 85000u);
  EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(recv[0].imm_data), 0xC0FFEEu);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), local.bytes.data(), 70000));
  EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 70000, local.bytes.data() + 500000, 15000));
  EXPECT_EQ(dst.bytes[85000], 0x55);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);

  // Small messages after: the PSNs the chunks spanned are where both sides
  // expect them.
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 100, 10 + i, remote.addr(), remote.keys.rkey), 0);
  }
  wc = pair_->WaitCompletions(pair_->a().cq, 4);
  ASSERT_EQ(wc.size(), 4u);
  for (const ibv_wc& w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair_->a().engine->counters().retransmits, 0u);
  EXPECT_EQ(pair_->b().engine->counters().out_of_sequence, 0u);
  EXPECT_EQ(peer_.in_use, 0u);
}

TEST_F(EngineStagedTest, ALostChunkGoesAgainFromTheAreaWithoutBeingCopiedAgain) {
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  constexpr uint32_t kSize = 1 << 19;  // 8 chunks
  Buffer local = Register(pair_->a(), kSize, 0);
  Pattern(local, 22);
  Buffer remote = Register(pair_->b(), kSize, 0xEE);
  int chunks_seen = 0;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) { return IsStagedChunk(m) && ++chunks_seen == 3; });
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_GT(pair_->a().engine->counters().retransmits, 0u);
  EXPECT_GT(pair_->a().engine->counters().staged_sent, 8u);
  EXPECT_EQ(peer_.stages, 8) << "a chunk sent again is not filled again";
  EXPECT_EQ(peer_.in_use, 0u);
  // The responder NAKs the gap; it holds no chunk after it, so everything
  // from the gap goes again at once, not one chunk per timeout.
  const EngineCounters c = pair_->a().engine->counters();
  EXPECT_EQ(c.selective_resends, 0u) << "a chunk alone would leave the dropped ones behind it";
  EXPECT_EQ(c.retransmits, 1u);
  EXPECT_EQ(c.rto_expiries, 0u);
  EXPECT_EQ(c.timeouts, 0u);
}

TEST_F(EngineStagedTest, ASendWithoutAReceiveWaitsForOneAndItsChunkGoesAgain) {
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 200000, 0);
  Pattern(local, 23);
  Buffer dst = Register(pair_->b(), 200000, 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, local, 200000, 1), 0);
  for (int i = 0; i < 2000; ++i) pair_->PollOnce();
  EXPECT_GT(pair_->a().engine->counters().rnr_naks_received, 0u);
  PostRecv(pair_->b(), qb, dst, 7);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, 200000u);
  EXPECT_EQ(dst.bytes, local.bytes);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(peer_.in_use, 0u);
}

TEST_F(EngineStagedTest, AChunkFilledAgainWhileCopiedFailsTheRequest) {
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 1 << 16, 1);
  Buffer remote = Register(pair_->b(), 1 << 16, 0xEE);
  peer_.refill_while_copied = true;
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 16, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(pair_->b().engine->counters().staged_failures, 1u);
  EXPECT_EQ(pair_->b().engine->counters().staged_received, 0u);
  EXPECT_EQ(qb->state.load(), IBV_QPS_ERR);
}

TEST_F(EngineStagedTest, AKeyThatDoesNotGrantTheChunkIsARemoteAccessErrorAndNothingIsRead) {
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 1 << 17, 1);
  Buffer remote = Register(pair_->b(), 1 << 15, 0xEE);  // a quarter of the message
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 17, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  for (uint8_t b : remote.bytes) ASSERT_EQ(b, 0xEE);
  EXPECT_EQ(pair_->b().engine->counters().staged_received, 0u);
}

TEST_F(EngineStagedTest, WithNoChunkFreeAQpHoldingNoneSendsPackets) {
  peer_.stage = false;
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 1 << 17, 0);
  Pattern(local, 24);
  Buffer remote = Register(pair_->b(), 1 << 17, 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 17, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_EQ(pair_->a().engine->counters().staged_sent, 0u);
}

TEST_F(EngineStagedTest, DestroyingAQpGivesItsChunksBack) {
  QueuePair* qa = PostUnacknowledgedChunks({});
  ASSERT_NE(qa, nullptr);
  for (int i = 0; i < 100; ++i) pair_->PollOnce();
  EXPECT_NE(peer_.in_use, 0u);
  ASSERT_TRUE(pair_->a().engine->DestroyQp(qa).ok());
  EXPECT_EQ(peer_.in_use, 0u);
  EXPECT_EQ(peer_.unstages, peer_.stages);
}

// A QP in the error state sends nothing again: the chunks it held go back
// to the area at once (the area is the link's, shared by every QP over it),
// whether the application moved it there or the transport did.
TEST_F(EngineStagedTest, AQpInErrorGivesItsChunksBack) {
  QueuePair* qa = PostUnacknowledgedChunks({});
  ASSERT_NE(qa, nullptr);
  for (int i = 0; i < 100; ++i) pair_->PollOnce();
  ASSERT_NE(peer_.in_use, 0u);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_TRUE(pair_->a().engine->ModifyQp(qa, err, IBV_QP_STATE).ok());
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(peer_.in_use, 0u) << "chunks held by a QP in ERR";
  EXPECT_EQ(peer_.unstages, peer_.stages);
  // Reset and destruction find nothing left to give back (Unstage checks
  // that no chunk comes back twice).
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_TRUE(pair_->a().engine->ModifyQp(qa, reset, IBV_QP_STATE).ok());
  ASSERT_TRUE(pair_->a().engine->DestroyQp(qa).ok());
  EXPECT_EQ(peer_.unstages, peer_.stages);
}

TEST_F(EngineStagedTest, ARetryExceededQpGivesItsChunksBack) {
  RcConnectOptions connect;
  connect.retry_cnt = 1;
  QueuePair* qa = PostUnacknowledgedChunks(connect);
  ASSERT_NE(qa, nullptr);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(qa->state.load(), IBV_QPS_ERR);
  EXPECT_EQ(peer_.in_use, 0u) << "chunks held by a QP in ERR";
  EXPECT_EQ(peer_.unstages, peer_.stages);
}

TEST_F(EngineStagedTest, AChunkFromWhereNoAreaIsSharedIsDroppedUnread) {
  peer_.from_link = false;
  StartWithArea();
  RcConnectOptions connect;
  connect.retry_cnt = 1;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 1 << 16, 1);
  Buffer remote = Register(pair_->b(), 1 << 16, 0xEE);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 16, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(pair_->b().engine->counters().staged_refused, 2u);
  EXPECT_EQ(peer_.reads, 0);
  for (uint8_t b : remote.bytes) ASSERT_EQ(b, 0xEE);
  EXPECT_NE(qb->state.load(), IBV_QPS_ERR) << "the receiver's QP is untouched";
}

TEST_F(EngineStagedTest, APingPongOfLargeSendsNeedsNoRetransmission) {
  StartWithArea();
  RcConnectOptions connect;
  connect.mtu = IBV_MTU_1024;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  constexpr uint32_t kSize = 1 << 20;
  Buffer sa = Register(pair_->a(), kSize, 0), ra = Register(pair_->a(), kSize, 0);
  Buffer sb = Register(pair_->b(), kSize, 0), rb = Register(pair_->b(), kSize, 0);
  for (int i = 0; i < 30; ++i) {
    PostRecv(pair_->b(), qb, rb, 100 + i);
    PostRecv(pair_->a(), qa, ra, 200 + i);
    Pattern(sa, 40 + i);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, sa, kSize, i), 0);
    auto got = pair_->WaitCompletions(pair_->b().cq, 1);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].status, IBV_WC_SUCCESS);
    ASSERT_EQ(rb.bytes, sa.bytes);
    Pattern(sb, 80 + i);
    ASSERT_EQ(PostSend(pair_->b(), qb, IBV_WR_SEND, sb, kSize, i), 0);
    got = pair_->WaitCompletions(pair_->a().cq, 2);
    ASSERT_EQ(got.size(), 2u);
    got = pair_->WaitCompletions(pair_->b().cq, 1);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(ra.bytes, sb.bytes);
  }
  for (EngineSide* side : {&pair_->a(), &pair_->b()}) {
    const EngineCounters c = side->engine->counters();
    EXPECT_EQ(c.retransmits, 0u);
    EXPECT_EQ(c.timeouts, 0u);
    EXPECT_EQ(c.rto_expiries, 0u);
    EXPECT_EQ(c.duplicates, 0u);
  }
  EXPECT_EQ(peer_.in_use, 0u);
}

TEST_F(EngineStagedTest, AChunkOverPacketsThatArrivedMeanwhileIsGivenUpAndTheRestGoesAgain) {
  // The first part of a WRITE goes as packets (no chunk free yet); packets
  // 10.. and every ACK are lost, so the RTO resends from the first PSN, now
  // as chunks. The responder has 0..9 already: the first chunk, 0..15, is a
  // duplicate there and its ACK covers 9 only. That chunk can never be
  // taken whole again; holding on to it would resend it for ever.
  peer_.stage = false;
  StartWithArea();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  constexpr uint32_t kSize = 64 * 1024;
  Buffer local = Register(pair_->a(), kSize, 0);
  Pattern(local, 25);
  Buffer remote = Register(pair_->b(), kSize, 0);
  int writes = 0;
  bool lossy = true;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    if (!lossy) return false;
    PacketView view;
    if (ParsePacket(m, ParseOptions{}, &view) != ParseError::kOk || view.opcode == nullptr) return false;
    if (view.opcode->operation == Operation::kAcknowledge) return true;
    return view.opcode->operation == Operation::kRdmaWrite && ++writes > 10;
  });
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  for (int i = 0; i < 50; ++i) pair_->PollOnce();
  ASSERT_EQ(writes, 64) << "every packet went once";
  peer_.stage = true;
  lossy = false;
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_EQ(pair_->a().engine->counters().timeouts, 0u);
  EXPECT_GT(pair_->a().engine->counters().staged_sent, 0u);
  EXPECT_EQ(peer_.in_use, 0u);
}

}  // namespace
}  // namespace uroce::transport
