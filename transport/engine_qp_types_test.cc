// QP types beside RC (UD, the GSI QP, UC), the address handles UD sends through, and the
// QP numbers an engine hands out.
#include "transport/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// An address vector that can never be valid fails at once, before any
// neighbour resolution (a zero destination GID must not wait 3 s for ND).
TEST_F(EngineTest, AnAddressThatCanNeverBeValidFailsBeforeNeighbourResolution) {
  EnginePairOptions options;
  int resolver_calls = 0;
  options.engine_template.resolve_neighbor = [&resolver_calls](const Gid&) {
    ++resolver_calls;
    return Status(StatusCode::kUnavailable, "no answer");
  };
  Start(options);
  ibv_ah_attr zero{};
  zero.is_global = 1;
  zero.port_num = 1;  // sgid_index 0: our IPv4 GID; dgid all zeros
  auto ah = pair_->a().engine->CreateAh(pair_->a().pd, zero);
  EXPECT_EQ(ah.status().code(), StatusCode::kInvalidArgument) << ah.status().ToString();
  ibv_ah_attr bad_index{};
  bad_index.is_global = 1;
  bad_index.grh.sgid_index = 200;
  std::memcpy(bad_index.grh.dgid.raw, pair_->b().gid.data(), 16);
  ah = pair_->a().engine->CreateAh(pair_->a().pd, bad_index);
  EXPECT_EQ(ah.status().code(), StatusCode::kInvalidArgument) << ah.status().ToString();
  EXPECT_EQ(resolver_calls, 0);
  // A valid address of a neighbour nobody knows still asks the resolver.
  ibv_ah_attr unknown{};
  unknown.is_global = 1;
  const uint8_t stranger_ip[4] = {10, 11, 12, 13};
  const Gid stranger = Ipv4MappedGid(stranger_ip);
  std::memcpy(unknown.grh.dgid.raw, stranger.data(), 16);
  ah = pair_->a().engine->CreateAh(pair_->a().pd, unknown);
  EXPECT_EQ(ah.status().code(), StatusCode::kUnavailable) << ah.status().ToString();
  EXPECT_EQ(resolver_calls, 1);
}

TEST_F(EngineTest, UdSendPlacesGrhAndSourceQp) {
  Start();
  auto ud_a = pair_->CreateUdQp(pair_->a(), 0x11111111);
  auto ud_b = pair_->CreateUdQp(pair_->b(), 0x11111111);
  ASSERT_TRUE(ud_a.ok() && ud_b.ok());
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.port_num = 1;
  std::memcpy(ah_attr.grh.dgid.raw, pair_->b().gid.data(), 16);
  auto ah = pair_->a().engine->CreateAh(pair_->a().pd, ah_attr);
  ASSERT_TRUE(ah.ok()) << ah.status().ToString();
  ibv_ah verbs_ah{};
  verbs_ah.handle = *ah;

  Buffer src = Register(pair_->a(), 512, 0);
  Pattern(src, 6);
  Buffer dst = Register(pair_->b(), 40 + 512, 0);
  PostRecv(pair_->b(), *ud_b, dst, 5);
  ibv_sge sge{src.addr(), 512, src.keys.lkey};
  ibv_send_wr wr = SignaledSendWr(6, IBV_WR_SEND, &sge);
  wr.wr.ud.ah = &verbs_ah;
  wr.wr.ud.remote_qpn = (*ud_b)->qpn;
  wr.wr.ud.remote_qkey = 0x11111111;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(*ud_a, &wr, &bad), 0);
  auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].byte_len, 40u + 512u);
  EXPECT_EQ(wc[0].src_qp, (*ud_a)->qpn);
  EXPECT_TRUE(wc[0].wc_flags & IBV_WC_GRH);
  // The network type, where RoCE NICs report it (IBTA A17.4.5.1): UDP
  // (RoCEv2) and IPv4. UCX's UD transport reads this.
  EXPECT_EQ(wc[0].sl, 0x8 | 0x2);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 40, src.bytes.data(), 512));
  // IPv4: 20 zero bytes, then the IPv4 header (source 10.0.0.1).
  for (int i = 0; i < 20; ++i) EXPECT_EQ(dst.bytes[i], 0) << i;
  EXPECT_EQ(dst.bytes[20] >> 4, 4);
  EXPECT_EQ(dst.bytes[20 + 12], 10);
  EXPECT_EQ(dst.bytes[20 + 15], 1);

  // A wrong Q_Key is dropped silently.
  PostRecv(pair_->b(), *ud_b, dst, 7);
  wr.wr.ud.remote_qkey = 0x22222222;
  ASSERT_EQ(pair_->a().engine->PostSend(*ud_a, &wr, &bad), 0);
  for (int i = 0; i < 100; ++i) pair_->PollOnce();
  ibv_wc extra[4];
  EXPECT_EQ(pair_->b().cq->Poll(4, extra), 0);
}

// QP1, the GSI QP (IBTA 13.5.1): created by number, UD with Q_Key
// 0x80010000; datagrams to QPN 1 reach it and carry DETH source QP 1, which
// is what connection management MADs need (rping_rdma_cm.pcap).
TEST_F(EngineTest, GsiQpOneSendsAndReceivesUdDatagrams) {
  Start();
  QueuePair* gsi[2] = {nullptr, nullptr};
  EngineSide* sides[2] = {&pair_->a(), &pair_->b()};
  for (int i = 0; i < 2; ++i) {
    QpInitAttr init = OneCqQpInit(IBV_QPT_UD, sides[i]->pd, sides[i]->cq, 16, 1);
    init.fixed_qpn = 1;
    auto qp = sides[i]->engine->CreateQp(init);
    ASSERT_TRUE(qp.ok()) << qp.status().ToString();
    gsi[i] = *qp;
    EXPECT_EQ(gsi[i]->qpn, 1u);
    // A second QP1, another fixed number, or an RC QP1 are refused.
    EXPECT_EQ(sides[i]->engine->CreateQp(init).status().code(), StatusCode::kAlreadyExists);
    init.fixed_qpn = 2;
    EXPECT_EQ(sides[i]->engine->CreateQp(init).status().code(), StatusCode::kInvalidArgument);
    init.fixed_qpn = 1;
    init.type = IBV_QPT_RC;
    EXPECT_EQ(sides[i]->engine->CreateQp(init).status().code(), StatusCode::kInvalidArgument);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey = 0x80010000;
    ASSERT_TRUE(sides[i]->engine->ModifyQp(gsi[i], attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY).ok());
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_TRUE(sides[i]->engine->ModifyQp(gsi[i], attr, IBV_QP_STATE).ok());
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_TRUE(sides[i]->engine->ModifyQp(gsi[i], attr, IBV_QP_STATE | IBV_QP_SQ_PSN).ok());
  }
  // Ordinary QPs never get number 1, nor QP1's table slot.
  auto ud = pair_->CreateUdQp(pair_->a(), 0x1234);
  ASSERT_TRUE(ud.ok());
  EXPECT_GE((*ud)->qpn, 0x11u);

  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.port_num = 1;
  std::memcpy(ah_attr.grh.dgid.raw, pair_->b().gid.data(), 16);
  auto ah = pair_->a().engine->CreateAh(pair_->a().pd, ah_attr);
  ASSERT_TRUE(ah.ok()) << ah.status().ToString();
  ibv_ah verbs_ah{};
  verbs_ah.handle = *ah;

  // One MAD's worth: 256 bytes, behind a 40-byte GRH on receipt.
  Buffer mad = Register(pair_->a(), 256, 0);
  Pattern(mad, 9);
  Buffer dst = Register(pair_->b(), 40 + 256, 0);
  PostRecv(pair_->b(), gsi[1], dst, 21);
  ibv_sge sge{mad.addr(), 256, mad.keys.lkey};
  ibv_send_wr wr = SignaledSendWr(22, IBV_WR_SEND, &sge);
  wr.wr.ud.ah = &verbs_ah;
  wr.wr.ud.remote_qpn = 1;
  wr.wr.ud.remote_qkey = 0x80010000;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(gsi[0], &wr, &bad), 0);
  auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].qp_num, 1u);
  EXPECT_EQ(wc[0].src_qp, 1u) << "DETH source QP of QP1";
  EXPECT_EQ(wc[0].byte_len, 40u + 256u);
  EXPECT_TRUE(wc[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data() + 40, mad.bytes.data(), 256));
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);

  // Destroyed, QP1 can be made again.
  ASSERT_TRUE(pair_->b().engine->DestroyQp(gsi[1]).ok());
  QpInitAttr again;
  again.type = IBV_QPT_UD;
  again.pd = pair_->b().pd;
  again.send_cq = again.recv_cq = pair_->b().cq;
  again.cap.max_send_wr = again.cap.max_recv_wr = 4;
  again.fixed_qpn = 1;
  auto qp = pair_->b().engine->CreateQp(again);
  ASSERT_TRUE(qp.ok()) << qp.status().ToString();
  EXPECT_EQ((*qp)->qpn, 1u);
}

// A QPN range leased from a daemon (EngineConfig::qpn_base/qpn_count): every
// QPN comes from it, drawn at random, until the range is full. (One QPN of
// the 64 shares QP 1's table slot, 0x120001 % max_qps, which stays free for
// the GSI QP.)
TEST_F(EngineTest, QpnsComeFromTheLeasedRange) {
  EnginePairOptions options;
  options.engine_template.qpn_base = 0x120000;
  options.engine_template.qpn_count = 64;
  options.engine_template.max_qps = 1024;
  Start(options);
  std::vector<uint32_t> qpns;
  for (int i = 0; i < 63; ++i) {
    auto qp = pair_->CreateUdQp(pair_->a(), 1);
    ASSERT_TRUE(qp.ok()) << i << ": " << qp.status().ToString();
    qpns.push_back((*qp)->qpn);
    EXPECT_GE((*qp)->qpn, 0x120000u);
    EXPECT_LT((*qp)->qpn, 0x120040u);
  }
  std::sort(qpns.begin(), qpns.end());
  EXPECT_EQ(std::adjacent_find(qpns.begin(), qpns.end()), qpns.end()) << "a QPN handed out twice";
  auto full = pair_->CreateUdQp(pair_->a(), 1);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(EngineTest, UnreliableConnectedDeliversWithoutAcks) {
  Start();
  RcConnectOptions connect;
  connect.type = IBV_QPT_UC;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 3000, 0);
  Pattern(src, 17);
  Buffer dst = Register(pair_->b(), 3000, 0);
  PostRecv(pair_->b(), qb, dst, 4);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 3000, 5), 0);
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].byte_len, 3000u);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(pair_->b().engine->counters().tx_frames, 0u) << "UC sends no acknowledgements";
  // READ is not a UC operation.
  EXPECT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_READ, src, 8, 6, dst.addr(), dst.keys.rkey), EINVAL);
}

}  // namespace
}  // namespace uroce::transport
