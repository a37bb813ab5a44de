// End-to-end tests of the engine: two engines over the in-memory link.
#include "transport/engine.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cm/cm_test_frames.h"
#include "testing/engine_pair.h"

namespace uroce::transport {

using cm::CmDrep;
using cm::CmMad;
using cm::InjectMad;
using cm::MadFrom;

namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

struct Buffer {
  std::vector<uint8_t> bytes;
  MrKeys keys;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

class EngineTest : public ::testing::Test {
 protected:
  void Start(const EnginePairOptions& options = {}) {
    auto pair = EnginePair::Create(options);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = std::move(*pair);
  }
  void TearDown() override {
    if (!pair_) return;
    // No more polls: the test's buffers are gone. Whatever is still staged or
    // on the wire must go back to the pool when the engines and link go.
    EXPECT_TRUE(pair_->ShutDownAndCheckMbufs()) << "packet buffers leaked";
    pair_.reset();
  }

  Buffer Register(Endpoint& side, size_t size, uint8_t fill, int access = kAllAccess) {
    Buffer b;
    b.bytes.assign(size, fill);
    auto keys = side.engine->RegMr(side.pd, b.bytes.data(), size, b.addr(), access);
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    if (keys.ok()) b.keys = *keys;
    return b;
  }

  static void Pattern(Buffer& b, uint32_t seed) {
    std::mt19937 gen(seed);
    for (auto& x : b.bytes) x = static_cast<uint8_t>(gen());
  }

  void PostRecv(Endpoint& side, QueuePair* qp, Buffer& b, uint64_t wr_id, uint32_t offset = 0,
                uint32_t length = UINT32_MAX) {
    ibv_sge sge{b.addr() + offset, length == UINT32_MAX ? uint32_t(b.bytes.size() - offset) : length,
                b.keys.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(side.engine->PostRecv(qp, &wr, &bad), 0);
  }

  int PostSend(Endpoint& side, QueuePair* qp, ibv_wr_opcode op, Buffer& local, uint32_t length, uint64_t wr_id,
               uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t flags = IBV_SEND_SIGNALED) {
    ibv_sge sge{local.addr(), length, local.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    const ibv_send_wr* bad = nullptr;
    return side.engine->PostSend(qp, &wr, &bad);
  }

  std::unique_ptr<EnginePair> pair_;
};

// The responder's step names (responder.h), one per step, for logs.
// An exit handler run by a signal on top of a control call must know that
// this thread holds a progress token (api/verbs/provider.cc Shutdown).
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

TEST(ResponderStepTest, EveryStepHasItsOwnName) {
  const ResponderStep steps[] = {ResponderStep::kCheckPsn, ResponderStep::kCheckOpSequence,
                                 ResponderStep::kCheckLength, ResponderStep::kExecute,
                                 ResponderStep::kAcknowledge, ResponderStep::kDone};
  std::vector<std::string> names;
  for (ResponderStep step : steps) names.push_back(ResponderStepName(step));
  EXPECT_EQ(names, (std::vector<std::string>{"check_psn", "check_op_sequence", "check_length", "execute",
                                             "acknowledge", "done"}));
  EXPECT_STREQ(ResponderStepName(static_cast<ResponderStep>(200)), "unknown");
}

TEST_F(EngineTest, RcSendArrivesIntactWithCompletionFields) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 64, 0);
  Pattern(src, 1);
  Buffer dst = Register(pair_->b(), 256, 0xEE);
  PostRecv(pair_->b(), qb, dst, 77);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 64, 11), 0);

  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(recv[0].wr_id, 77u);
  EXPECT_EQ(recv[0].byte_len, 64u);
  EXPECT_EQ(recv[0].qp_num, qb->qpn);
  EXPECT_EQ(recv[0].wc_flags, 0u);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), 64));
  EXPECT_EQ(dst.bytes[64], 0xEE) << "nothing written past the message";

  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sent[0].wr_id, 11u);
  EXPECT_EQ(sent[0].qp_num, qa->qpn);
}

TEST_F(EngineTest, MultiPacketSendWithImmediate) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 10000, 0);
  Pattern(src, 2);
  Buffer dst = Register(pair_->b(), 16384, 0);
  PostRecv(pair_->b(), qb, dst, 1);
  ibv_sge sge{src.addr(), 10000, src.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0xA1B2C3D4);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, 10000u);
  EXPECT_TRUE(recv[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(recv[0].imm_data), 0xA1B2C3D4u);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), 10000));
}

TEST_F(EngineTest, RdmaWriteAndReadOneMebibyteAtMtu256And4096) {
  EnginePairOptions options;
  options.port_mtu = 9000;
  Start(options);
  for (ibv_mtu mtu : {IBV_MTU_256, IBV_MTU_4096}) {
    RcConnectOptions connect;
    connect.mtu = mtu;
    auto qps = pair_->ConnectQps(connect);
    ASSERT_TRUE(qps.ok()) << qps.status().ToString();
    auto [qa, qb] = *qps;
    constexpr uint32_t kSize = 1 << 20;
    Buffer local = Register(pair_->a(), kSize, 0);
    Pattern(local, 3);
    Buffer remote = Register(pair_->b(), kSize, 0);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(remote.bytes, local.bytes);

    Pattern(remote, 4);
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_READ, local, kSize, 2, remote.addr(), remote.keys.rkey), 0);
    wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc[0].byte_len, kSize);
    EXPECT_EQ(remote.bytes, local.bytes);
  }
}

TEST_F(EngineTest, AtomicsCompareSwapAndFetchAdd) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer result = Register(pair_->a(), 8, 0);
  Buffer target = Register(pair_->b(), 64, 0);
  uint64_t initial = 100;
  std::memcpy(target.bytes.data() + 8, &initial, 8);

  ibv_sge sge{result.addr(), 8, result.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = target.addr() + 8;
  wr.wr.atomic.rkey = target.keys.rkey;
  wr.wr.atomic.compare_add = 5;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t got, now;
  std::memcpy(&got, result.bytes.data(), 8);
  std::memcpy(&now, target.bytes.data() + 8, 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(now, 105u);

  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 105;
  wr.wr.atomic.swap = 7;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&got, result.bytes.data(), 8);
  std::memcpy(&now, target.bytes.data() + 8, 8);
  EXPECT_EQ(got, 105u);
  EXPECT_EQ(now, 7u);
  // A compare that fails leaves the word alone and returns it.
  wr.wr.atomic.compare_add = 999;
  wr.wr.atomic.swap = 1;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  std::memcpy(&got, result.bytes.data(), 8);
  std::memcpy(&now, target.bytes.data() + 8, 8);
  EXPECT_EQ(got, 7u);
  EXPECT_EQ(now, 7u);
}

// IBTA 1.5 ATOMIC WRITE over the wire: the 8 bytes of one SGE (or, inline,
// the 8 bytes taken at post time) land at an aligned remote address, the
// bytes around them untouched, and the request completes as
// IBV_WC_ATOMIC_WRITE once the ACK comes. A misaligned address is NAKed as
// an invalid request and writes nothing.
TEST_F(EngineTest, AtomicWriteStoresEightBytes) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer source = Register(pair_->a(), 8, 0);
  Pattern(source, 21);
  Buffer target = Register(pair_->b(), 64, 0xEE);
  const std::vector<uint8_t> before = target.bytes;

  ibv_sge sge{source.addr(), 8, source.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = target.addr() + 16;
  wr.wr.rdma.rkey = target.keys.rkey;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(0, std::memcmp(target.bytes.data() + 16, source.bytes.data(), 8));
  EXPECT_EQ(0, std::memcmp(target.bytes.data(), before.data(), 16));
  EXPECT_EQ(0, std::memcmp(target.bytes.data() + 24, before.data() + 24, 40));

  // Inline: the value is taken when posting; changing it afterwards changes
  // nothing on the wire. No lkey is needed.
  uint8_t value[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ibv_sge inline_sge{reinterpret_cast<uint64_t>(value), 8, 0};
  wr.wr_id = 2;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.sg_list = &inline_sge;
  wr.wr.rdma.remote_addr = target.addr() + 40;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  std::memset(value, 0, sizeof(value));
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);
  const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(0, std::memcmp(target.bytes.data() + 40, want, 8));

  // Anything but 8 bytes is refused when posting (IBTA 1.5, 9.4.7).
  ibv_sge short_sge{source.addr(), 4, source.keys.lkey};
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &short_sge;
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), EINVAL);

  // Misaligned: an invalid request NAK, the QP stops, nothing is written.
  const std::vector<uint8_t> now = target.bytes;
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.wr.rdma.remote_addr = target.addr() + 4;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(target.bytes, now);
  EXPECT_EQ(qb->state.load(), IBV_QPS_ERR);
}

// perftest's ib_read_bw and ib_atomic_bw servers leave their QP in RTR: the
// responder must answer READs and atomics from RTR (IBTA 10.3.1.2), as the
// kernel's rxe does. Responses queued and never sent would leave the rxe
// client retrying forever.
TEST_F(EngineTest, ResponderInRtrAnswersReadsAndAtomics) {
  Start();
  RcConnectOptions connect;
  connect.b_stays_in_rtr = true;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;
  ASSERT_EQ(qb->state.load(), IBV_QPS_RTR);
  constexpr uint32_t kSize = 8192;  // several response packets at MTU 1024
  Buffer local = Register(pair_->a(), kSize, 0);
  Buffer remote = Register(pair_->b(), kSize, 0);
  Pattern(remote, 9);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_READ, local, kSize, 1, remote.addr(), remote.keys.rkey), 0);
  auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(local.bytes, remote.bytes);

  uint64_t initial = 40;
  std::memcpy(remote.bytes.data(), &initial, 8);
  ibv_sge sge{local.addr(), 8, local.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = remote.addr();
  wr.wr.atomic.rkey = remote.keys.rkey;
  wr.wr.atomic.compare_add = 2;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  wc = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t got, now;
  std::memcpy(&got, local.bytes.data(), 8);
  std::memcpy(&now, remote.bytes.data(), 8);
  EXPECT_EQ(got, 40u);
  EXPECT_EQ(now, 42u);
}

TEST_F(EngineTest, WriteWithImmediateConsumesAReceive) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer local = Register(pair_->a(), 3000, 0);
  Pattern(local, 9);
  Buffer remote = Register(pair_->b(), 3000, 0);
  Buffer unused = Register(pair_->b(), 16, 0);
  PostRecv(pair_->b(), qb, unused, 42);
  ibv_sge sge{local.addr(), 3000, local.keys.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(1234);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote.addr();
  wr.wr.rdma.rkey = remote.keys.rkey;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair_->a().engine->PostSend(qa, &wr, &bad), 0);
  auto wc = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc[0].wr_id, 42u);
  EXPECT_EQ(wc[0].byte_len, 3000u);
  EXPECT_EQ(ntohl(wc[0].imm_data), 1234u);
  EXPECT_EQ(remote.bytes, local.bytes);
}

TEST_F(EngineTest, BadRkeyOrRangeIsRemoteAccessErrorAndMemoryUntouched) {
  Start();
  for (int variant = 0; variant < 3; ++variant) {
    auto qps = pair_->ConnectQps({});
    ASSERT_TRUE(qps.ok());
    auto [qa, qb] = *qps;
    Buffer local = Register(pair_->a(), 256, 0x11);
    Buffer remote = Register(pair_->b(), 256, 0x22);
    uint64_t addr = remote.addr();
    uint32_t rkey = remote.keys.rkey;
    uint32_t length = 256;
    if (variant == 0) rkey ^= 0x55;           // a key that does not exist
    if (variant == 1) addr += 1;              // one byte past the end
    if (variant == 2) length = 128, addr -= 64;  // starts before the region
    ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_RDMA_WRITE, local, length, 1, addr, rkey), 0);
    auto wc = pair_->WaitCompletions(pair_->a().cq, 1);
    ASSERT_EQ(wc.size(), 1u) << variant;
    EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << variant;
    EXPECT_EQ(qa->state.load(), IBV_QPS_ERR);
    EXPECT_EQ(qb->state.load(), IBV_QPS_ERR);
    for (uint8_t x : remote.bytes) ASSERT_EQ(x, 0x22) << variant;
  }
}

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
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
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
  ibv_send_wr wr{};
  wr.wr_id = 4;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
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

TEST_F(EngineTest, ReceiveTooSmallIsLocalLengthError) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 2000, 1);
  Buffer dst = Register(pair_->b(), 1000, 0);
  PostRecv(pair_->b(), qb, dst, 3);
  ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 2000, 4), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(recv[0].vendor_err, 24u) << "bytes past the buffer in the packet that overflowed (1024 - 1000)";
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_INV_REQ_ERR);
}

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
  ibv_send_wr wr{};
  wr.wr_id = 6;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
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
  Endpoint* sides[2] = {&pair_->a(), &pair_->b()};
  for (int i = 0; i < 2; ++i) {
    QpInitAttr init;
    init.type = IBV_QPT_UD;
    init.pd = sides[i]->pd;
    init.send_cq = sides[i]->cq;
    init.recv_cq = sides[i]->cq;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
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
  ibv_send_wr wr{};
  wr.wr_id = 22;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
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

TEST_F(EngineTest, PostSendRejectsBadRequestsWithErrnoAndBadWr) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer src = Register(pair_->a(), 64, 0);
  ibv_sge sge{src.addr(), 64, src.keys.lkey};
  ibv_send_wr good{}, bad_wr{};
  good.opcode = IBV_WR_SEND;
  good.sg_list = &sge;
  good.num_sge = 1;
  good.next = &bad_wr;
  bad_wr = good;
  bad_wr.next = nullptr;
  bad_wr.num_sge = 99;  // more than max_send_sge
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &good, &bad), EINVAL);
  EXPECT_EQ(bad, &bad_wr);
  bad_wr.num_sge = 1;
  bad_wr.opcode = static_cast<ibv_wr_opcode>(77);
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &bad_wr, &bad), EINVAL);
  bad_wr.opcode = IBV_WR_SEND;
  bad_wr.send_flags = IBV_SEND_INLINE;
  sge.length = 1000;  // above max_inline_data
  EXPECT_EQ(pair_->a().engine->PostSend(qa, &bad_wr, &bad), EINVAL);
}

TEST_F(EngineTest, SendQueueFullIsEnomem) {
  Start();
  RcConnectOptions connect;
  connect.max_send_wr = 4;
  auto qps = pair_->ConnectQps(connect);
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  (void)qb;
  Buffer src = Register(pair_->a(), 8, 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 8, i), 0);
  EXPECT_EQ(PostSend(pair_->a(), qa, IBV_WR_SEND, src, 8, 9), ENOMEM);
}

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

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
    ibv_send_wr wr{};
    wr.wr_id = victim;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
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

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

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

namespace uroce::transport {
namespace {

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
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(pair_->b().engine->PostSrqRecv(*srq, &wr, &bad), 0);
  }
  // Posting to a QP that has an SRQ is refused.
  ibv_sge sge{dst.addr(), 64, dst.keys.lkey};
  ibv_recv_wr direct{};
  direct.sg_list = &sge;
  direct.num_sge = 1;
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
      wr = {};
      wr.wr_id = 1000 + i;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sge;
      wr.num_sge = 1;
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

// Loopback (EngineConfig::loopback): QPs of one engine reach each other
// through the engine's own GIDs, as on an RDMA NIC, and those frames never
// reach the port. rdma-core's tests and UCX connect a device to itself.
class LoopbackTest : public EngineTest {
 protected:
  Endpoint& a() { return pair_->a(); }
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
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(pair_->b().engine->PostSrqRecv(srq, &wr, &bad), 0);
  }
  int PostXrc(ibv_wr_opcode op, Buffer& local, uint32_t length, uint64_t wr_id, uint32_t srqn,
              uint64_t remote_addr = 0, uint32_t rkey = 0, uint64_t add = 0) {
    ibv_sge sge{local.addr(), length, local.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
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
