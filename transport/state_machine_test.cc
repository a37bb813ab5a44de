// The requester, completer and responder as state machines: built packets go
// in, and what the engine would transmit is parsed and inspected.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "pmd/mempool.h"
#include "transport/engine.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"
#include "transport/scripted_peer.h"
#include "transport/scripted_port.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

constexpr uint32_t kPeerQpn = 0x123;
constexpr uint32_t kRqPsn = 1000;
constexpr uint32_t kSqPsn = 5000;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

struct Sent {
  PacketFields fields;
  std::vector<uint8_t> payload;
};

class StateMachineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    auto pool = pmd::CreatePktPool({.name = "sm_pool" + std::to_string(n++),
                                    .mbufs = 1023,
                                    .per_core_cache = 0,
                                    .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256});
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    const uint8_t ours[4] = {10, 1, 0, 1}, theirs[4] = {10, 1, 0, 2};
    our_gid_ = Ipv4MappedGid(ours);
    peer_gid_ = Ipv4MappedGid(theirs);
    EngineConfig config;
    config.mac = {2, 0, 0, 0, 0, 1};
    config.gids = {our_gid_};
    config.tx_pool = pool_.get();
    config.io = &port_;
    config.virtual_now_ns = &now_;
    engine_ = std::make_unique<Engine>(config);
    engine_->AddNeighbor(peer_gid_, peer_mac_);
    pd_ = *engine_->AllocPd();
    cq_ = *engine_->CreateCq(256);
    QpInitAttr init = OneCqQpInit(IBV_QPT_RC, pd_, cq_, 32, 2);
    qp_ = *engine_->CreateQp(init);
    ASSERT_TRUE(ConnectToScriptedPeer(*engine_, qp_, {peer_gid_, kPeerQpn, kRqPsn, kSqPsn}, kAll).ok());
    memory_.assign(8192, 0);
    keys_ = *engine_->RegMr(pd_, memory_.data(), memory_.size(), reinterpret_cast<uint64_t>(memory_.data()), kAll);
  }

  void TearDown() override {
    engine_.reset();
    port_.FreeAll();
    EXPECT_EQ(pmd::AvailableMbufs(pool_.get()), 1023u) << "mbufs leaked";
  }

  // A packet from the peer to our QP.
  void Inject(uint8_t opcode, uint32_t psn, uint32_t payload_length = 0, bool ack_request = false,
              void (*tweak)(PacketFields&) = nullptr) {
    PacketFields f;
    f.dst_mac = {2, 0, 0, 0, 0, 1};
    f.src_mac = peer_mac_;
    f.src_gid = peer_gid_;
    f.dst_gid = our_gid_;
    f.udp_src_port = 0xC001;
    f.bth.opcode = opcode;
    f.bth.dest_qp = qp_->qpn;
    f.bth.psn = Psn(psn);
    f.bth.ack_request = ack_request;
    f.payload_length = payload_length;
    if (tweak) tweak(f);
    std::vector<uint8_t> payload(payload_length, 0xAB);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    ASSERT_EQ(BuildPacket(f, payload.data(), m), BuildError::kOk);
    port_.inbound.push_back(m);
  }

  // Polls and returns (and frees) what the engine transmitted.
  std::vector<Sent> Transmitted(int polls = 1) {
    for (int i = 0; i < polls; ++i) {
      now_ += 1000;
      engine_->Poll();
    }
    std::vector<Sent> out;
    for (rte_mbuf* m : port_.outbound) {
      PacketView view;
      EXPECT_EQ(ParsePacket(m, ParseOptions{}, &view), ParseError::kOk);
      out.push_back({view.fields, std::vector<uint8_t>(view.payload, view.payload + view.fields.payload_length)});
      rte_pktmbuf_free(m);
    }
    port_.outbound.clear();
    return out;
  }

  std::vector<ibv_wc> Completions() {
    std::vector<ibv_wc> out(64);
    out.resize(cq_->Poll(64, out.data()));
    return out;
  }

  void PostRecv(uint64_t wr_id, uint32_t length = 4096) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory_.data()), length, keys_.lkey};
    ibv_recv_wr wr = RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostRecv(qp_, &wr, &bad), 0);
  }

  void PostSend(ibv_wr_opcode op, uint32_t length, uint64_t wr_id = 1) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory_.data()), length, keys_.lkey};
    ibv_send_wr wr = SignaledSendWr(wr_id, op, &sge);
    wr.wr.rdma.remote_addr = 0x1000;
    wr.wr.rdma.rkey = 0x77;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostSend(qp_, &wr, &bad), 0);
  }

  static uint8_t Op(Opcode o) { return static_cast<uint8_t>(o); }

  pmd::MempoolPtr pool_;
  ScriptedPort port_;
  std::unique_ptr<Engine> engine_;
  uint64_t now_ = 1'000'000;
  Gid our_gid_{}, peer_gid_{};
  MacAddress peer_mac_{2, 0, 0, 0, 0, 2};
  PdHandle pd_ = 0;
  CompletionQueue* cq_ = nullptr;
  QueuePair* qp_ = nullptr;
  std::vector<uint8_t> memory_;
  MrKeys keys_;
};

// Large frames reach the port while the rest of the poll's are still being
// built (Transmitter::kFlushBytes), so the peer starts on the first ones;
// small frames still go in one burst per poll.
TEST_F(StateMachineTest, LargeFramesLeaveInBurstsDuringThePollSmallOnesInOne) {
  for (int i = 0; i < 4; ++i) PostSend(IBV_WR_RDMA_WRITE, 8192, i);  // 32 packets of the 1024 B MTU
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 32u) << "one QP's budget in one poll";
  ASSERT_GE(port_.bursts.size(), 2u) << "all 32 frames went in one burst at the end of the poll";
  for (size_t i = 0; i + 1 < port_.bursts.size(); ++i) {
    EXPECT_LE(port_.bursts[i] * 1024u, 2u * 16384u) << "burst " << i << " waited too long";
  }
  port_.bursts.clear();
  for (int i = 0; i < 16; ++i) PostSend(IBV_WR_RDMA_WRITE, 64, 10 + i);
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 16u);
  EXPECT_EQ(port_.bursts.size(), 1u) << "small frames: one burst per poll";
}

// A port that refuses frames is asked again at the end of the poll, not
// every 16 KiB, and the poll counts once in tx_queue_full_polls.
TEST_F(StateMachineTest, AFullPortIsCountedOncePerPollAndNotAskedEveryBurst) {
  port_.blocked = true;
  for (int i = 0; i < 4; ++i) PostSend(IBV_WR_RDMA_WRITE, 8192, i);  // 32 packets of the 1024 B MTU
  const uint64_t before = engine_->counters().tx_queue_full_polls;
  engine_->Poll();
  EXPECT_EQ(engine_->counters().tx_queue_full_polls - before, 1u);
  port_.blocked = false;
  EXPECT_EQ(Transmitted().size(), 32u) << "what waited leaves on the next poll, in order";
}

TEST_F(StateMachineTest, ResponderAcksARequestedAckWithMsn) {
  PostRecv(7);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 100, /*ack_request=*/true);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.bth.opcode, Op(Opcode::kRcAcknowledge));
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn);
  EXPECT_EQ(sent[0].fields.bth.dest_qp, kPeerQpn);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
  EXPECT_EQ(sent[0].fields.aeth.msn, 1u);
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].byte_len, 100u);
  EXPECT_EQ(memory_[99], 0xAB);
}

TEST_F(StateMachineTest, ResponderCoalescesAcksInABurst) {
  PostRecv(1);
  PostRecv(2);
  PostRecv(3);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 1, 8, true);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 2, 8, true);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u) << "one ACK for the burst";
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn + 2);
  EXPECT_EQ(sent[0].fields.aeth.msn, 3u);
}

TEST_F(StateMachineTest, ResponderNaksAGapOnce) {
  PostRecv(1);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 3, 8, true);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 4, 8, true);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u) << "one PSN sequence NAK per gap";
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[0].fields.aeth.value(), uint8_t(NakCode::kPsnSequenceError));
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn) << "the PSN the responder expects";
  EXPECT_TRUE(Completions().empty());
  // The expected packet clears the gap; a new gap gets a new NAK.
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 5, 8, true);
  sent = Transmitted();
  // The NAK acknowledges kRqPsn too (it names the next PSN expected): it
  // stands for the ACK the first packet asked for.
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn + 1);
}

TEST_F(StateMachineTest, ResponderAnswersADuplicateWithTheNewestAck) {
  PostRecv(1);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);
  Transmitted();
  Completions();
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);  // the requester did not get our ACK
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn);
  EXPECT_TRUE(Completions().empty()) << "a duplicate is not delivered twice";
}

TEST_F(StateMachineTest, ResponderSendsRnrNakWithoutAReceive) {
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kRnrNak);
  EXPECT_EQ(sent[0].fields.aeth.value(), 12) << "our min_rnr_timer";
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn);
  // Once a receive is there, the same PSN is accepted.
  PostRecv(1);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn, 8, true);
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
}

TEST_F(StateMachineTest, ResponderRejectsABadRkeyBeforeAnyByteMoves) {
  Inject(Op(Opcode::kRcRdmaWriteOnly), kRqPsn, 64, true, [](PacketFields& f) {
    f.reth.rkey = 0xDEAD00;
    f.reth.virtual_address = 0x1000;
    f.reth.dma_length = 64;
  });
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[0].fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  for (uint8_t b : memory_) ASSERT_EQ(b, 0);
}

TEST_F(StateMachineTest, ResponderAnswersAReadInMtuSizedResponses) {
  for (size_t i = 0; i < 2500; ++i) memory_[i] = static_cast<uint8_t>(i);
  static uint64_t va;
  static uint32_t rkey;
  va = reinterpret_cast<uint64_t>(memory_.data());
  rkey = keys_.rkey;
  Inject(Op(Opcode::kRcRdmaReadRequest), kRqPsn, 0, true, [](PacketFields& f) {
    f.reth.virtual_address = va;
    f.reth.rkey = rkey;
    f.reth.dma_length = 2500;
  });
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].fields.bth.opcode, Op(Opcode::kRcRdmaReadResponseFirst));
  EXPECT_EQ(sent[1].fields.bth.opcode, Op(Opcode::kRcRdmaReadResponseMiddle));
  EXPECT_EQ(sent[2].fields.bth.opcode, Op(Opcode::kRcRdmaReadResponseLast));
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(sent[i].fields.bth.psn.value(), kRqPsn + i);
  EXPECT_EQ(sent[0].payload.size(), 1024u);
  EXPECT_EQ(sent[2].payload.size(), 452u);
  EXPECT_EQ(sent[1].payload[0], static_cast<uint8_t>(1024));
  // The next request PSN is after the response PSNs (IBTA 9.7.5.1.3).
  PostRecv(1);
  Inject(Op(Opcode::kRcSendOnly), kRqPsn + 3, 8, true);
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
}

TEST_F(StateMachineTest, ResponderReplaysADuplicateAtomicWithoutRunningItAgain) {
  uint64_t value = 40;
  std::memcpy(memory_.data(), &value, 8);
  static uint64_t va;
  static uint32_t rkey;
  va = reinterpret_cast<uint64_t>(memory_.data());
  rkey = keys_.rkey;
  auto add_two = [](PacketFields& f) {
    f.atomic_eth.virtual_address = va;
    f.atomic_eth.rkey = rkey;
    f.atomic_eth.swap_or_add_data = 2;
  };
  Inject(Op(Opcode::kRcFetchAdd), kRqPsn, 0, true, add_two);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.bth.opcode, Op(Opcode::kRcAtomicAcknowledge));
  EXPECT_EQ(sent[0].fields.atomic_ack_eth.original_remote_data, 40u);
  Inject(Op(Opcode::kRcFetchAdd), kRqPsn, 0, true, add_two);  // duplicate
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.atomic_ack_eth.original_remote_data, 40u) << "replayed from the cache";
  std::memcpy(&value, memory_.data(), 8);
  EXPECT_EQ(value, 42u) << "executed once";
}

TEST_F(StateMachineTest, RequesterSegmentsAndSetsAckRequestOnTheLast) {
  PostSend(IBV_WR_SEND, 2500);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].fields.bth.opcode, Op(Opcode::kRcSendFirst));
  EXPECT_EQ(sent[1].fields.bth.opcode, Op(Opcode::kRcSendMiddle));
  EXPECT_EQ(sent[2].fields.bth.opcode, Op(Opcode::kRcSendLast));
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].fields.bth.psn.value(), kSqPsn + i);
    EXPECT_EQ(sent[i].fields.bth.dest_qp, kPeerQpn);
    EXPECT_EQ(sent[i].fields.bth.ack_request, i == 2);
  }
  EXPECT_EQ(sent[2].payload.size(), 452u);
  EXPECT_TRUE(Completions().empty()) << "not before the ACK";
  Inject(Op(Opcode::kRcAcknowledge), kSqPsn + 2, 0, false, [](PacketFields& f) {
    f.aeth.syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
  });
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_SEND);
}

TEST_F(StateMachineTest, RequesterGoesBackNOnASequenceNak) {
  PostSend(IBV_WR_RDMA_WRITE, 3000);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].fields.reth.dma_length, 3000u);
  // The responder lost the second packet.
  Inject(Op(Opcode::kRcAcknowledge), kSqPsn + 1, 0, false, [](PacketFields& f) {
    f.aeth.syndrome = AethFields::Syndrome(AethKind::kNak, uint8_t(NakCode::kPsnSequenceError));
  });
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn + 1);
  EXPECT_EQ(sent[0].fields.bth.opcode, Op(Opcode::kRcRdmaWriteMiddle));
  EXPECT_EQ(sent[1].fields.bth.opcode, Op(Opcode::kRcRdmaWriteLast));
  EXPECT_EQ(engine_->counters().retransmits, 1u);
}

TEST_F(StateMachineTest, RequesterRetransmitsOnTimeoutThenGivesUp) {
  PostSend(IBV_WR_SEND, 100);
  ASSERT_EQ(Transmitted().size(), 1u);
  // timeout 10: 4.096 us * 1024 = 4.19 ms; retry_cnt 2.
  for (int attempt = 0; attempt < 2; ++attempt) {
    now_ += 4'200'000;
    auto sent = Transmitted();
    ASSERT_EQ(sent.size(), 1u) << attempt;
    EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn);
  }
  now_ += 4'200'000;
  EXPECT_TRUE(Transmitted().empty());
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

TEST_F(StateMachineTest, RequesterWaitsTheRnrTimerThenRetries) {
  PostSend(IBV_WR_SEND, 100);
  Transmitted();
  Inject(Op(Opcode::kRcAcknowledge), kSqPsn, 0, false, [](PacketFields& f) {
    f.aeth.syndrome = AethFields::Syndrome(AethKind::kRnrNak, 14);  // 1.28 ms
  });
  EXPECT_TRUE(Transmitted().empty());
  now_ += 1'000'000;
  EXPECT_TRUE(Transmitted().empty()) << "still inside the RNR timer";
  now_ += 300'000;
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn);
}

TEST_F(StateMachineTest, StalePacketsAreIgnored) {
  PostSend(IBV_WR_SEND, 100);
  Transmitted();
  // An ACK for a PSN never sent, and one far in the past.
  for (uint32_t psn : {kSqPsn + 50, kSqPsn - 1000}) {
    Inject(Op(Opcode::kRcAcknowledge), psn, 0, false, [](PacketFields& f) {
      f.aeth.syndrome = AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits);
    });
  }
  Transmitted();
  EXPECT_TRUE(Completions().empty());
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

}  // namespace
}  // namespace uroce::transport
