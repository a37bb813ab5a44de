// Loopback: QPs of one engine reaching each other through its own GIDs, never through
// the port.
#include "transport/engine.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cm/cm_test_frames.h"
#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {

using cm::CmDrep;
using cm::CmMad;
using cm::InjectMad;
using cm::MadFrom;

namespace {

// Loopback (EngineConfig::loopback): QPs of one engine reach each other
// through the engine's own GIDs, as on an RDMA NIC, and those frames never
// reach the port. rdma-core's tests and UCX connect a device to itself.
class LoopbackTest : public EngineTest {
 protected:
  EngineSide& a() { return pair_->a(); }
  Buffer RegisterPattern(size_t size, uint32_t seed) {
    Buffer b = Register(a(), size, 0);
    Pattern(b, seed);
    return b;
  }
  // Nothing of A's reached the port: B (the only other station on the link)
  // received nothing, and A's port sent only what loopback did not take.
  void ExpectNothingOnTheWire() {
    const EngineCounters ca = a().engine->counters();
    EXPECT_GT(ca.loopback_frames, 0u);
    EXPECT_EQ(ca.tx_frames, ca.loopback_frames) << "a frame to ourselves went to the port";
    EXPECT_EQ(pair_->b().engine->counters().rx_frames, 0u);
  }
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
  Buffer src = RegisterPattern(kBig, 1);
  Buffer dst = RegisterPattern(kBig, 2);
  Buffer back = RegisterPattern(kBig, 3);
  Buffer recv = RegisterPattern(4096, 4);

  PostRecv(a(), q2, recv, 50);
  ASSERT_EQ(PostSend(a(), q1, IBV_WR_SEND, src, 3000, 1), 0);
  ASSERT_EQ(PostSend(a(), q1, IBV_WR_RDMA_WRITE, src, kBig, 2, dst.addr(), dst.keys.rkey), 0);
  ASSERT_EQ(PostSend(a(), q2, IBV_WR_RDMA_READ, back, kBig, 3, dst.addr(), dst.keys.rkey), 0);
  auto wcs = pair_->WaitCompletions(a().cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
  EXPECT_EQ(0, std::memcmp(recv.bytes.data(), src.bytes.data(), 3000));
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), kBig));
  // The READ was posted after the WRITE on the other QP, so it may see the
  // WRITE only partly done; what it read is what dst held at the end only
  // once both completed in this order. Read again now that both are done.
  ASSERT_EQ(PostSend(a(), q2, IBV_WR_RDMA_READ, back, kBig, 4, dst.addr(), dst.keys.rkey), 0);
  wcs = pair_->WaitCompletions(a().cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(back.bytes.data(), src.bytes.data(), kBig));

  // Fetch-and-add on an 8-byte word of dst, from q2.
  uint64_t word = 0;
  std::memcpy(&word, dst.bytes.data(), 8);
  ibv_sge sge{back.addr(), 8, back.keys.lkey};
  ibv_send_wr wr = SignaledSendWr(5, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge);
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
  Buffer src = RegisterPattern(256, 9);
  Buffer dst = RegisterPattern(40 + 256, 0);
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
    PostRecv(a(), *ud2, dst, 100 + gid_index);
    ibv_sge sge{src.addr(), 256, src.keys.lkey};
    ibv_send_wr wr = SignaledSendWr(200 + gid_index, IBV_WR_SEND, &sge);
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
        // RoCEv2 over IPv4 (0x2) or IPv6 (0x1), as RoCE NICs say in sl.
        EXPECT_EQ(wc.sl, gid_index == 0 ? 0x8 | 0x2 : 0x8 | 0x1);
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
  Buffer src = RegisterPattern(64, 5);
  Buffer dst = RegisterPattern(64, 0);
  constexpr int kMessages = 2000;
  for (int i = 0; i < kMessages; ++i) PostRecv(a(), q2, dst, i);
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(PostSend(a(), q1, IBV_WR_SEND, src, 64, i), 0);
  auto wcs = pair_->WaitCompletions(a().cq, 2 * kMessages);
  ASSERT_EQ(wcs.size(), 2u * kMessages);
  for (const ibv_wc& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_GT(a().engine->counters().tx_stage_full, 0u) << "the stage never filled: the test tests nothing";
  ExpectNothingOnTheWire();
}

// A frame from the port claiming one of our own addresses is forged: with
// loopback, our own frames never come from the wire.
TEST_F(LoopbackTest, FrameFromTheWireWithOurOwnSourceAddressIsDropped) {
  Start();
  CmMad mad;
  mad.message = CmDrep{};
  ASSERT_TRUE(InjectMad(*pair_->b().engine, pair_->pool(), MadFrom{a().mac, a().gid}, a().mac, a().gid, mad));
  for (int i = 0; i < 10; ++i) pair_->PollOnce();
  const EngineCounters ca = a().engine->counters();
  EXPECT_EQ(ca.rx_frames, 1u);
  EXPECT_EQ(ca.rx_path_mismatch, 1u);
  EXPECT_EQ(ca.rx_unknown_qp, 0u) << "it got as far as the QP lookup";
}

}  // namespace
}  // namespace uroce::transport
