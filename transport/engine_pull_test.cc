// Pull descriptors end to end between two engines (transport/pull_descriptor.h,
// transport/peer_memory.h): the "other process" is this one, read with
// process_vm_readv(2) on our own pid, so every copy is the one a local link
// makes, and the double decides what a link would (who takes pulls, where a
// frame came from, a copy that fails).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "transport/engine.h"
#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

class SelfPeerMemory final : public PeerMemory {
 public:
  bool takes = true;      // the other side takes pulls from us
  bool accept = true;     // frames come over a link we may read through
  bool fail_copy = false; // the sender named memory it does not have
  int pulls = 0;

  bool TakesPulls(uint32_t, const Gid&) override { return takes; }
  uint32_t PullSource(const rte_mbuf*) override { return accept ? 7 : 0; }
  bool Pull(uint32_t source, const iovec* local, uint32_t local_count, const iovec* remote,
            uint32_t remote_count) override {
    EXPECT_EQ(source, 7u);
    ++pulls;
    if (fail_copy) return false;
    size_t want = 0;
    for (uint32_t i = 0; i < local_count; ++i) want += local[i].iov_len;
    const ssize_t got = process_vm_readv(getpid(), local, local_count, remote, remote_count, 0);
    return got >= 0 && static_cast<size_t>(got) == want;
  }
};

class EnginePullTest : public EngineTest {
 protected:
  void StartWithPulls(uint32_t min_bytes = 16384) {
    EnginePairOptions options;
    options.port_mtu = 1500;
    options.engine_template.peer_memory = &peer_;
    options.engine_template.pull_min_bytes = min_bytes;
    Start(options);
  }
  SelfPeerMemory peer_;
};

TEST_F(EnginePullTest, LargeWritesAndSendsGoAsOneDescriptorAndArriveWhole) {
  StartWithPulls();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  constexpr uint32_t kSize = 1 << 20;
  Buffer local = Register(pair_->a(), kSize, 0);
  Pattern(local, 11);
  Buffer remote = Register(pair_->b(), kSize + 64, 0xEE);
  const uint64_t frames_before = pair_->a().engine->counters().tx_frames;

  // WRITE: one frame instead of 1024.
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(remote.bytes.data(), local.bytes.data(), kSize));
  EXPECT_EQ(remote.bytes[kSize], 0xEE) << "nothing past the message";
  EXPECT_EQ(pair_->a().engine->counters().tx_frames - frames_before, 1u);
  EXPECT_EQ(pair_->a().engine->counters().pulls_sent, 1u);
  EXPECT_EQ(pair_->b().engine->counters().pulls_received, 1u);
  EXPECT_EQ(pair_->b().engine->counters().pull_bytes, kSize);

  // SEND with immediate from two SGEs into a receive of three.
  Buffer dst = Register(pair_->b(), 3 * 30000, 0x55);
  ASSERT_EQ(PostRecvSges(pair_->b(), qb, 9,
                         {{dst.addr(), 30000, dst.keys.lkey},
                          {dst.addr() + 30000, 30000, dst.keys.lkey},
                          {dst.addr() + 60000, 30000, dst.keys.lkey}}),
            0);
  ASSERT_EQ(PostSendSges(pair_->a(), qa, IBV_WR_SEND_WITH_IMM, 2,
                         {{local.addr(), 40000, local.keys.lkey}, {local.addr() + 500000, 25000, local.keys.lkey}},
                         htonl(0xC0FFEE)),
            0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].wr_id, 9u);
  EXPECT_EQ(recv[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(recv[0].byte_len, 65000u);
  EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(recv[0].imm_data), 0xC0FFEEu);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), local.bytes.data(), 40000));
  EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 40000, local.bytes.data() + 500000, 25000));
  EXPECT_EQ(dst.bytes[65000], 0x55);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);

  // WRITE with immediate, then small messages as packets: the PSNs the
  // descriptors skipped are where both sides expect them.
  PostRecv(pair_->b(), qb, dst, 10);
  Pattern(local, 12);
  ibv_sge wsge{local.addr(), kSize, local.keys.lkey};
  const ibv_send_wr* bad = nullptr;
  ibv_send_wr wwr{};
  wwr.wr_id = 3;
  wwr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wwr.send_flags = IBV_SEND_SIGNALED;
  wwr.imm_data = htonl(77);
  wwr.sg_list = &wsge;
  wwr.num_sge = 1;
  wwr.wr.rdma.remote_addr = remote.addr();
  wwr.wr.rdma.rkey = remote.keys.rkey;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wwr, &bad), 0);
  recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(recv[0].byte_len, kSize);
  EXPECT_EQ(ntohl(recv[0].imm_data), 77u);
  EXPECT_EQ(0, std::memcmp(remote.bytes.data(), local.bytes.data(), kSize));
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair_->a().engine->counters().pulls_sent, 3u);

  for (uint64_t i = 0; i < 4; ++i) {
    PostRecv(pair_->b(), qb, dst, 20 + i);
    ASSERT_EQ(PostSend(pair_->a(), qa, i % 2 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, local, 3000, 30 + i,
                       remote.addr(), remote.keys.rkey),
              0);
  }
  wc = pair_->WaitCompletions(pair_->a().cq, 4);
  ASSERT_EQ(wc.size(), 4u);
  for (const ibv_wc& w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair_->a().engine->counters().pulls_sent, 3u) << "small messages go as packets";
  EXPECT_EQ(pair_->a().engine->counters().retransmits, 0u);
  EXPECT_EQ(pair_->b().engine->counters().out_of_sequence, 0u);
  EXPECT_EQ(peer_.pulls, 3);
}

TEST_F(EnginePullTest, WithoutAPeerThatTakesPullsMessagesGoAsPackets) {
  peer_.takes = false;
  StartWithPulls();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 1 << 16, 0);
  Pattern(local, 5);
  Buffer remote = Register(pair_->b(), 1 << 16, 0);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 16, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.bytes, local.bytes);
  EXPECT_EQ(pair_->a().engine->counters().pulls_sent, 0u);
  EXPECT_EQ(peer_.pulls, 0);
}

TEST_F(EnginePullTest, ACopyThatFailsFailsTheRequestAsInvalidAndWritesNothing) {
  peer_.fail_copy = true;
  StartWithPulls();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 1 << 16, 1);
  Buffer remote = Register(pair_->b(), 1 << 16, 0xEE);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 16, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(pair_->b().engine->counters().pull_failures, 1u);
  EXPECT_EQ(qb->state.load(), IBV_QPS_ERR);
  (void)qb;
}

TEST_F(EnginePullTest, AKeyThatDoesNotGrantTheWholeMessageIsARemoteAccessError) {
  StartWithPulls();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer local = Register(pair_->a(), 1 << 16, 1);
  Buffer remote = Register(pair_->b(), 1 << 15, 0xEE);  // half the message
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 1 << 16, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(peer_.pulls, 0) << "nothing read before every check passed";
  for (uint8_t b : remote.bytes) ASSERT_EQ(b, 0xEE);
}

TEST_F(EnginePullTest, ASendLongerThanTheReceiveIsALengthErrorThere) {
  StartWithPulls();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 1 << 16, 1);
  Buffer dst = Register(pair_->b(), 1 << 15, 0xEE);
  PostRecv(pair_->b(), qb, dst, 4);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, local, 1 << 16, 1), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_LOC_LEN_ERR);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(peer_.pulls, 0);
}

TEST_F(EnginePullTest, ADescriptorFromWhereNoCopyIsAllowedIsDroppedUnread) {
  // The frame did not come over a link we may read through (a wire, the
  // daemon's switch): dropped before any QP sees it, so the message never
  // arrives and its retries run out.
  peer_.accept = false;
  StartWithPulls();
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
  EXPECT_GE(pair_->b().engine->counters().pulls_refused, 2u);
  EXPECT_EQ(peer_.pulls, 0);
  for (uint8_t b : remote.bytes) ASSERT_EQ(b, 0xEE);
  EXPECT_NE(qb->state.load(), IBV_QPS_ERR) << "the receiver's QP is untouched";
}

}  // namespace
}  // namespace uroce::transport
