// The requester and responder end to end: SEND, RDMA WRITE and READ, atomics and immediate
// data between two engines, and the requests refused when posted or at the responder.
#include "transport/engine.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "transport/engine_test_fixture.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// The responder's step names (responder.h), one per step, for logs.
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

// The completer's step names (completer.h), one per step, for logs.
TEST(CompleterStepTest, EveryStepHasItsOwnName) {
  const CompleterStep steps[] = {
      CompleterStep::kCheckPsn,      CompleterStep::kCheckAck,     CompleterStep::kAck,
      CompleterStep::kRnrNak,        CompleterStep::kSequenceNak,  CompleterStep::kFatalNak,
      CompleterStep::kRetireEarlier, CompleterStep::kMatchRequest, CompleterStep::kAtomicWriteDone,
      CompleterStep::kAtomicResult,  CompleterStep::kReadData,     CompleterStep::kComplete,
      CompleterStep::kDone};
  std::vector<std::string> names;
  for (CompleterStep step : steps) names.push_back(CompleterStepName(step));
  EXPECT_EQ(names, (std::vector<std::string>{"check_psn", "check_ack", "ack", "rnr_nak", "sequence_nak", "fatal_nak",
                                             "retire_earlier", "match_request", "atomic_write_done", "atomic_result",
                                             "read_data", "complete", "done"}));
  EXPECT_STREQ(CompleterStepName(static_cast<CompleterStep>(200)), "unknown");
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
  ibv_send_wr wr = SignaledSendWr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge);
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
  ibv_send_wr wr = SignaledSendWr(1, IBV_WR_ATOMIC_WRITE, &sge);
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
  ibv_send_wr wr = SignaledSendWr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge);
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

// A request built in the engine's form (as the libfabric endpoint builds it)
// meets the same checks as an ibv_send_wr, and one that passes is sent.
TEST_F(EngineTest, PostSendWqeChecksTheBuiltRequestAsPostSendDoes) {
  Start();
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  auto [qa, qb] = *qps;
  Buffer src = Register(pair_->a(), 64, 0);
  Pattern(src, 3);
  Buffer dst = Register(pair_->b(), 64, 0xEE);
  auto send = [&] {
    SendWqe wqe;
    wqe.wr_id = 5;
    wqe.opcode = IBV_WR_SEND;
    wqe.send_flags = IBV_SEND_SIGNALED;
    wqe.sge[0] = Sge{src.addr(), 64, src.keys.lkey};
    wqe.num_sge = 1;
    wqe.total_length = 64;
    return wqe;
  };
  SendWqe wqe = send();
  wqe.opcode = static_cast<ibv_wr_opcode>(77);
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "an unknown opcode";
  wqe = send();
  wqe.opcode = IBV_WR_ATOMIC_WRITE;
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "an ATOMIC WRITE of 64 bytes";
  wqe = send();
  wqe.num_sge = kMaxSendSge;
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "more SGEs than max_send_sge";
  wqe = send();
  wqe.total_length = 65;
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "a length its SGEs do not add up to";
  wqe = send();
  wqe.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "an atomic on 64 bytes";
  wqe = send();
  wqe.num_sge = 0;
  wqe.total_length = kMaxInlineData;  // above the QP's max_inline_data
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "inline bytes beyond max_inline_data";
  wqe = send();
  wqe.opcode = IBV_WR_RDMA_READ;
  wqe.num_sge = 0;
  wqe.total_length = 8;
  EXPECT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), EINVAL) << "a READ into inline bytes";

  PostRecv(pair_->b(), qb, dst, 6);
  wqe = send();
  ASSERT_EQ(pair_->a().engine->PostSendWqe(qa, &wqe), 0);
  auto recv = pair_->WaitCompletions(pair_->b().cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv[0].byte_len, 64u);
  EXPECT_EQ(0, std::memcmp(dst.bytes.data(), src.bytes.data(), 64));
  auto sent = pair_->WaitCompletions(pair_->a().cq, 1);
  ASSERT_EQ(sent.size(), 1u) << "only the request that passed was sent";
  EXPECT_EQ(sent[0].wr_id, 5u);
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
