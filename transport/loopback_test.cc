// Loopback (EngineConfig::loopback): QPs of one engine reach each other
// through the engine's own GIDs, as on an RDMA NIC, and those frames never
// reach the port. rdma-core's tests and UCX connect a device to itself.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "transport/engine.h"
#include "transport/engine_pair.h"

namespace uroce::transport {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

struct Buffer {
  std::vector<uint8_t> bytes;
  MrKeys keys;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

class LoopbackTest : public ::testing::Test {
 protected:
  void Start(const EnginePairOptions& options = {}) {
    auto pair = EnginePair::Create(options);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = std::move(*pair);
  }
  void TearDown() override {
    if (!pair_) return;
    EXPECT_TRUE(pair_->ShutDownAndCheckMbufs()) << "packet buffers leaked";
    pair_.reset();
  }
  Endpoint& a() { return pair_->a(); }

  Buffer Register(size_t size, uint32_t seed) {
    Buffer b;
    b.bytes.resize(size);
    std::mt19937 gen(seed);
    for (auto& x : b.bytes) x = static_cast<uint8_t>(gen());
    auto keys = a().engine->RegMr(a().pd, b.bytes.data(), size, b.addr(), kAllAccess);
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    if (keys.ok()) b.keys = *keys;
    return b;
  }

  int Post(QueuePair* qp, ibv_wr_opcode op, Buffer& local, uint32_t length, uint64_t wr_id,
           uint64_t remote_addr = 0, uint32_t rkey = 0) {
    ibv_sge sge{local.addr(), length, local.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    const ibv_send_wr* bad = nullptr;
    return a().engine->PostSend(qp, &wr, &bad);
  }

  void PostRecv(QueuePair* qp, Buffer& b, uint64_t wr_id) {
    ibv_sge sge{b.addr(), static_cast<uint32_t>(b.bytes.size()), b.keys.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(a().engine->PostRecv(qp, &wr, &bad), 0);
  }

  // Nothing of A's reached the port: B (the only other station on the link)
  // received nothing, and A's port sent only what loopback did not take.
  void ExpectNothingOnTheWire() {
    const EngineCounters ca = a().engine->counters();
    EXPECT_GT(ca.loopback_frames, 0u);
    EXPECT_EQ(ca.tx_frames, ca.loopback_frames) << "a frame to ourselves went to the port";
    EXPECT_EQ(pair_->b().engine->counters().rx_frames, 0u);
  }

  std::unique_ptr<EnginePair> pair_;
};

TEST_F(LoopbackTest, TwoQpsOfOneEngineSendWriteReadAndAtomicsThroughTheirOwnGid) {
  Start();
  RcConnectOptions options;
  options.mtu = IBV_MTU_1024;
  auto qps = ConnectQueuePairs(a(), a(), options);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [q1, q2] = *qps;
  ASSERT_NE(q1, q2);

  constexpr uint32_t kBig = 1 << 20;  // 1 024 packets: more than the loopback stage
  Buffer src = Register(kBig, 1);
  Buffer dst = Register(kBig, 2);
  Buffer back = Register(kBig, 3);
  Buffer recv = Register(4096, 4);

  PostRecv(q2, recv, 50);
  ASSERT_EQ(Post(q1, IBV_WR_SEND, src, 3000, 1), 0);
  ASSERT_EQ(Post(q1, IBV_WR_RDMA_WRITE, src, kBig, 2, dst.addr(), dst.keys.rkey), 0);
  ASSERT_EQ(Post(q2, IBV_WR_RDMA_READ, back, kBig, 3, dst.addr(), dst.keys.rkey), 0);
  auto wcs = pair_->WaitCompletions(a().cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
  EXPECT_EQ(0, std::memcmp(recv.bytes.data(), src.bytes.data(), 3000));
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), kBig));
  // The READ was posted after the WRITE on the other QP, so it may see the
  // WRITE only partly done; what it read is what dst held at the end only
  // once both completed in this order. Read again now that both are done.
  ASSERT_EQ(Post(q2, IBV_WR_RDMA_READ, back, kBig, 4, dst.addr(), dst.keys.rkey), 0);
  wcs = pair_->WaitCompletions(a().cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(back.bytes.data(), src.bytes.data(), kBig));

  // Fetch-and-add on an 8-byte word of dst, from q2.
  uint64_t word = 0;
  std::memcpy(&word, dst.bytes.data(), 8);
  ibv_sge sge{back.addr(), 8, back.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = dst.addr();
  wr.wr.atomic.rkey = dst.keys.rkey;
  wr.wr.atomic.compare_add = 7;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(a().engine->PostSend(q2, &wr, &bad), 0);
  wcs = pair_->WaitCompletions(a().cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  uint64_t fetched = 0, now = 0;
  std::memcpy(&fetched, back.bytes.data(), 8);
  std::memcpy(&now, dst.bytes.data(), 8);
  EXPECT_EQ(fetched, word);
  EXPECT_EQ(now, word + 7);
  ExpectNothingOnTheWire();
}

TEST_F(LoopbackTest, UdDatagramsToOurOwnIpv4AndIpv6Gids) {
  Start();
  auto ud1 = pair_->CreateUdQp(a(), 0x1234);
  auto ud2 = pair_->CreateUdQp(a(), 0x1234);
  ASSERT_TRUE(ud1.ok() && ud2.ok());
  Buffer src = Register(256, 9);
  Buffer dst = Register(40 + 256, 0);
  for (int gid_index = 0; gid_index < 2; ++gid_index) {
    const Gid& own = gid_index == 0 ? a().gid : a().gid6;
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.port_num = 1;
    ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    std::memcpy(ah_attr.grh.dgid.raw, own.data(), 16);
    auto ah = a().engine->CreateAh(a().pd, ah_attr);
    ASSERT_TRUE(ah.ok()) << ah.status().ToString();
    ibv_ah verbs_ah{};
    verbs_ah.handle = *ah;
    PostRecv(*ud2, dst, 100 + gid_index);
    ibv_sge sge{src.addr(), 256, src.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = 200 + gid_index;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.ud.ah = &verbs_ah;
    wr.wr.ud.remote_qpn = (*ud2)->qpn;
    wr.wr.ud.remote_qkey = 0x1234;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(a().engine->PostSend(*ud1, &wr, &bad), 0);
    auto wcs = pair_->WaitCompletions(a().cq, 2);
    ASSERT_EQ(wcs.size(), 2u);
    for (const ibv_wc& wc : wcs) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      if (wc.opcode == IBV_WC_RECV) {
        EXPECT_EQ(wc.src_qp, (*ud1)->qpn);
        EXPECT_EQ(wc.byte_len, 40u + 256u);
      }
    }
    EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 40, src.bytes.data(), 256));
    // The GRH names our own address as the source.
    if (gid_index == 1) {
      EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 8, own.data(), 16));
    }
    ASSERT_TRUE(a().engine->DestroyAh(*ah).ok());
  }
  ExpectNothingOnTheWire();
}

TEST_F(LoopbackTest, OffMeansOurOwnGidIsJustAnotherNeighbour) {
  EnginePairOptions options;
  options.engine_template.loopback = false;
  Start(options);
  MacAddress mac{};
  EXPECT_FALSE(a().engine->LookupNeighbor(a().gid, &mac));
  auto qps = ConnectQueuePairs(a(), a(), RcConnectOptions{});
  EXPECT_FALSE(qps.ok()) << "no neighbour entry for our own address without loopback";
}

// The engine's per-poll work stays bounded: a stream to ourselves is taken
// up at the next poll, never in the poll that made it, and a full loopback
// stage makes the requester wait rather than drop.
TEST_F(LoopbackTest, ManySmallSendsThroughAFullLoopbackStageAllArrive) {
  EnginePairOptions options;
  options.engine_template.per_qp_packet_budget = 1024;
  options.engine_template.max_unacked_packets = 2048;
  Start(options);
  RcConnectOptions rc;
  rc.max_send_wr = 2048;
  rc.max_recv_wr = 2048;
  auto qps = ConnectQueuePairs(a(), a(), rc);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [q1, q2] = *qps;
  Buffer src = Register(64, 5);
  Buffer dst = Register(64, 0);
  constexpr int kMessages = 2000;
  for (int i = 0; i < kMessages; ++i) PostRecv(q2, dst, i);
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(Post(q1, IBV_WR_SEND, src, 64, i), 0);
  auto wcs = pair_->WaitCompletions(a().cq, 2 * kMessages);
  ASSERT_EQ(wcs.size(), 2u * kMessages);
  for (const ibv_wc& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_GT(a().engine->counters().tx_stage_full, 0u) << "the stage never filled: the test tests nothing";
  ExpectNothingOnTheWire();
}

}  // namespace
}  // namespace uroce::transport
