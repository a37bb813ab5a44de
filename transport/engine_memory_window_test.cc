// Memory windows between two engines: binding, the window's QP, range and access, and
// SEND with invalidate.
#include "transport/engine.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// Memory windows over the wire (IBTA 10.6.7). A bind work request completes
// as IBV_WC_BIND_MW; the type 2 window then serves the QP it was bound
// through, with its range and access, and a SEND with invalidate from the
// peer ends it (IBV_WC_WITH_INV and the rkey at the receiver).
class MemoryWindowEngineTest : public EngineTest {
 protected:
  // B's window of `type` over `region`, bound through `qp` (a bind request
  // posted on it); its rkey, or 0 if the bind failed.
  uint32_t BindOnB(QueuePair* qp, Buffer& region, int type, uint64_t offset, uint64_t length, unsigned access) {
    auto rkey = pair_->b().engine->AllocMw(pair_->b().pd, type);
    EXPECT_TRUE(rkey.ok()) << rkey.status().ToString();
    if (!rkey.ok()) return 0;
    mw_.rkey = *rkey;
    mw_.type = static_cast<ibv_mw_type>(type);
    ibv_mr mr{};
    mr.lkey = region.keys.lkey;
    ibv_send_wr wr{};
    wr.wr_id = 500;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = &mw_;
    wr.bind_mw.rkey = ibv_inc_rkey(*rkey);
    wr.bind_mw.bind_info.mr = &mr;
    wr.bind_mw.bind_info.addr = region.addr() + offset;
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = access;
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(pair_->b().engine->PostSend(qp, &wr, &bad), 0);
    auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.size() != 1) return 0;
    EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(wc[0].wr_id, 500u);
    return wc[0].status == IBV_WC_SUCCESS ? wr.bind_mw.rkey : 0;
  }
  ibv_mw mw_{};
};

TEST_F(MemoryWindowEngineTest, Type2WindowServesItsRangeUntilTheSenderInvalidatesIt) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 256, 0x11);
  Buffer region = Register(pair_->b(), 4096, 0x22, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  const uint32_t rkey = BindOnB(qb, region, IBV_MW_TYPE_2, 1024, 256, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(rkey, 0u);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 256, 1, region.addr() + 1024, rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(region.bytes[1024], 0x11);
  EXPECT_EQ(region.bytes[1024 + 255], 0x11);
  EXPECT_EQ(region.bytes[1024 + 256], 0x22);
  EXPECT_EQ(region.bytes[1023], 0x22);

  Buffer inbox = Register(pair_->b(), 64, 0);
  PostRecv(pair_->b(), qb, inbox, 600);
  ibv_sge sge{local.addr(), 8, local.keys.lkey};
  ibv_send_wr wr = SignaledSendWr(2, IBV_WR_SEND_WITH_INV, &sge);
  wr.invalidate_rkey = rkey;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(recv[0].invalidated_rkey, rkey);
  ASSERT_EQ(pair_->WaitCompletions(pair_->a().cq, 1).size(), 1u);

  std::fill(local.bytes.begin(), local.bytes.end(), 0x33);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, 8, 3, region.addr() + 1024, rkey), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << "the window was invalidated";
  EXPECT_EQ(region.bytes[1024], 0x11);
}

// A type 2 window bound through one QP is not reachable through another QP
// of the same PD (IBTA 10.6.7.2.3), nor beyond its range or access.
TEST_F(MemoryWindowEngineTest, Type2WindowIsReachableOnlyThroughItsQp) {
  Start();
  for (int variant = 0; variant < 3; ++variant) {
    auto one = pair_->ConnectQps({});
    auto two = pair_->ConnectQps({});
    ASSERT_TRUE(one.ok() && two.ok());
    auto [qa1, qb1] = *one;
    auto [qa2, qb2] = *two;
    (void)qa2;
    Buffer local = Register(pair_->a(), 64, 0x11);
    Buffer region = Register(pair_->b(), 4096, 0x22, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    const unsigned access = variant == 2 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    const uint32_t rkey = BindOnB(variant == 0 ? qb2 : qb1, region, IBV_MW_TYPE_2, 0, 128, access);
    ASSERT_NE(rkey, 0u);
    const uint64_t addr = region.addr() + (variant == 1 ? 100 : 0);  // 100 + 64 > 128
    ASSERT_EQ(PostSend(pair_->a(), qa1, IBV_WR_RDMA_WRITE, local, 64, 1, addr, rkey), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u) << variant;
    EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << variant;
    for (uint8_t x : region.bytes) ASSERT_EQ(x, 0x22) << variant;
    EXPECT_EQ(pair_->b().engine->DeallocMw(rkey).ok(), true);
  }
}

// A peer's SEND with invalidate naming a key that is not a bound type 2
// window of the QP (a region's rkey here) invalidates nothing: the receive
// and the request fail (invalid request) and the region still works.
TEST_F(MemoryWindowEngineTest, SendWithInvalidateOfARegionKeyFailsAndLeavesTheRegion) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 64, 0x11);
  Buffer region = Register(pair_->b(), 64, 0x22);
  PostRecv(pair_->b(), qb, region, 700);
  ibv_sge sge{local.addr(), 8, local.keys.lkey};
  ibv_send_wr wr = SignaledSendWr(4, IBV_WR_SEND_WITH_INV, &sge);
  wr.invalidate_rkey = region.keys.rkey;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_REM_INV_REQ_ERR);
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(pair_->b().engine->CheckLocalMr(region.keys.lkey, pair_->b().pd, region.addr(), 64, 0), MrCheck::kOk);
}

}  // namespace
}  // namespace uroce::transport
