// XRC between two engines: the XRC SRQ a request names, and the domain's objects.
#include "transport/engine.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// XRC (IBTA annex A14): an XRC initiator reaches, through one XRC target QP,
// whichever XRC SRQ of the target's domain its XRCETH names; the receive
// completes on that SRQ's CQ with the target QP's number, and RDMA and
// atomics are checked in that SRQ's PD.
class XrcEngineTest : public EngineTest {
 protected:
  void SetUpXrc() {
    Start();
    auto xrcd = pair_->b().engine->CreateXrcd();
    ASSERT_TRUE(xrcd.ok()) << xrcd.status().ToString();
    xrcd_ = *xrcd;
    auto other_cq = pair_->b().engine->CreateCq(64);
    ASSERT_TRUE(other_cq.ok());
    other_cq_ = *other_cq;
    auto srq1 = pair_->b().engine->CreateXrcSrq(pair_->b().pd, xrcd_, pair_->b().cq, 16, 2, 0);
    auto srq2 = pair_->b().engine->CreateXrcSrq(pair_->b().pd, xrcd_, other_cq_, 16, 2, 0);
    ASSERT_TRUE(srq1.ok() && srq2.ok());
    srq1_ = *srq1;
    srq2_ = *srq2;
    EXPECT_NE(srq1_->srqn, 0u);
    EXPECT_NE(srq1_->srqn, srq2_->srqn);
    EXPECT_LE(srq1_->srqn, 0xFFFFFFu);
    RcConnectOptions o;
    o.type = IBV_QPT_XRC_SEND;
    o.xrcd_b = xrcd_;
    auto qps = pair_->ConnectQps(o);
    ASSERT_TRUE(qps.ok()) << qps.status().ToString();
    initiator_ = qps->first;
    target_ = qps->second;
  }
  void PostSrqRecv(SharedReceiveQueue* srq, Buffer& b, uint64_t wr_id) {
    ibv_sge sge{b.addr(), uint32_t(b.bytes.size()), b.keys.lkey};
    ibv_recv_wr wr = RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(pair_->b().engine->PostSrqRecv(srq, &wr, &bad), 0);
  }
  int PostXrc(ibv_wr_opcode op, Buffer& local, uint32_t length, uint64_t wr_id, uint32_t srqn,
              uint64_t remote_addr = 0, uint32_t rkey = 0, uint64_t add = 0) {
    ibv_sge sge{local.addr(), length, local.keys.lkey};
    ibv_send_wr wr = SignaledSendWr(wr_id, op, &sge);
    wr.qp_type.xrc.remote_srqn = srqn;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = remote_addr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = add;
    } else {
      wr.wr.rdma.remote_addr = remote_addr;
      wr.wr.rdma.rkey = rkey;
    }
    if (op == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(0x5EED);
    const ibv_send_wr* bad = nullptr;
    return pair_->a().engine->PostSend(initiator_, &wr, &bad);
  }

  uint32_t xrcd_ = 0;
  CompletionQueue* other_cq_ = nullptr;
  SharedReceiveQueue* srq1_ = nullptr;
  SharedReceiveQueue* srq2_ = nullptr;
  QueuePair* initiator_ = nullptr;
  QueuePair* target_ = nullptr;
};

TEST_F(XrcEngineTest, EachRequestReachesTheSrqItsXrcethNames) {
  SetUpXrc();
  Buffer src = Register(pair_->a(), 3000, 0);
  Pattern(src, 21);
  Buffer into1 = Register(pair_->b(), 4096, 0x11);
  Buffer into2 = Register(pair_->b(), 4096, 0x22);
  PostSrqRecv(srq1_, into1, 101);
  PostSrqRecv(srq2_, into2, 202);

  // A three-packet SEND to the second SRQ: its CQ, not the first's.
  ASSERT_EQ(PostXrc(IBV_WR_SEND, src, 3000, 1, srq2_->srqn), 0);
  auto recv = pair_->WaitCompletions(other_cq_, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].wr_id, 202u);
  EXPECT_EQ(recv[0].byte_len, 3000u);
  EXPECT_EQ(recv[0].qp_num, target_->qpn) << "the target QP's number, as mlx5 and rxe report";
  EXPECT_EQ(0, std::memcmp(into2.bytes.data(), src.bytes.data(), 3000));
  EXPECT_EQ(into1.bytes[0], 0x11) << "the other SRQ's buffer is untouched";
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].qp_num, initiator_->qpn);

  // SEND with immediate to the first SRQ.
  ASSERT_EQ(PostXrc(IBV_WR_SEND_WITH_IMM, src, 100, 2, srq1_->srqn), 0);
  recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].wr_id, 101u);
  EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(recv[0].imm_data), 0x5EEDu);
  ASSERT_EQ(pair_->WaitCompletions(pair_->a().cq, 1).size(), 1u);

  // WRITE, READ and fetch-and-add, checked in the SRQ's PD.
  Buffer remote = Register(pair_->b(), 4096, 0);
  ASSERT_EQ(PostXrc(IBV_WR_RDMA_WRITE, src, 3000, 3, srq1_->srqn, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(remote.bytes.data(), src.bytes.data(), 3000));
  Buffer back = Register(pair_->a(), 3000, 0);
  ASSERT_EQ(PostXrc(IBV_WR_RDMA_READ, back, 3000, 4, srq2_->srqn, remote.addr(), remote.keys.rkey), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(back.bytes, std::vector<uint8_t>(remote.bytes.begin(), remote.bytes.begin() + 3000));
  Buffer word = Register(pair_->b(), 8, 0);
  Buffer old = Register(pair_->a(), 8, 0xFF);
  ASSERT_EQ(PostXrc(IBV_WR_ATOMIC_FETCH_AND_ADD, old, 8, 5, srq1_->srqn, word.addr(), word.keys.rkey, 7), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  uint64_t now = 0, before = 1;
  std::memcpy(&now, word.bytes.data(), 8);
  std::memcpy(&before, old.bytes.data(), 8);
  EXPECT_EQ(now, 7u);
  EXPECT_EQ(before, 0u);
  EXPECT_EQ(pair_->b().engine->counters().rx_bad_xrc_srq, 0u);
}

// A peer's XRCETH is looked up, never trusted: a number that is no XRC SRQ
// of the target's domain earns a NAK (invalid request) and moves nothing.
TEST_F(XrcEngineTest, AnSrqNumberOutsideTheTargetsDomainIsRefused) {
  SetUpXrc();
  auto other_domain = pair_->b().engine->CreateXrcd();
  ASSERT_TRUE(other_domain.ok());
  auto foreign = pair_->b().engine->CreateXrcSrq(pair_->b().pd, *other_domain, pair_->b().cq, 4, 1, 0);
  ASSERT_TRUE(foreign.ok());
  Buffer src = Register(pair_->a(), 64, 0x5A);
  Buffer into = Register(pair_->b(), 64, 0);
  PostSrqRecv(*foreign, into, 9);
  ASSERT_EQ(PostXrc(IBV_WR_SEND, src, 64, 1, (*foreign)->srqn), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(into.bytes, std::vector<uint8_t>(64, 0)) << "nothing reached the other domain's SRQ";
  EXPECT_EQ((*foreign)->posted.load(), 1u) << "its receive was not taken";
  EXPECT_GE(pair_->b().engine->counters().rx_bad_xrc_srq, 1u);
  EXPECT_EQ(target_->state.load(), IBV_QPS_ERR);

  // A number no SRQ has, on a fresh connection.
  RcConnectOptions o;
  o.type = IBV_QPT_XRC_SEND;
  o.xrcd_b = xrcd_;
  auto qps = pair_->ConnectQps(o);
  ASSERT_TRUE(qps.ok());
  initiator_ = qps->first;
  uint32_t unknown = 0x123456;
  while (unknown == srq1_->srqn || unknown == srq2_->srqn || unknown == (*foreign)->srqn) ++unknown;
  ASSERT_EQ(PostXrc(IBV_WR_RDMA_WRITE, src, 64, 2, unknown, into.addr(), into.keys.rkey), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(into.bytes, std::vector<uint8_t>(64, 0));
}

TEST_F(XrcEngineTest, DomainSrqAndCqStayWhileInUse) {
  SetUpXrc();
  Engine& e = *pair_->b().engine;
  EXPECT_EQ(e.DestroyXrcd(xrcd_).code(), StatusCode::kBusy);
  EXPECT_EQ(e.DestroyCq(other_cq_).code(), StatusCode::kBusy) << "an XRC SRQ completes on it";
  EXPECT_EQ(e.DeallocPd(pair_->b().pd).code(), StatusCode::kBusy);
  // An XRC target has no PD, CQ or receive queue of its own.
  QpInitAttr bad;
  bad.type = IBV_QPT_XRC_RECV;
  bad.xrcd = xrcd_;
  bad.pd = pair_->b().pd;
  bad.cap.max_send_wr = 1;
  EXPECT_FALSE(e.CreateQp(bad).ok());
  bad.pd = 0;
  bad.xrcd = xrcd_ + 100;
  EXPECT_FALSE(e.CreateQp(bad).ok()) << "no such domain";
  ibv_recv_wr rwr{};
  const ibv_recv_wr* bad_wr = nullptr;
  EXPECT_EQ(e.PostRecv(target_, &rwr, &bad_wr), EINVAL);
  ASSERT_TRUE(e.DestroySrq(srq2_).ok());
  EXPECT_TRUE(e.DestroyCq(other_cq_).ok());
  ASSERT_TRUE(e.DestroySrq(srq1_).ok());
  EXPECT_EQ(e.DestroyXrcd(xrcd_).code(), StatusCode::kBusy) << "the target QP is still in it";
  ASSERT_TRUE(e.DestroyQp(target_).ok());
  EXPECT_TRUE(e.DestroyXrcd(xrcd_).ok());
}

}  // namespace
}  // namespace uroce::transport
