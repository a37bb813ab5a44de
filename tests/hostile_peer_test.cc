// The hostile-peer suite: a peer that speaks raw RoCEv2 frames
// into the engine's real receive path (HandleFrame and every stage behind
// it), through a port whose transmit side the test can block, as a NIC whose
// queue is backed up. Every scenario asserts what an RDMA NIC trusted with an
// application's memory must guarantee:
//   - no crash, no write outside a registered and permitted region (canaries
//     around the region), no read of one after ibv_dereg_mr returns;
//   - every QP healthy or in ERR with the right status;
//   - a poll stages no more than the transmit stage holds;
//   - every mbuf back in its pool at teardown.
// The connection manager's scenarios (REQ and MAD storms, spoofed sources)
// are in tests/hostile_cm_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "pmd/mempool.h"
#include "transport/engine.h"
#include "transport/link_frame.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"
#include "transport/pull_descriptor.h"
#include "transport/scripted_peer.h"
#include "transport/scripted_port.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

constexpr uint32_t kPeerQpn = 0x4242;
constexpr uint32_t kRqPsn = 1000;
constexpr uint32_t kSqPsn = 5000;
constexpr uint32_t kPoolMbufs = 4095;
constexpr uint32_t kMtu = 1024;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint8_t kCanary = 0xC5;
constexpr size_t kGuard = 4096;

struct Sent {
  PacketFields fields;
  const OpcodeInfo* opcode = nullptr;
  std::vector<uint8_t> payload;
};

// Registered memory between two guard areas that must never change.
struct GuardedRegion {
  explicit GuardedRegion(size_t length) : bytes(new uint8_t[length + 2 * kGuard]), size(length) {
    std::memset(bytes.get(), kCanary, length + 2 * kGuard);
    std::memset(data(), 0, length);
  }
  uint8_t* data() { return bytes.get() + kGuard; }
  uint64_t va() { return reinterpret_cast<uint64_t>(data()); }
  bool GuardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (bytes[i] != kCanary || bytes[kGuard + size + i] != kCanary) return false;
    }
    return true;
  }
  std::unique_ptr<uint8_t[]> bytes;
  size_t size;
};

class HostilePeerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartEngine({}); }

  void StartEngine(const std::function<void(EngineConfig&)>& tune) {
    static int n = 0;
    auto pool = pmd::CreatePktPool({.name = "hostile_pool" + std::to_string(n++),
                                    .mbufs = kPoolMbufs,
                                    .per_core_cache = 0,
                                    .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256});
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    const uint8_t ours[4] = {10, 1, 0, 1}, theirs[4] = {10, 1, 0, 2};
    our_gid_ = Ipv4MappedGid(ours);
    peer_gid_ = Ipv4MappedGid(theirs);
    EngineConfig config;
    config.mac = our_mac_;
    config.gids = {our_gid_};
    config.tx_pool = pool_.get();
    config.io = &port_;
    config.virtual_now_ns = &now_;
    config.random_seed = 7;
    if (tune) tune(config);
    engine_ = std::make_unique<Engine>(config);
    engine_->AddNeighbor(peer_gid_, peer_mac_);
    pd_ = *engine_->AllocPd();
    cq_ = *engine_->CreateCq(4096);
    qp_ = MakeConnectedQp();
    region_ = std::make_unique<GuardedRegion>(65536);
    keys_ = *engine_->RegMr(pd_, region_->data(), region_->size, region_->va(), kAll);
  }

  // INIT, RTR to the peer's kPeerQpn, RTS: `qp` connected as the peer expects.
  QueuePair* Connect(QueuePair* qp) {
    EXPECT_TRUE(ConnectToScriptedPeer(*engine_, qp, {peer_gid_, kPeerQpn, kRqPsn, kSqPsn}, kAll).ok());
    return qp;
  }

  QueuePair* MakeConnectedQp() {
    QpInitAttr init = OneCqQpInit(IBV_QPT_RC, pd_, cq_, 64, 2);
    QueuePair* qp = *engine_->CreateQp(init);
    return Connect(qp);
  }

  void TearDown() override {
    EXPECT_TRUE(region_->GuardsIntact()) << "a byte outside the registered region changed";
    engine_.reset();
    port_.FreeAll();
    EXPECT_EQ(pmd::AvailableMbufs(pool_.get()), kPoolMbufs) << "mbufs leaked";
  }

  // A frame from the peer (or, with `tweak`, from anyone) to `qp`; its
  // payload `payload` (payload_length bytes of it), else 0xAB bytes.
  void Inject(QueuePair* qp, Opcode opcode, uint32_t psn, uint32_t payload_length = 0, bool ack_request = false,
              const std::function<void(PacketFields&)>& tweak = nullptr, const uint8_t* payload_bytes = nullptr) {
    PacketFields f;
    f.dst_mac = our_mac_;
    f.src_mac = peer_mac_;
    f.src_gid = peer_gid_;
    f.dst_gid = our_gid_;
    f.udp_src_port = 0xC001;
    f.bth.opcode = static_cast<uint8_t>(opcode);
    f.bth.dest_qp = qp->qpn;
    f.bth.psn = Psn(psn);
    f.bth.ack_request = ack_request;
    f.payload_length = payload_length;
    if (tweak) tweak(f);
    std::vector<uint8_t> payload(f.payload_length, 0xAB);
    if (payload_bytes != nullptr && f.payload_length > 0) std::memcpy(payload.data(), payload_bytes, f.payload_length);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(BuildPacket(f, payload.data(), m), BuildError::kOk);
    port_.inbound.push_back(m);
  }
  void Inject(Opcode opcode, uint32_t psn, uint32_t payload_length = 0, bool ack_request = false,
              const std::function<void(PacketFields&)>& tweak = nullptr) {
    Inject(qp_, opcode, psn, payload_length, ack_request, tweak);
  }

  // One poll (the transmit stage may keep frames while the port is blocked).
  void PollOnce() {
    now_ += 1000;
    const unsigned moved = engine_->Poll();
    // A poll's work is bounded, whatever arrives: at most four receive
    // bursts in, at most a stage (512) out.
    ASSERT_LE(moved, 4u * engine_->config().rx_burst + 512u) << "an unbounded poll";
  }

  // Polls and returns (and frees) what the engine transmitted.
  std::vector<Sent> Transmitted(int polls = 1) {
    for (int i = 0; i < polls; ++i) PollOnce();
    std::vector<Sent> out;
    for (rte_mbuf* m : port_.outbound) {
      PacketView view;
      EXPECT_EQ(ParsePacket(m, ParseOptions{}, &view), ParseError::kOk);
      out.push_back(
          {view.fields, view.opcode, std::vector<uint8_t>(view.payload, view.payload + view.fields.payload_length)});
      rte_pktmbuf_free(m);
    }
    port_.outbound.clear();
    return out;
  }

  std::vector<ibv_wc> Completions() {
    std::vector<ibv_wc> out(256);
    out.resize(cq_->Poll(256, out.data()));
    return out;
  }

  void PostRecv(QueuePair* qp, uint64_t wr_id, uint32_t length = 4096) {
    ibv_sge sge{region_->va(), length, keys_.lkey};
    ibv_recv_wr wr = RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostRecv(qp, &wr, &bad), 0);
  }

  void PostSend(ibv_wr_opcode op, uint64_t addr, uint32_t length, uint32_t lkey, uint64_t wr_id = 1) {
    ibv_sge sge{addr, length, lkey};
    ibv_send_wr wr = SignaledSendWr(wr_id, op, &sge);
    wr.wr.rdma.remote_addr = 0x10000;
    wr.wr.rdma.rkey = 0x77;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostSend(qp_, &wr, &bad), 0);
  }

  static size_t CountNaks(const std::vector<Sent>& sent, AethKind kind) {
    size_t n = 0;
    for (const Sent& s : sent) {
      if (s.opcode->operation == Operation::kAcknowledge && s.fields.aeth.kind() == kind) ++n;
    }
    return n;
  }
  // Acknowledgements of one QP (each QP's UDP source port is its own).
  static std::vector<Sent> AcknowledgementsOf(const std::vector<Sent>& sent, const QueuePair* qp) {
    std::vector<Sent> out;
    for (const Sent& s : sent) {
      if (s.opcode->operation == Operation::kAcknowledge && s.fields.udp_src_port == qp->path.udp_source_port) {
        out.push_back(s);
      }
    }
    return out;
  }

  // Blocks the port and fills the 512-frame transmit stage with READ
  // responses of other QPs, so that whatever comes next finds no room.
  std::vector<QueuePair*> FillTheStage() {
    port_.blocked = true;
    std::vector<QueuePair*> readers;
    const uint64_t va = region_->va();
    const uint32_t rkey = keys_.rkey;
    for (int i = 0; i < 20; ++i) {
      readers.push_back(MakeConnectedQp());
      Inject(readers.back(), Opcode::kRcRdmaReadRequest, kRqPsn, 0, true, [&](PacketFields& f) {
        f.reth.virtual_address = va;
        f.reth.rkey = rkey;
        f.reth.dma_length = 32 * kMtu;
      });
    }
    for (int poll = 0; poll < 4; ++poll) PollOnce();
    return readers;
  }

  pmd::MempoolPtr pool_;
  ScriptedPort port_;
  std::unique_ptr<Engine> engine_;
  uint64_t now_ = 1'000'000;
  Gid our_gid_{}, peer_gid_{};
  MacAddress our_mac_{2, 0, 0, 0, 0, 1};
  MacAddress peer_mac_{2, 0, 0, 0, 0, 2};
  PdHandle pd_ = 0;
  CompletionQueue* cq_ = nullptr;
  QueuePair* qp_ = nullptr;
  std::unique_ptr<GuardedRegion> region_;
  MrKeys keys_;
};

// ---------------------------------------------------------------- 1: the stage

// 700 SENDs to a QP with no receive posted, in one poll of 4 × 512 frames,
// while the port accepts nothing and the stage is full: every one would be an
// RNR NAK. They wait as one pending NAK (a sequence NAK says less and does not
// replace it); when the port drains, one RNR NAK leaves, and one per poll
// after that whatever the peer sends.
TEST_F(HostilePeerTest, RnrStormWithAFullStageWaitsAsOneNak) {
  engine_.reset();
  StartEngine([](EngineConfig& c) { c.rx_burst = 512; });
  FillTheStage();
  const uint64_t full_before = engine_->counters().tx_stage_full;
  for (int i = 0; i < 700; ++i) Inject(Opcode::kRcSendOnly, kRqPsn, 64, true);
  Inject(Opcode::kRcSendOnly, kRqPsn + 3, 64, true);  // ahead: would be a sequence NAK
  for (int poll = 0; poll < 4; ++poll) PollOnce();
  EXPECT_GT(engine_->counters().tx_stage_full, full_before) << "the NAK found no room and waited";
  EXPECT_TRUE(port_.outbound.empty());
  port_.blocked = false;
  std::vector<Sent> sent;
  for (int poll = 0; poll < 200; ++poll) {
    auto more = Transmitted();
    sent.insert(sent.end(), more.begin(), more.end());
  }
  auto ours = AcknowledgementsOf(sent, qp_);
  ASSERT_EQ(ours.size(), 1u) << "one acknowledgement for 701 requests";
  EXPECT_EQ(ours[0].fields.aeth.kind(), AethKind::kRnrNak) << "the RNR NAK, not the sequence NAK";
  EXPECT_EQ(ours[0].fields.bth.psn.value(), kRqPsn);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS) << "RNR is not an error of the responder";
  // More SENDs in a later poll: again one.
  for (int i = 0; i < 100; ++i) Inject(Opcode::kRcSendOnly, kRqPsn, 64, true);
  sent = Transmitted();
  EXPECT_EQ(CountNaks(sent, AethKind::kRnrNak), 1u);
}

// An RNR NAK waits for room; meanwhile the application posts a receive and
// the requester's retransmission of the SEND is accepted. The NAK is stale:
// what leaves is the ACK of the SEND, not a NAK that would cost an RNR retry.
TEST_F(HostilePeerTest, ANakForAPsnAcceptedSinceIsNotSent) {
  FillTheStage();
  Inject(Opcode::kRcSendOnly, kRqPsn, 64, false);
  PollOnce();
  PostRecv(qp_, 1);
  Inject(Opcode::kRcSendOnly, kRqPsn, 64, false);  // the retransmission, no AckReq
  PollOnce();
  port_.blocked = false;
  std::vector<Sent> sent;
  for (int poll = 0; poll < 200; ++poll) {
    auto more = Transmitted();
    sent.insert(sent.end(), more.begin(), more.end());
  }
  auto ours = AcknowledgementsOf(sent, qp_);
  ASSERT_EQ(ours.size(), 1u);
  EXPECT_EQ(ours[0].fields.aeth.kind(), AethKind::kAck);
  EXPECT_EQ(ours[0].fields.bth.psn.value(), kRqPsn);
  EXPECT_EQ(Completions().size(), 1u);
}

// Out-of-window PSNs and fatal requests on many QPs with the port blocked:
// NAKs wait; nothing is staged beyond the stage's room.
TEST_F(HostilePeerTest, NakStormOnManyQpsWithABlockedPortWaitsForRoom) {
  std::vector<QueuePair*> qps{qp_};
  for (int i = 0; i < 40; ++i) qps.push_back(MakeConnectedQp());
  port_.blocked = true;
  for (int round = 0; round < 30; ++round) {
    for (QueuePair* qp : qps) {
      Inject(qp, Opcode::kRcSendOnly, kRqPsn + 1000 + round, 64, true);  // ahead: sequence NAK
      Inject(qp, Opcode::kRcSendOnly, kRqPsn - 50, 64, true);           // behind: duplicate, re-ACK
    }
    PollOnce();
  }
  port_.blocked = false;
  auto sent = Transmitted(3);
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), qps.size()) << "one sequence NAK per gap and QP";
  for (QueuePair* qp : qps) EXPECT_EQ(qp->state.load(), IBV_QPS_RTS);
}

// A READ flood while blocked: responses wait for room, none is lost or
// overruns, and they all leave once the port drains.
TEST_F(HostilePeerTest, ReadResponsesWaitForRoomWhileThePortIsBlocked) {
  std::vector<QueuePair*> qps{qp_};
  for (int i = 0; i < 20; ++i) qps.push_back(MakeConnectedQp());
  port_.blocked = true;
  const uint64_t va = region_->va();
  const uint32_t rkey = keys_.rkey;
  for (QueuePair* qp : qps) {
    for (uint32_t k = 0; k < 4; ++k) {
      Inject(qp, Opcode::kRcRdmaReadRequest, kRqPsn + k * 32, 0, true, [&](PacketFields& f) {
        f.reth.virtual_address = va;
        f.reth.rkey = rkey;
        f.reth.dma_length = 32 * kMtu;
      });
    }
  }
  for (int poll = 0; poll < 20; ++poll) PollOnce();
  EXPECT_GT(engine_->counters().tx_queue_full_polls, 0u) << "the port refused and responses waited";
  port_.blocked = false;
  size_t responses = 0;
  for (int poll = 0; poll < 200; ++poll) {
    for (const Sent& s : Transmitted()) {
      if (s.opcode->operation == Operation::kRdmaReadResponse) ++responses;
    }
  }
  EXPECT_EQ(responses, qps.size() * 4 * 32);
  for (QueuePair* qp : qps) EXPECT_EQ(qp->state.load(), IBV_QPS_RTS);
}

// 1000 copies of an old SEND and of an answered READ in one poll: one ACK and
// at most the READ's replay room of answers, never one per copy.
TEST_F(HostilePeerTest, DuplicateStormIsAnsweredOncePerPoll) {
  PostRecv(qp_, 1);
  Inject(Opcode::kRcSendOnly, kRqPsn, 64, true);
  const uint64_t va = region_->va();
  const uint32_t rkey = keys_.rkey;
  Inject(Opcode::kRcRdmaReadRequest, kRqPsn + 1, 0, true, [&](PacketFields& f) {
    f.reth.virtual_address = va;
    f.reth.rkey = rkey;
    f.reth.dma_length = 64;
  });
  ASSERT_EQ(Transmitted().size(), 1u) << "the READ response acknowledges the SEND too";
  for (int i = 0; i < 1000; ++i) {
    Inject(Opcode::kRcSendOnly, kRqPsn, 64, true);
    Inject(Opcode::kRcRdmaReadRequest, kRqPsn + 1, 0, true, [&](PacketFields& f) {
      f.reth.virtual_address = va;
      f.reth.rkey = rkey;
      f.reth.dma_length = 64;
    });
  }
  size_t frames = 0;
  for (int poll = 0; poll < 20; ++poll) frames += Transmitted().size();
  // Each poll takes 128 frames; per poll, one coalesced ACK and at most the
  // duplicate room (max_dest_rd_atomic = 4) of READ answers.
  EXPECT_LE(frames, 16u * (1 + 4));
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(Completions().size(), 1u) << "the SEND completed once";
}

// ---------------------------------------------------------------- 2: deregistration

// A 32 KiB READ is streaming when the application deregisters the region:
// not one more byte of it leaves, the requester gets a NAK.
TEST_F(HostilePeerTest, DeregisteringEndsAReadResponseInFlight) {
  engine_.reset();
  StartEngine([](EngineConfig& c) { c.per_qp_packet_budget = 4; });
  std::memset(region_->data(), 0x5A, 32 * kMtu);
  const uint64_t va = region_->va();
  const uint32_t rkey = keys_.rkey;
  Inject(Opcode::kRcRdmaReadRequest, kRqPsn, 0, true, [&](PacketFields& f) {
    f.reth.virtual_address = va;
    f.reth.rkey = rkey;
    f.reth.dma_length = 32 * kMtu;
  });
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 4u) << "the budget lets four responses out per poll";
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  // The application may free the memory now; poison it to see any later read.
  std::memset(region_->data(), 0xEE, 32 * kMtu);
  sent = Transmitted(5);
  for (const Sent& s : sent) {
    EXPECT_NE(s.opcode->operation, Operation::kRdmaReadResponse) << "a response after ibv_dereg_mr returned";
    for (uint8_t b : s.payload) ASSERT_NE(b, 0xEE);
  }
  ASSERT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(sent.back().fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  std::memset(region_->data(), 0, 32 * kMtu);
}

// A three-packet WRITE whose region is deregistered after the first packet:
// the middle and last packets write nothing and are not ACKed.
TEST_F(HostilePeerTest, DeregisteringAbortsAWriteInProgress) {
  const uint64_t va = region_->va();
  const uint32_t rkey = keys_.rkey;
  Inject(Opcode::kRcRdmaWriteFirst, kRqPsn, kMtu, false, [&](PacketFields& f) {
    f.reth.virtual_address = va;
    f.reth.rkey = rkey;
    f.reth.dma_length = 3 * kMtu;
  });
  Transmitted();
  EXPECT_EQ(region_->data()[0], 0xAB);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  Inject(Opcode::kRcRdmaWriteMiddle, kRqPsn + 1, kMtu);
  Inject(Opcode::kRcRdmaWriteLast, kRqPsn + 2, kMtu, true);
  auto sent = Transmitted();
  for (size_t i = kMtu; i < 3 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << "byte " << i << " written";
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[0].fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

// The requester's own SGEs: a 32-packet SEND whose buffer is deregistered
// after half of it left completes with IBV_WC_LOC_PROT_ERR, and no later
// packet reads the buffer.
TEST_F(HostilePeerTest, DeregisteringALocalBufferFailsTheSendInProgress) {
  engine_.reset();
  StartEngine([](EngineConfig& c) { c.per_qp_packet_budget = 8; });
  std::memset(region_->data(), 0x11, 32 * kMtu);
  PostSend(IBV_WR_SEND, region_->va(), 32 * kMtu, keys_.lkey, 9);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 8u);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  std::memset(region_->data(), 0xEE, 32 * kMtu);
  sent = Transmitted(4);
  for (const Sent& s : sent) {
    for (uint8_t b : s.payload) ASSERT_NE(b, 0xEE) << "a packet read the buffer after ibv_dereg_mr";
  }
  auto wc = Completions();
  ASSERT_FALSE(wc.empty());
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  std::memset(region_->data(), 0, 32 * kMtu);
}

// A READ of ours whose target buffer is deregistered between two response
// packets: the second is not scattered, the READ fails locally.
TEST_F(HostilePeerTest, DeregisteringAReadTargetFailsTheRead) {
  PostSend(IBV_WR_RDMA_READ, region_->va(), 2 * kMtu, keys_.lkey, 4);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  Inject(Opcode::kRcRdmaReadResponseFirst, kSqPsn, kMtu);
  Transmitted();
  EXPECT_EQ(region_->data()[0], 0xAB);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  Inject(Opcode::kRcRdmaReadResponseLast, kSqPsn + 1, kMtu);
  Transmitted();
  for (size_t i = kMtu; i < 2 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0);
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

// ---------------------------------------------------------------- 3: duplicate READs

class DuplicateReadTest : public HostilePeerTest {
 protected:
  // A 256-byte READ the responder accepted and answered.
  void AnswerOneRead() {
    for (int i = 0; i < 256; ++i) region_->data()[i] = static_cast<uint8_t>(i);
    va_ = region_->va();
    rkey_ = keys_.rkey;
    Inject(Opcode::kRcRdmaReadRequest, kRqPsn, 0, true, [&](PacketFields& f) {
      f.reth.virtual_address = va_;
      f.reth.rkey = rkey_;
      f.reth.dma_length = 256;
    });
    auto sent = Transmitted();
    ASSERT_EQ(sent.size(), 1u);
    ASSERT_EQ(sent[0].payload.size(), 256u);
  }
  void InjectDuplicate(uint32_t psn, uint32_t rkey, uint64_t va, uint32_t length) {
    Inject(Opcode::kRcRdmaReadRequest, psn, 0, true, [=](PacketFields& f) {
      f.reth.virtual_address = va;
      f.reth.rkey = rkey;
      f.reth.dma_length = length;
    });
  }
  static size_t ResponseBytes(const std::vector<Sent>& sent) {
    size_t n = 0;
    for (const Sent& s : sent) {
      if (s.opcode->operation == Operation::kRdmaReadResponse) n += s.payload.size();
    }
    return n;
  }
  uint64_t va_ = 0;
  uint32_t rkey_ = 0;
};

TEST_F(DuplicateReadTest, ARememberedDuplicateIsAnsweredAgain) {
  AnswerOneRead();
  InjectDuplicate(kRqPsn, rkey_, va_, 256);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 256u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// The requester's go-back-N retry of the rest of a READ whose first packets
// arrived: PSN first + k, address + k·MTU, length − k·MTU. It is answered.
TEST_F(DuplicateReadTest, TheRestOfARememberedReadIsAnsweredAgain) {
  va_ = region_->va();
  rkey_ = keys_.rkey;
  Inject(Opcode::kRcRdmaReadRequest, kRqPsn, 0, true, [&](PacketFields& f) {
    f.reth.virtual_address = va_;
    f.reth.rkey = rkey_;
    f.reth.dma_length = 4 * kMtu;
  });
  ASSERT_EQ(ResponseBytes(Transmitted()), 4 * kMtu);
  InjectDuplicate(kRqPsn + 2, rkey_, va_ + 2 * kMtu, 2 * kMtu);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 2 * kMtu);
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn + 2);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

TEST_F(DuplicateReadTest, RevokedRemoteReadIsNotReplayed) {
  AnswerOneRead();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_TRUE(engine_->ModifyQp(qp_, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS).ok());
  InjectDuplicate(kRqPsn, rkey_, va_, 256);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 0u) << "a READ after remote read was revoked";
}

// 49 guessed keys: no byte comes back, and the QP stops at the first one
// that claims a remembered PSN (a brute force is not free).
TEST_F(DuplicateReadTest, WrongKeysAsDuplicatesEarnNothing) {
  AnswerOneRead();
  size_t bytes = 0;
  for (uint32_t tag = 1; tag < 50; ++tag) {
    InjectDuplicate(kRqPsn - tag, (rkey_ & ~0xFFu) | ((rkey_ + tag) & 0xFF), va_, 256);  // PSNs never used
    bytes += ResponseBytes(Transmitted());
  }
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS) << "unremembered PSNs are dropped silently";
  // A key that is valid for the very same bytes (a second registration), but
  // not the one the READ used: the replay refuses it on the key alone.
  auto second = engine_->RegMr(pd_, region_->data(), region_->size, region_->va(), kAll);
  ASSERT_TRUE(second.ok());
  InjectDuplicate(kRqPsn, second->rkey, va_, 256);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 0u);
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

// A spoofed duplicate asking for 4 GiB at a remembered READ's PSN: it does not
// match what was remembered, so no stream that would hold ACKs back.
TEST_F(DuplicateReadTest, AnOversizedDuplicateIsRefused) {
  AnswerOneRead();
  InjectDuplicate(kRqPsn, rkey_, va_, 0xFFFFFFFFu);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 0u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

TEST_F(DuplicateReadTest, AnOversizedNewReadIsAnInvalidRequest) {
  InjectDuplicate(kRqPsn, keys_.rkey, region_->va(), 0x80000001u);
  auto sent = Transmitted();
  EXPECT_EQ(ResponseBytes(sent), 0u);
  ASSERT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(sent[0].fields.aeth.value(), uint8_t(NakCode::kInvalidRequest));
}

// ---------------------------------------------------------------- 6: protection domains

TEST_F(HostilePeerTest, APdInUseCannotBeFreedAndIsNotReusedAtOnce) {
  PdHandle other = *engine_->AllocPd();
  auto mr = engine_->RegMr(other, region_->data(), 64, region_->va(), kAll);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(engine_->DeallocPd(other).ToErrno(), EBUSY);
  ASSERT_TRUE(engine_->DeregMr(mr->lkey).ok());
  ASSERT_TRUE(engine_->DeallocPd(other).ok());
  PdHandle next = *engine_->AllocPd();
  EXPECT_NE(next, other) << "a freed PD handle was handed out again at once";
  EXPECT_EQ(engine_->DeallocPd(pd_).ToErrno(), EBUSY) << "QP, MR and CQ still use it";
}

// ---------------------------------------------------------------- 7: sources

// An ACK for our SEND from an unrelated IP, or with a foreign P_Key, does not
// complete it; the real peer's does.
TEST_F(HostilePeerTest, ForgedAcksFromOtherAddressesAreDropped) {
  PostSend(IBV_WR_SEND, region_->va(), 64, keys_.lkey, 3);
  Transmitted();
  const uint8_t stranger[4] = {10, 9, 9, 9};
  Inject(Opcode::kRcAcknowledge, kSqPsn, 0, false, [&](PacketFields& f) { f.src_gid = Ipv4MappedGid(stranger); });
  Inject(Opcode::kRcAcknowledge, kSqPsn, 0, false, [&](PacketFields& f) { f.dst_gid = Ipv4MappedGid(stranger); });
  Inject(Opcode::kRcAcknowledge, kSqPsn, 0, false, [](PacketFields& f) { f.bth.pkey = 0x8001; });
  Transmitted();
  EXPECT_TRUE(Completions().empty());
  EXPECT_EQ(engine_->counters().rx_path_mismatch, 2u);
  EXPECT_EQ(engine_->counters().rx_bad_pkey, 1u);
  Inject(Opcode::kRcAcknowledge, kSqPsn);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
}

TEST_F(HostilePeerTest, QpNumbersAreNotSequential) {
  std::set<uint32_t> qpns;
  uint32_t sequential = 0, previous = qp_->qpn;
  for (int i = 0; i < 32; ++i) {
    QueuePair* qp = MakeConnectedQp();
    qpns.insert(qp->qpn);
    if (qp->qpn == previous + 1) ++sequential;
    previous = qp->qpn;
    EXPECT_GE(qp->qpn, 0x11u);
    EXPECT_LE(qp->qpn, 0xFFFFFFu);
  }
  EXPECT_EQ(qpns.size(), 32u);
  EXPECT_LT(sequential, 4u);
}

// ---------------------------------------------------------------- forged responses

// Forged READ responses and atomic ACKs for PSNs we never asked for, NAKs and
// ACKs outside the window: ignored, no memory written, the QP healthy.
TEST_F(HostilePeerTest, ForgedResponsesOutsideTheWindowAreIgnored) {
  PostSend(IBV_WR_RDMA_READ, region_->va(), 256, keys_.lkey, 5);
  Transmitted();
  for (uint32_t d = 1; d < 200; d += 7) {
    Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn + d, 256);
    Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn - d, 256);
    Inject(Opcode::kRcAtomicAcknowledge, kSqPsn + d);
    Inject(Opcode::kRcAcknowledge, kSqPsn + d, 0, false, [](PacketFields& f) {
      f.aeth.syndrome = AethFields::Syndrome(AethKind::kNak, uint8_t(NakCode::kRemoteAccessError));
    });
    Inject(Opcode::kRcAcknowledge, kSqPsn - d - 1, 0, false, [](PacketFields& f) {
      f.aeth.syndrome = AethFields::Syndrome(AethKind::kNak, uint8_t(NakCode::kRemoteAccessError));
    });
  }
  Transmitted();
  for (int i = 0; i < 256; ++i) ASSERT_EQ(region_->data()[i], 0);
  EXPECT_TRUE(Completions().empty());
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  // The real response still completes the READ.
  Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn, 256);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(region_->data()[0], 0xAB);
}

// Malformed and out-of-order opcodes on a live QP: the responder NAKs and
// stops, nothing lands.
TEST_F(HostilePeerTest, OpcodeSequenceViolationsWriteNothing) {
  Inject(Opcode::kRcRdmaWriteMiddle, kRqPsn, kMtu);
  auto sent = Transmitted();
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(region_->data()[i], 0);
}

// Writes that reach out of the region by one byte, at both ends.
TEST_F(HostilePeerTest, WritesAtTheRegionsEdgesAreRefused) {
  for (int side = 0; side < 2; ++side) {
    QueuePair* qp = MakeConnectedQp();
    const uint64_t va = side == 0 ? region_->va() - 1 : region_->va() + region_->size - 63;
    const uint32_t rkey = keys_.rkey;
    Inject(qp, Opcode::kRcRdmaWriteOnly, kRqPsn, 64, true, [&](PacketFields& f) {
      f.reth.virtual_address = va;
      f.reth.rkey = rkey;
      f.reth.dma_length = 64;
    });
    auto sent = Transmitted();
    EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
  }
}

// IBTA 1.5 ATOMIC WRITE from a peer: it lands only whole, aligned, inside a
// region whose key and QP allow remote writes, and its RETH must ask for
// exactly the 8 bytes it carries. Anything else is NAKed (invalid request or
// remote access error, as Linux rxe answers), the QP stops, and not one byte
// of the region changes. One that lands is answered as rxe answers it, with
// a zero-length READ response Only; a duplicate of it is answered again, not
// stored again.
TEST_F(HostilePeerTest, AtomicWritesThatMayNotLandWriteNothing) {
  GuardedRegion read_only(4096);
  auto ro_keys = engine_->RegMr(pd_, read_only.data(), read_only.size, read_only.va(),
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_TRUE(ro_keys.ok());
  struct Case {
    const char* what;
    uint64_t va;
    uint32_t rkey;
    uint32_t dma_length;
    bool qp_may_write;
    NakCode nak;
  };
  const uint64_t va = region_->va();
  const Case cases[] = {
      {"misaligned", va + 4, keys_.rkey, 8, true, NakCode::kInvalidRequest},
      {"DMA length 16", va, keys_.rkey, 16, true, NakCode::kInvalidRequest},
      {"DMA length 0", va, keys_.rkey, 0, true, NakCode::kInvalidRequest},
      {"past the region's end", va + region_->size, keys_.rkey, 8, true, NakCode::kRemoteAccessError},
      {"straddling its start", va - 8, keys_.rkey, 8, true, NakCode::kRemoteAccessError},
      {"unknown key", va, keys_.rkey ^ 0x100, 8, true, NakCode::kRemoteAccessError},
      {"key without remote write", read_only.va(), ro_keys->rkey, 8, true, NakCode::kRemoteAccessError},
      {"QP without remote write", va, keys_.rkey, 8, false, NakCode::kRemoteAccessError},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    QueuePair* qp = MakeConnectedQp();
    if (!c.qp_may_write) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_RTS;  // RTS to RTS may change the access (IBTA 11.2.4.2)
      a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      ASSERT_TRUE(engine_->ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS).ok());
    }
    Inject(qp, Opcode::kRcAtomicWrite, kRqPsn, 8, true, [&](PacketFields& f) {
      f.reth.virtual_address = c.va;
      f.reth.rkey = c.rkey;
      f.reth.dma_length = c.dma_length;
    });
    auto sent = AcknowledgementsOf(Transmitted(), qp);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
    EXPECT_EQ(sent[0].fields.aeth.value(), static_cast<uint8_t>(c.nak));
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
    for (size_t i = 0; i < region_->size; ++i) ASSERT_EQ(region_->data()[i], 0) << "byte " << i;
    for (size_t i = 0; i < read_only.size; ++i) ASSERT_EQ(read_only.data()[i], 0) << "byte " << i;
    EXPECT_TRUE(read_only.GuardsIntact());
  }

  // Allowed: the 8 bytes land, a zero-length READ response answers. Its
  // duplicate is answered again and stores nothing (the region is cleared
  // in between to see it).
  for (int copy = 0; copy < 2; ++copy) {
    Inject(Opcode::kRcAtomicWrite, kRqPsn, 8, true, [&](PacketFields& f) {
      f.reth.virtual_address = va + 64;
      f.reth.rkey = keys_.rkey;
      f.reth.dma_length = 8;
    });
    auto sent = Transmitted(2);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcRdmaReadResponseOnly));
    EXPECT_EQ(sent[0].fields.payload_length, 0u);
    EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
    EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn);
    for (size_t i = 0; i < region_->size; ++i) {
      const uint8_t want = copy == 0 && i >= 64 && i < 72 ? 0xAB : 0;
      ASSERT_EQ(region_->data()[i], want) << "copy " << copy << " byte " << i;
    }
    std::memset(region_->data(), 0, region_->size);
  }
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// The requester's side of an ATOMIC WRITE: one packet (RETH for 8 bytes, the
// 8 bytes from the SGE), completed by the zero-length READ response rxe
// answers with, or by an ACK covering it; a READ response with data is a bad
// response.
TEST_F(HostilePeerTest, AtomicWriteCompletesOnItsAnswer) {
  for (int i = 0; i < 8; ++i) region_->data()[i] = static_cast<uint8_t>(0x10 + i);
  PostSend(IBV_WR_ATOMIC_WRITE, region_->va(), 8, keys_.lkey, 1);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcAtomicWrite));
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn);
  EXPECT_TRUE(sent[0].fields.bth.ack_request);
  EXPECT_EQ(sent[0].fields.reth.virtual_address, 0x10000u);
  EXPECT_EQ(sent[0].fields.reth.rkey, 0x77u);
  EXPECT_EQ(sent[0].fields.reth.dma_length, 8u);
  EXPECT_EQ(sent[0].payload, std::vector<uint8_t>(region_->data(), region_->data() + 8));
  Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn, 0);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);

  PostSend(IBV_WR_ATOMIC_WRITE, region_->va(), 8, keys_.lkey, 2);
  ASSERT_EQ(Transmitted().size(), 1u);
  Inject(Opcode::kRcAcknowledge, kSqPsn + 1);
  Transmitted();
  wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);

  PostSend(IBV_WR_ATOMIC_WRITE, region_->va(), 8, keys_.lkey, 3);
  ASSERT_EQ(Transmitted().size(), 1u);
  Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn + 2, 8);
  Transmitted();
  wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
  EXPECT_EQ(wc[0].status, IBV_WC_BAD_RESP_ERR);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(region_->data()[i], 0x10 + i) << "nothing placed";
}

// ---------------------------------------------------------------- 4: implicit on-demand regions

// An implicit ODP region (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | ...))
// gives a peer with its rkey the whole address space. Whatever address it
// names, nothing may fault: memory that is not mapped (a page munmapped, a
// PROT_NONE page, address 0, the kernel's half, a non-canonical address,
// the last bytes of the address space), or not writable for a WRITE or an
// atomic (a PROT_READ page), earns the NAK an ODP NIC gives for a page it
// cannot resolve, and nothing is written. Local accesses through the
// implicit lkey fail with a local protection error.
//
// The memory: four pages, [0] read-write, [1] unmapped, [2] PROT_NONE,
// [3] PROT_READ.
class ImplicitOdpHostileTest : public HostilePeerTest {
 protected:
  static constexpr uint8_t kReadOnlyByte = 0x77;

  void SetUp() override {
    HostilePeerTest::SetUp();
    if (HasFatalFailure()) return;
    auto keys = engine_->RegMr(pd_, nullptr, UINT64_MAX, 0, kAll | IBV_ACCESS_ON_DEMAND);
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    implicit_ = *keys;
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 4 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    base_ = static_cast<uint8_t*>(m);
    std::memset(base_, 0, page_);
    std::memset(base_ + 3 * page_, kReadOnlyByte, page_);
    ASSERT_EQ(munmap(base_ + page_, page_), 0);
    ASSERT_EQ(mprotect(base_ + 2 * page_, page_, PROT_NONE), 0);
    ASSERT_EQ(mprotect(base_ + 3 * page_, page_, PROT_READ), 0);
  }
  void TearDown() override {
    if (base_ != nullptr) {
      EXPECT_TRUE(HoleStillUnmapped()) << "the test's unmapped page was mapped by someone: it proved nothing";
      for (size_t i = 0; i < page_; ++i) ASSERT_EQ(base_[3 * page_ + i], kReadOnlyByte) << "the read-only page changed";
    }
    HostilePeerTest::TearDown();
    if (base_ != nullptr) {
      // Only the pages that are still ours: never the hole (it is unmapped,
      // or someone else's now), nor the first page if someone else's mapping
      // took its place (ConcurrentMunmapNeverFaults).
      munmap(base_ + 2 * page_, 2 * page_);
      if (!read_write_page_lost_) munmap(base_, page_);
    }
  }

  uint64_t ReadWrite() const { return reinterpret_cast<uint64_t>(base_); }
  uint64_t Hole() const { return reinterpret_cast<uint64_t>(base_ + page_); }
  uint64_t NoAccess() const { return reinterpret_cast<uint64_t>(base_ + 2 * page_); }
  uint64_t ReadOnly() const { return reinterpret_cast<uint64_t>(base_ + 3 * page_); }
  bool HoleStillUnmapped() const {
    unsigned char resident = 0;
    return mincore(base_ + page_, page_, &resident) == -1 && errno == ENOMEM;
  }
  // Addresses no access may reach (each 64-byte aligned, 64 bytes fit
  // before the end of the address space).
  std::vector<uint64_t> Unreadable() const {
    return {Hole(), NoAccess(), 0, 0xFFFFFFFFFFFFF000ull, 0x0000800000000000ull, 0xFFFFFFFFFFFFFFC0ull};
  }
  // The same and the read-only page (written out: gcc 12's -Warray-bounds
  // under --config=ubsan misreads a push_back onto the list above).
  std::vector<uint64_t> Unwritable() const {
    return {Hole(), NoAccess(), 0, 0xFFFFFFFFFFFFF000ull, 0x0000800000000000ull, 0xFFFFFFFFFFFFFFC0ull, ReadOnly()};
  }

  // One request of the peer through the implicit rkey, on a fresh QP; what
  // the engine answered.
  std::vector<Sent> Request(QueuePair* qp, Opcode opcode, uint64_t va, uint32_t length) {
    const uint32_t rkey = implicit_.rkey;
    const bool atomic = opcode == Opcode::kRcCompareSwap || opcode == Opcode::kRcFetchAdd;
    const bool write = opcode == Opcode::kRcRdmaWriteOnly || opcode == Opcode::kRcAtomicWrite;
    Inject(qp, opcode, kRqPsn, write ? length : 0, true, [&](PacketFields& f) {
      if (atomic) {
        f.atomic_eth.virtual_address = va;
        f.atomic_eth.rkey = rkey;
        f.atomic_eth.compare_data = 0;
        f.atomic_eth.swap_or_add_data = 5;
      } else {
        f.reth.virtual_address = va;
        f.reth.rkey = rkey;
        f.reth.dma_length = length;
      }
    });
    return Transmitted(2);
  }
  static void ExpectRemoteAccessNak(const std::vector<Sent>& sent, const QueuePair* qp, uint64_t va) {
    ASSERT_EQ(CountNaks(sent, AethKind::kNak), 1u) << std::hex << "va 0x" << va;
    for (const Sent& s : sent) {
      EXPECT_NE(s.opcode->operation, Operation::kRdmaReadResponse) << std::hex << "va 0x" << va;
      EXPECT_NE(s.opcode->operation, Operation::kAtomicAcknowledge) << std::hex << "va 0x" << va;
      if (s.fields.aeth.kind() == AethKind::kNak) {
        EXPECT_EQ(s.fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError)) << std::hex << "va 0x" << va;
      }
    }
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
  }

  MrKeys implicit_;
  size_t page_ = 4096;
  uint8_t* base_ = nullptr;
  std::atomic<bool> read_write_page_lost_{false};  // written by ConcurrentMunmapNeverFaults's thread
};

TEST_F(ImplicitOdpHostileTest, MappedMemoryIsReachedThroughTheImplicitKeys) {
  // WRITE, READ, fetch-and-add and compare-and-swap on the read-write page.
  auto sent = Request(qp_, Opcode::kRcRdmaWriteOnly, ReadWrite() + 64, 64);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(base_[64 + i], 0xAB);
  EXPECT_EQ(base_[63], 0);
  EXPECT_EQ(base_[128], 0);

  QueuePair* reader = MakeConnectedQp();
  sent = Request(reader, Opcode::kRcRdmaReadRequest, ReadWrite() + 64, 64);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode->operation, Operation::kRdmaReadResponse);
  EXPECT_EQ(sent[0].payload, std::vector<uint8_t>(64, 0xAB));
  sent = Request(MakeConnectedQp(), Opcode::kRcRdmaReadRequest, ReadOnly(), 64);
  ASSERT_EQ(sent.size(), 1u) << "a read-only page is readable";
  EXPECT_EQ(sent[0].payload, std::vector<uint8_t>(64, kReadOnlyByte));

  uint64_t* word = reinterpret_cast<uint64_t*>(base_ + 256);
  *word = 40;
  sent = Request(MakeConnectedQp(), Opcode::kRcFetchAdd, ReadWrite() + 256, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode->operation, Operation::kAtomicAcknowledge);
  EXPECT_EQ(sent[0].fields.atomic_ack_eth.original_remote_data, 40u);
  EXPECT_EQ(*word, 45u);
  *word = 0;
  sent = Request(MakeConnectedQp(), Opcode::kRcCompareSwap, ReadWrite() + 256, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.atomic_ack_eth.original_remote_data, 0u);
  EXPECT_EQ(*word, 5u);
  // IBTA 1.5 ATOMIC WRITE: stored whole, answered with a READ response.
  sent = Request(MakeConnectedQp(), Opcode::kRcAtomicWrite, ReadWrite() + 256, 8);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode->operation, Operation::kRdmaReadResponse);
  EXPECT_EQ(*word, 0xABABABABABABABABull);

  // A SEND into a receive buffer named by the implicit lkey.
  QueuePair* receiver = MakeConnectedQp();
  ibv_sge sge{ReadWrite() + 1024, 128, implicit_.lkey};
  ibv_recv_wr wr = RecvWr(77, &sge);
  const ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(engine_->PostRecv(receiver, &wr, &bad), 0);
  Inject(receiver, Opcode::kRcSendOnly, kRqPsn, 100, true);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].byte_len, 100u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(base_[1024 + i], 0xAB);
  EXPECT_EQ(base_[1124], 0);
}

TEST_F(ImplicitOdpHostileTest, WritesToUnmappedOrReadOnlyMemoryAreNaked) {
  for (uint64_t va : Unwritable()) {
    QueuePair* qp = MakeConnectedQp();
    ExpectRemoteAccessNak(Request(qp, Opcode::kRcRdmaWriteOnly, va, 64), qp, va);
  }
  // Across the end of the read-write page into the hole: NAKed (the bytes
  // before the hole may have been written, as by a NIC that NAKs a page
  // mid-message), nothing past the range.
  QueuePair* qp = MakeConnectedQp();
  ExpectRemoteAccessNak(Request(qp, Opcode::kRcRdmaWriteOnly, Hole() - 32, 64), qp, Hole() - 32);
  for (size_t i = 0; i < page_ - 32; ++i) ASSERT_EQ(base_[i], 0);
}

TEST_F(ImplicitOdpHostileTest, ReadsOfUnmappedMemoryAreNaked) {
  for (uint64_t va : Unreadable()) {
    QueuePair* qp = MakeConnectedQp();
    ExpectRemoteAccessNak(Request(qp, Opcode::kRcRdmaReadRequest, va, 64), qp, va);
  }
  // A two-packet READ whose second packet's memory is not mapped: the first
  // response leaves, then the NAK, nothing of the hole.
  QueuePair* qp = MakeConnectedQp();
  auto sent = Request(qp, Opcode::kRcRdmaReadRequest, Hole() - kMtu, 2 * kMtu);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].opcode->operation, Operation::kRdmaReadResponse);
  EXPECT_EQ(sent[1].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[1].fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
  EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
}

TEST_F(ImplicitOdpHostileTest, AtomicsOnUnmappedOrReadOnlyMemoryAreNaked) {
  for (Opcode op : {Opcode::kRcFetchAdd, Opcode::kRcCompareSwap, Opcode::kRcAtomicWrite}) {
    for (uint64_t va : Unwritable()) {
      QueuePair* qp = MakeConnectedQp();
      ExpectRemoteAccessNak(Request(qp, op, va, 8), qp, va);
    }
    // The last word of the address space.
    QueuePair* qp = MakeConnectedQp();
    ExpectRemoteAccessNak(Request(qp, op, 0xFFFFFFFFFFFFFFF8ull, 8), qp, 0xFFFFFFFFFFFFFFF8ull);
  }
}

TEST_F(ImplicitOdpHostileTest, SendsIntoUnmappedOrReadOnlyReceiveBuffersFailLocally) {
  for (uint64_t va : Unwritable()) {
    QueuePair* qp = MakeConnectedQp();
    ibv_sge sge{va, 64, implicit_.lkey};
    ibv_recv_wr wr = RecvWr(va, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostRecv(qp, &wr, &bad), 0);
    Inject(qp, Opcode::kRcSendOnly, kRqPsn, 64, true);
    auto sent = Transmitted();
    ASSERT_EQ(CountNaks(sent, AethKind::kNak), 1u) << std::hex << va;
    EXPECT_EQ(sent.back().fields.aeth.value(), uint8_t(NakCode::kRemoteOperationalError));
    auto wc = Completions();
    ASSERT_EQ(wc.size(), 1u) << std::hex << va;
    EXPECT_EQ(wc[0].wr_id, va);
    EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
  }
}

TEST_F(ImplicitOdpHostileTest, OwnRequestsOnUnmappedMemoryFailLocally) {
  // A SEND gathering from the hole: no packet leaves, a local protection
  // error.
  PostSend(IBV_WR_SEND, Hole(), 64, implicit_.lkey, 5);
  auto sent = Transmitted(2);
  for (const Sent& s : sent) EXPECT_TRUE(s.payload.empty());
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);

  // A READ into the read-only page: its response is not placed.
  qp_ = MakeConnectedQp();
  PostSend(IBV_WR_RDMA_READ, ReadOnly(), 64, implicit_.lkey, 6);
  ASSERT_EQ(Transmitted().size(), 1u);
  Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn, 64);
  Transmitted();
  wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 6u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);

  // A fetch-and-add whose result goes to the hole.
  qp_ = MakeConnectedQp();
  PostSend(IBV_WR_ATOMIC_FETCH_AND_ADD, Hole(), 8, implicit_.lkey, 7);
  ASSERT_EQ(Transmitted().size(), 1u);
  Inject(Opcode::kRcAtomicAcknowledge, kSqPsn, 0);
  Transmitted();
  wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
}

// The application unmaps and maps again a page while a peer WRITEs and
// READs it through the implicit rkey: each request is answered (ACK, READ
// response or NAK), and the process lives. (Atomics are left out: between
// the kernel's probe of the word and the atomic instruction, a concurrent
// munmap of that page can still fault; transport/on_demand_memory.h.)
TEST_F(ImplicitOdpHostileTest, ConcurrentMunmapNeverFaults) {
  uint8_t* const target = base_;  // the read-write page
  std::atomic<bool> stop{false};
  std::atomic<int> cycles{0};
  std::thread unmapper([&] {
    while (!stop.load()) {
      if (munmap(target, page_) != 0) {
        read_write_page_lost_ = true;
        break;
      }
      void* again = mmap(target, page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again != target) {
        // Someone else took the address (or an old kernel ignored the
        // flag): stop; the requests still race with the unmapped page.
        if (again != MAP_FAILED) munmap(again, page_);
        read_write_page_lost_ = true;
        break;
      }
      cycles.fetch_add(1);
    }
  });
  int answered = 0, naks = 0;
  QueuePair* qp = MakeConnectedQp();
  uint32_t psn = kRqPsn;
  // Until both outcomes were seen often (the two threads really raced), or
  // the unmapper gave up, within a bound.
  const int kMaxRequests = 20000;
  int requests = 0;
  for (int i = 0; i < kMaxRequests && !(naks >= 20 && answered - naks >= 20) && !read_write_page_lost_; ++i) {
    ++requests;
    const bool write = (i & 1) == 0;
    const uint64_t va = reinterpret_cast<uint64_t>(target) + 512;
    const uint32_t rkey = implicit_.rkey;
    Inject(qp, write ? Opcode::kRcRdmaWriteOnly : Opcode::kRcRdmaReadRequest, psn, write ? 256 : 0, true,
           [&](PacketFields& f) {
             f.reth.virtual_address = va;
             f.reth.rkey = rkey;
             f.reth.dma_length = 256;
           });
    auto sent = Transmitted();
    ASSERT_EQ(sent.size(), 1u);
    ++answered;
    if (sent[0].fields.aeth.kind() == AethKind::kNak && sent[0].opcode->operation == Operation::kAcknowledge) {
      EXPECT_EQ(sent[0].fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
      ++naks;
      ASSERT_TRUE(engine_->DestroyQp(qp).ok());
      qp = MakeConnectedQp();
      psn = kRqPsn;
    } else {
      psn += 1;
    }
  }
  stop.store(true);
  unmapper.join();
  EXPECT_EQ(answered, requests);
  std::printf("concurrent munmap: %d map/unmap cycles, %d of %d requests NAKed\n", cycles.load(), naks, requests);
}

// XRC (IBTA annex A14): a peer's XRCETH is a number to look up, never a
// pointer. A target QP takes receives only from the XRC SRQs of its own
// domain, keeps one SRQ for a whole message, and checks RDMA in the PD of
// the SRQ named; XRC and RC packets never cross over to the other service,
// and an XRC initiator takes no requests at all.
class XrcHostileTest : public HostilePeerTest {
 protected:
  QueuePair* MakeXrcQp(ibv_qp_type type, uint32_t xrcd) {
    QpInitAttr init;
    init.type = type;
    if (type == IBV_QPT_XRC_RECV) {
      init.xrcd = xrcd;
    } else {
      init.pd = pd_;
      init.send_cq = init.recv_cq = cq_;
    }
    init.cap.max_send_wr = 8;
    auto made = engine_->CreateQp(init);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    QueuePair* qp = *made;
    return Connect(qp);
  }
  SharedReceiveQueue* XrcSrq(uint32_t xrcd, uint64_t wr_id, uint32_t offset) {
    auto srq = engine_->CreateXrcSrq(pd_, xrcd, cq_, 4, 1, 0);
    EXPECT_TRUE(srq.ok());
    ibv_sge sge{region_->va() + offset, 4096, keys_.lkey};
    ibv_recv_wr wr = RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(engine_->PostSrqRecv(*srq, &wr, &bad), 0);
    return *srq;
  }
  static std::function<void(PacketFields&)> Naming(uint32_t srqn) {
    return [srqn](PacketFields& f) { f.xrc_srqn = srqn; };
  }
};

TEST_F(XrcHostileTest, AnSrqOfAnotherDomainOrUnknownIsNeverReached) {
  const uint32_t domain = *engine_->CreateXrcd();
  const uint32_t other = *engine_->CreateXrcd();
  SharedReceiveQueue* foreign = XrcSrq(other, 7, 0);
  QueuePair* target = MakeXrcQp(IBV_QPT_XRC_RECV, domain);
  // Ahead of the PSN it waits for: dropped without an answer.
  Inject(target, Opcode::kXrcSendOnly, kRqPsn + 5, 64, true, Naming(foreign->srqn));
  EXPECT_TRUE(Transmitted().empty());
  EXPECT_EQ(target->state.load(), IBV_QPS_RTS);
  // At its PSN: NAK (invalid request), the QP stops.
  Inject(target, Opcode::kXrcSendOnly, kRqPsn, 64, true, Naming(foreign->srqn));
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.bth.opcode, static_cast<uint8_t>(Opcode::kXrcAcknowledge)) << "an XRC NAK";
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(target->state.load(), IBV_QPS_ERR);
  EXPECT_EQ(foreign->posted.load(), 1u) << "the other domain's receive stays";
  EXPECT_EQ(engine_->counters().rx_bad_xrc_srq, 2u);
  // Numbers nobody has, on a fresh target: the same.
  QueuePair* fresh = MakeXrcQp(IBV_QPT_XRC_RECV, domain);
  for (uint32_t srqn : {0u, 1u, 0xFFFFFFu, foreign->srqn ^ 0x800000u}) {
    Inject(fresh, Opcode::kXrcSendOnly, kRqPsn + 1, 64, true, Naming(srqn));
  }
  EXPECT_TRUE(Transmitted().empty());
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(region_->data()[i], 0);
  EXPECT_TRUE(Completions().empty());
}

TEST_F(XrcHostileTest, AMessageKeepsItsSrqAndRdmaIsCheckedInTheSrqsPd) {
  const uint32_t domain = *engine_->CreateXrcd();
  SharedReceiveQueue* first = XrcSrq(domain, 1, 0);
  SharedReceiveQueue* second = XrcSrq(domain, 2, 8192);
  QueuePair* target = MakeXrcQp(IBV_QPT_XRC_RECV, domain);
  // A SEND that starts on one SRQ and goes on naming another.
  Inject(target, Opcode::kXrcSendFirst, kRqPsn, kMtu, false, Naming(first->srqn));
  Inject(target, Opcode::kXrcSendLast, kRqPsn + 1, 64, true, Naming(second->srqn));
  auto sent = Transmitted();
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(target->state.load(), IBV_QPS_ERR);
  EXPECT_EQ(second->posted.load(), 1u) << "the second SRQ's receive was not taken";
  for (int i = 8192; i < 8192 + 4096; ++i) ASSERT_EQ(region_->data()[i], 0);
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u) << "the first SRQ's receive fails";
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_NE(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].qp_num, target->qpn);

  // A WRITE with a key of another PD than the SRQ's: remote access error.
  const PdHandle other_pd = *engine_->AllocPd();
  std::vector<uint8_t> elsewhere(4096, 0);
  const MrKeys other_keys = *engine_->RegMr(other_pd, elsewhere.data(), elsewhere.size(),
                                             reinterpret_cast<uint64_t>(elsewhere.data()), kAll);
  QueuePair* writer = MakeXrcQp(IBV_QPT_XRC_RECV, domain);
  Inject(writer, Opcode::kXrcRdmaWriteOnly, kRqPsn, 64, true, [&](PacketFields& f) {
    f.xrc_srqn = first->srqn;
    f.reth.virtual_address = reinterpret_cast<uint64_t>(elsewhere.data());
    f.reth.rkey = other_keys.rkey;
    f.reth.dma_length = 64;
  });
  sent = Transmitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kNak);
  EXPECT_EQ(sent[0].fields.aeth.value(), static_cast<uint8_t>(NakCode::kRemoteAccessError));
  EXPECT_EQ(elsewhere, std::vector<uint8_t>(4096, 0));
  ASSERT_TRUE(engine_->DeregMr(other_keys.lkey).ok());
}

TEST_F(XrcHostileTest, ServicesDoNotCrossAndInitiatorsTakeNoRequests) {
  const uint32_t domain = *engine_->CreateXrcd();
  SharedReceiveQueue* srq = XrcSrq(domain, 1, 0);
  QueuePair* target = MakeXrcQp(IBV_QPT_XRC_RECV, domain);
  QueuePair* initiator = MakeXrcQp(IBV_QPT_XRC_SEND, 0);
  const uint64_t dropped = engine_->counters().rx_dropped;
  Inject(target, Opcode::kRcSendOnly, kRqPsn, 64, true);              // RC to an XRC target
  Inject(target, Opcode::kXrcAcknowledge, kRqPsn, 0, false);          // a response to a target
  Inject(qp_, Opcode::kXrcSendOnly, kRqPsn, 64, true, Naming(srq->srqn));  // XRC to an RC QP
  Inject(initiator, Opcode::kXrcSendOnly, kRqPsn, 64, true, Naming(srq->srqn));  // a request to an initiator
  EXPECT_TRUE(Transmitted().empty());
  EXPECT_EQ(engine_->counters().rx_dropped, dropped + 4);
  EXPECT_EQ(srq->posted.load(), 1u);
  EXPECT_EQ(target->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(initiator->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(region_->data()[i], 0);
}

// ------------------------------------------- selective retransmission (docs/transport.md)

class SelectivePeerTest : public HostilePeerTest {
 protected:
  static void Selective(PacketFields& f) { f.bth.reserved7 = kBthSelectiveRetransmission; }
  // A PSN sequence NAK for `psn` from a peer that says it holds what follows.
  void InjectSelectiveNak(uint32_t psn) {
    Inject(Opcode::kRcAcknowledge, psn, 0, false, [](PacketFields& f) {
      f.aeth.syndrome = AethFields::Syndrome(AethKind::kNak, uint8_t(NakCode::kPsnSequenceError));
      Selective(f);
    });
  }
  // A selective requester's READ request (new or a copy) for our region.
  void InjectSelectiveRead(uint32_t psn, uint64_t address, uint32_t length) {
    const uint32_t rkey = keys_.rkey;
    Inject(Opcode::kRcRdmaReadRequest, psn, 0, true, [&](PacketFields& f) {
      Selective(f);
      f.reth.virtual_address = address;
      f.reth.rkey = rkey;
      f.reth.dma_length = length;
    });
  }
  void InjectSelectiveAck(uint32_t psn) {
    Inject(Opcode::kRcAcknowledge, psn, 0, false, [](PacketFields& f) { Selective(f); });
  }
  static size_t CountPsn(const std::vector<Sent>& sent, uint32_t psn) {
    size_t n = 0;
    for (const Sent& s : sent) n += s.fields.bth.psn.value() == psn;
    return n;
  }
  // Our WRITE of 8 packets, all sent (kSqPsn .. kSqPsn + 7).
  void PostEightPacketWrite() {
    PostSend(IBV_WR_RDMA_WRITE, region_->va(), 8 * kMtu, keys_.lkey);
    ASSERT_EQ(Transmitted().size(), 8u);
  }
  // The peer acknowledges all of it: the WRITE completes, successfully.
  void ExpectTheWriteCompletesOnItsAck() {
    InjectSelectiveAck(kSqPsn + 7);
    Transmitted();
    auto wc = Completions();
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  }
  // The peer's WRITE of `packets` packets from kRqPsn is all in our region,
  // and the last of what we sent is one ACK for its last PSN.
  void ExpectTheMessageLandedWithOneAck(const std::vector<Sent>& sent, uint32_t packets) {
    EXPECT_EQ(qp_->resp.expected_psn.value(), kRqPsn + packets);
    for (uint32_t i = 0; i < packets * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0xAB) << i;
    ASSERT_FALSE(sent.empty());
    EXPECT_EQ(sent.back().fields.aeth.kind(), AethKind::kAck);
    EXPECT_EQ(sent.back().fields.bth.psn.value(), kRqPsn + packets - 1);
  }
  // A WRITE packet of the peer's (a selective requester), `index` of a
  // message starting at kRqPsn into our region.
  void InjectWritePacket(QueuePair* qp, uint32_t index, uint32_t packets, uint32_t rkey) {
    const Opcode op = index == 0 ? Opcode::kRcRdmaWriteFirst
                      : index + 1 == packets ? Opcode::kRcRdmaWriteLast
                                             : Opcode::kRcRdmaWriteMiddle;
    const uint64_t va = region_->va();
    Inject(qp, op, kRqPsn + index, kMtu, index + 1 == packets, [&](PacketFields& f) {
      Selective(f);
      if (index == 0) {
        f.reth.virtual_address = va;
        f.reth.rkey = rkey;
        f.reth.dma_length = packets * kMtu;
      }
    });
  }
};

// Requests offer selective retransmission; a standard peer's acknowledgement
// (no bit) keeps the requester on go-back-N.
TEST_F(SelectivePeerTest, RequestsOfferItAndAStandardPeerKeepsGoBackN) {
  PostSend(IBV_WR_RDMA_WRITE, region_->va(), 8 * kMtu, keys_.lkey);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 8u);
  for (const Sent& s : sent) EXPECT_EQ(s.fields.bth.reserved7, kBthSelectiveRetransmission);
  // A standard NAK for the fourth packet: everything from it again.
  Inject(Opcode::kRcAcknowledge, kSqPsn + 3, 0, false, [](PacketFields& f) {
    f.aeth.syndrome = AethFields::Syndrome(AethKind::kNak, uint8_t(NakCode::kPsnSequenceError));
  });
  sent = Transmitted(2);
  EXPECT_FALSE(qp_->req.selective);
  EXPECT_EQ(sent.size(), 5u);
  for (uint32_t d = 3; d < 8; ++d) EXPECT_EQ(CountPsn(sent, kSqPsn + d), 1u) << d;
}

// A peer that reports false gaps, over and over, in one poll: each NAKed PSN
// is sent again once per round trip, nothing else is; NAKs for what was
// never sent are ignored; the real ACK completes the request.
TEST_F(SelectivePeerTest, FalseGapsCostOneResendEachAndNoMore) {
  PostEightPacketWrite();
  for (int i = 0; i < 50; ++i) InjectSelectiveNak(kSqPsn + 3);
  for (uint32_t d = 8; d < 300; d += 13) InjectSelectiveNak(kSqPsn + d);  // never sent
  auto sent = Transmitted(3);
  EXPECT_TRUE(qp_->req.selective);
  EXPECT_EQ(sent.size(), 1u) << "the one NAKed packet, once";
  EXPECT_EQ(CountPsn(sent, kSqPsn + 3), 1u);
  if (!sent.empty()) {
    EXPECT_TRUE(sent[0].fields.bth.ack_request) << "a resend asks for an ACK";
  }
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  EXPECT_TRUE(Completions().empty());
  ExpectTheWriteCompletesOnItsAck();
}

// A peer that claims to hold packets after a gap and does not: each NAK asks
// for one packet, the next NAK for the next. Slow (a round trip a packet),
// never stalled: the request completes, and nothing but what was asked for
// is sent.
TEST_F(SelectivePeerTest, APeerThatClaimsItAndDropsAnywayIsServedPacketByPacket) {
  PostEightPacketWrite();
  for (uint32_t d = 2; d < 8; ++d) {
    InjectSelectiveNak(kSqPsn + d);
    auto sent = Transmitted(2);
    ASSERT_EQ(sent.size(), 1u) << d;
    EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn + d);
  }
  ExpectTheWriteCompletesOnItsAck();
}

// The responder's half: a selective requester's WRITE whose first packet is
// late. What follows is held (not written yet, not NAKed twice), copies of
// held packets and packets beyond the window are dropped; when the first
// packet comes, the message lands whole and one ACK covers it.
TEST_F(SelectivePeerTest, PacketsAfterAGapAreHeldAndLandInOrder) {
  constexpr uint32_t kPackets = 8;
  for (uint32_t i = 1; i < kPackets; ++i) InjectWritePacket(qp_, i, kPackets, keys_.rkey);
  InjectWritePacket(qp_, 5, kPackets, keys_.rkey);  // a copy of one held
  Inject(Opcode::kRcRdmaWriteMiddle, kRqPsn + ReorderWindow::kSlots + 3, kMtu, false, Selective);  // too far
  auto sent = Transmitted();
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u) << "one NAK for the gap";
  EXPECT_EQ(qp_->counters.held_packets, kPackets - 1);
  EXPECT_EQ(qp_->resp.expected_psn.value(), kRqPsn);
  for (uint32_t i = 0; i < kPackets * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << "nothing placed yet";
  InjectWritePacket(qp_, 0, kPackets, keys_.rkey);
  sent = Transmitted();
  ExpectTheMessageLandedWithOneAck(sent, kPackets);
  EXPECT_EQ(sent.back().fields.bth.reserved7, kBthSelectiveRetransmission) << "says it holds";
  EXPECT_EQ(qp_->resp.reorder, nullptr) << "the window went back to the pool";
}

// A WRITE packet after a gap inside the message in progress is placed on
// arrival (its place is known from the message's RETH) and only its view is
// held; when the gap fills, the message lands and one ACK covers it.
TEST_F(SelectivePeerTest, WritePacketsAfterAGapInsideTheMessageArePlacedOnArrival) {
  constexpr uint32_t kPackets = 8;
  InjectWritePacket(qp_, 0, kPackets, keys_.rkey);
  for (uint32_t i = 2; i < kPackets; ++i) InjectWritePacket(qp_, i, kPackets, keys_.rkey);
  auto sent = Transmitted();
  EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(qp_->counters.held_packets, kPackets - 2);
  EXPECT_EQ(qp_->counters.placed_ahead, kPackets - 2);
  EXPECT_EQ(engine_->counters().placed_ahead, kPackets - 2);
  for (uint32_t i = 0; i < kPackets * kMtu; ++i) {
    ASSERT_EQ(region_->data()[i], i / kMtu == 1 ? 0 : 0xAB) << "placed on arrival, all but the gap: " << i;
  }
  InjectWritePacket(qp_, 1, kPackets, keys_.rkey);
  sent = Transmitted();
  ExpectTheMessageLandedWithOneAck(sent, kPackets);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(qp_->resp.reorder, nullptr);
}

// A packet after the gap that is not what its place says (a short middle,
// a last one too early) is held whole and places nothing; in order it fails
// the QP as it would without a gap.
TEST_F(SelectivePeerTest, AWritePacketAfterAGapThatIsNotWhatItsPlaceSaysIsNotPlaced) {
  InjectWritePacket(qp_, 0, 8, keys_.rkey);
  // Packet 3 of 8, a middle one MTU long by the rules, comes 100 bytes long;
  // packet 4 claims to end the message.
  Inject(Opcode::kRcRdmaWriteMiddle, kRqPsn + 3, 100, false, Selective);
  Inject(Opcode::kRcRdmaWriteLast, kRqPsn + 4, kMtu, false, Selective);
  Transmitted();
  EXPECT_EQ(qp_->counters.held_packets, 2u);
  EXPECT_EQ(qp_->counters.placed_ahead, 0u);
  for (uint32_t i = kMtu; i < 8 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << i;
  // In order, the short middle fails the QP, as it would without a gap.
  InjectWritePacket(qp_, 1, 8, keys_.rkey);
  InjectWritePacket(qp_, 2, 8, keys_.rkey);
  auto sent = Transmitted();
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back().fields.aeth.value(), uint8_t(NakCode::kInvalidRequest));
  for (uint32_t i = 3 * kMtu; i < 8 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << i;
}

// The region is deregistered between a packet's placement on arrival and
// the gap filling: from then on nothing more is written, the packet that
// fills the gap earns a remote access NAK, and the QP stops.
TEST_F(SelectivePeerTest, DeregisteringBetweenPlacementAndTheGapFillingStopsTheQp) {
  InjectWritePacket(qp_, 0, 8, keys_.rkey);
  InjectWritePacket(qp_, 2, 8, keys_.rkey);
  Transmitted();
  EXPECT_EQ(qp_->counters.placed_ahead, 1u);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  std::memset(region_->data(), 0, 8 * kMtu);
  InjectWritePacket(qp_, 3, 8, keys_.rkey);  // after the deregistration: not placed
  InjectWritePacket(qp_, 1, 8, keys_.rkey);
  auto sent = Transmitted();
  EXPECT_EQ(qp_->counters.placed_ahead, 1u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back().fields.aeth.value(), uint8_t(NakCode::kRemoteAccessError));
  for (uint32_t i = 0; i < 8 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << "written after ibv_dereg_mr: " << i;
}

// A flood of packets after gaps on many QPs holds no more than the pool's
// bound, and the window of a QP that fails goes back with its packets freed
// (TearDown checks every mbuf came back).
TEST_F(SelectivePeerTest, HoldingIsBoundedAndFreedWhenTheQpFails) {
  engine_.reset();
  port_.FreeAll();
  StartEngine([](EngineConfig& c) {
    c.reorder_windows = 2;
    c.reorder_max_held = 20;
  });
  std::vector<QueuePair*> qps = {qp_, MakeConnectedQp(), MakeConnectedQp()};
  for (QueuePair* qp : qps) {
    for (uint32_t i = 1; i < 16; ++i) InjectWritePacket(qp, i, 16, keys_.rkey);
  }
  Transmitted();
  EXPECT_EQ(engine_->counters().held_packets, 20u);
  EXPECT_GT(engine_->counters().reorder_full, 0u);
  EXPECT_EQ(qps[2]->resp.reorder, nullptr) << "two windows only";
  // The first QP's gap fills with a packet naming a key it may not use: the
  // QP fails, and what it held is freed.
  InjectWritePacket(qp_, 0, 16, keys_.rkey ^ 0x100);
  auto sent = Transmitted();
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  EXPECT_EQ(qp_->resp.reorder, nullptr);
  // The others go on: the second QP's message lands once its gap fills.
  InjectWritePacket(qps[1], 0, 16, keys_.rkey);
  Transmitted();
  EXPECT_EQ(qps[1]->state.load(), IBV_QPS_RTS);
  EXPECT_GE(qps[1]->resp.expected_psn.DistanceFrom(Psn(kRqPsn)), 1);
}

// Selective READ, the requester's half: a response packet lost in the middle
// is asked for alone (its PSN, its address, one MTU), what came after it is
// placed as it arrives, and the one-packet answer (an Only) completes it.
TEST_F(SelectivePeerTest, AReadResponseLostInTheMiddleIsAskedForAlone) {
  PostSend(IBV_WR_RDMA_READ, region_->va(), 8 * kMtu, keys_.lkey, 7);
  ASSERT_EQ(Transmitted().size(), 1u);
  for (uint32_t i = 0; i < 8; ++i) {
    if (i == 3) continue;
    const Opcode op = i == 0 ? Opcode::kRcRdmaReadResponseFirst
                      : i == 7 ? Opcode::kRcRdmaReadResponseLast
                               : Opcode::kRcRdmaReadResponseMiddle;
    Inject(op, kSqPsn + i, kMtu, false, Selective);
  }
  auto sent = Transmitted(2);
  ASSERT_EQ(sent.size(), 1u) << "one request, for the missing packet";
  EXPECT_EQ(sent[0].opcode->operation, Operation::kRdmaReadRequest);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn + 3);
  EXPECT_EQ(sent[0].fields.reth.virtual_address, 0x10000u + 3 * kMtu);
  EXPECT_EQ(sent[0].fields.reth.dma_length, kMtu);
  for (uint32_t i = 0; i < 8 * kMtu; ++i) {
    ASSERT_EQ(region_->data()[i], (i / kMtu == 3) ? 0 : 0xAB) << "placed as it arrived, " << i;
  }
  EXPECT_TRUE(Completions().empty());
  Inject(Opcode::kRcRdmaReadResponseOnly, kSqPsn + 3, kMtu, false, Selective);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  for (uint32_t i = 0; i < 8 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0xAB) << i;
  EXPECT_EQ(region_->data()[8 * kMtu], 0) << "nothing past the READ";
}

// A selective requester asks on its RTO for the rest of a READ whose
// answer is still streaming (its peer was slow to poll): the new answer
// replaces what the old one had left to send, so the rest goes out once,
// and when the application deregisters the region after the READ completed
// nothing superseded is left to fail the connection.
TEST_F(SelectivePeerTest, AnAnswerForTheRestReplacesTheOneStreaming) {
  engine_.reset();
  port_.FreeAll();
  StartEngine([](EngineConfig& c) { c.per_qp_packet_budget = 4; });
  const uint64_t va = region_->va();
  InjectSelectiveRead(kRqPsn, va, 8 * kMtu);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 4u) << "the budget lets four responses out per poll";
  InjectSelectiveRead(kRqPsn + 2, va + 2 * kMtu, 6 * kMtu);
  sent = Transmitted(4);
  ASSERT_EQ(sent.size(), 6u) << "the rest from the third packet, once";
  for (uint32_t i = 0; i < 6; ++i) EXPECT_EQ(sent[i].fields.bth.psn.value(), kRqPsn + 2 + i);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  EXPECT_TRUE(Transmitted(3).empty());
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// Later READs are placed while the oldest misses a packet: READ A (four
// packets, the third lost), a SEND, READ B (four packets, all here). One
// request for A's third packet goes out, B is not asked for again, and when
// the packet comes A, the SEND and B complete, in order.
TEST_F(SelectivePeerTest, LaterReadsArePlacedWhileTheOldestWaits) {
  PostSend(IBV_WR_RDMA_READ, region_->va(), 4 * kMtu, keys_.lkey, 1);
  PostSend(IBV_WR_SEND, region_->va() + 20 * kMtu, 64, keys_.lkey, 2);
  PostSend(IBV_WR_RDMA_READ, region_->va() + 8 * kMtu, 4 * kMtu, keys_.lkey, 3);
  ASSERT_EQ(Transmitted().size(), 3u);
  auto response = [&](uint32_t psn, Opcode op) { Inject(op, psn, kMtu, false, Selective); };
  response(kSqPsn + 0, Opcode::kRcRdmaReadResponseFirst);
  response(kSqPsn + 1, Opcode::kRcRdmaReadResponseMiddle);
  response(kSqPsn + 3, Opcode::kRcRdmaReadResponseLast);
  response(kSqPsn + 5, Opcode::kRcRdmaReadResponseFirst);
  response(kSqPsn + 6, Opcode::kRcRdmaReadResponseMiddle);
  response(kSqPsn + 7, Opcode::kRcRdmaReadResponseMiddle);
  response(kSqPsn + 8, Opcode::kRcRdmaReadResponseLast);
  auto sent = Transmitted(3);
  ASSERT_EQ(sent.size(), 1u) << "only A's missing packet is asked for";
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn + 2);
  EXPECT_EQ(sent[0].fields.reth.dma_length, kMtu);
  EXPECT_TRUE(Completions().empty());
  for (uint32_t i = 8 * kMtu; i < 12 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0xAB) << "B placed, " << i;
  response(kSqPsn + 2, Opcode::kRcRdmaReadResponseOnly);
  EXPECT_TRUE(Transmitted(3).empty());
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].wr_id, i + 1);
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
  for (uint32_t i = 0; i < 4 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0xAB) << i;
  EXPECT_EQ(qp_->req.unacked.value(), kSqPsn + 9);
}

// A selective response packet that is not the length its place says (a
// short packet before the READ's last) fails the READ; nothing is placed.
TEST_F(SelectivePeerTest, AnOutOfOrderReadResponseOfTheWrongLengthFailsTheRead) {
  PostSend(IBV_WR_RDMA_READ, region_->va(), 8 * kMtu, keys_.lkey, 7);
  ASSERT_EQ(Transmitted().size(), 1u);
  Inject(Opcode::kRcRdmaReadResponseLast, kSqPsn + 4, 100, false, Selective);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_BAD_RESP_ERR);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
  for (uint32_t i = 0; i < 8 * kMtu; ++i) ASSERT_EQ(region_->data()[i], 0) << i;
}

// Selective READ, the responder's half: a selective requester's copy of a
// READ asking for a run inside it gets that run alone; a run that is not
// whole MTUs is an invalid request.
TEST_F(SelectivePeerTest, ARunInsideAReadIsAnsweredAlone) {
  const uint64_t va = region_->va();
  InjectSelectiveRead(kRqPsn, va, 8 * kMtu);
  EXPECT_EQ(Transmitted(2).size(), 8u);
  InjectSelectiveRead(kRqPsn + 3, va + 3 * kMtu, 2 * kMtu);
  auto sent = Transmitted();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn + 3);
  EXPECT_EQ(sent[1].fields.bth.psn.value(), kRqPsn + 4);
  EXPECT_EQ(sent[1].fields.bth.opcode, uint8_t(Opcode::kRcRdmaReadResponseLast));
  EXPECT_EQ(sent[0].fields.bth.reserved7, kBthSelectiveRetransmission);
  InjectSelectiveRead(kRqPsn + 3, va + 3 * kMtu, kMtu + 1);
  sent = Transmitted();
  ASSERT_EQ(CountNaks(sent, AethKind::kNak), 1u);
  EXPECT_EQ(sent.back().fields.aeth.value(), uint8_t(NakCode::kInvalidRequest));
  EXPECT_EQ(qp_->state.load(), IBV_QPS_ERR);
}

// A selective requester asks on a timer for what may be merely slow; a copy
// that comes after the application deregistered the region (the READ was
// answered) is dropped, and the connection lives.
TEST_F(SelectivePeerTest, AStaleCopyOfAReadAfterDeregistrationIsDropped) {
  const uint64_t va = region_->va();
  InjectSelectiveRead(kRqPsn, va, 2 * kMtu);
  EXPECT_EQ(Transmitted().size(), 2u);
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  const uint64_t dropped = engine_->counters().rx_dropped;
  InjectSelectiveRead(kRqPsn, va, 2 * kMtu);
  InjectSelectiveRead(kRqPsn + 1, va + kMtu, kMtu);
  EXPECT_TRUE(Transmitted(2).empty());
  EXPECT_EQ(engine_->counters().rx_dropped, dropped + 2);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// Pull descriptors (transport/pull_descriptor.h) from a peer process the
// engine may read (here: this process, through a PeerMemory that reads our
// own pid, as a local link would read the peer's). Whatever the descriptor
// says, nothing lands outside what the key or the receive grants, nothing
// is read before every check passed, and a bad one fails only its QP.
class PullReader final : public PeerMemory {
 public:
  bool accept = true;
  int reads = 0;
  bool TakesPulls(uint32_t, const Gid&) override { return false; }
  uint32_t PullSource(const rte_mbuf*) override { return accept ? 1 : 0; }
  bool Pull(uint32_t, const iovec* local, uint32_t local_count, const iovec* remote, uint32_t remote_count) override {
    ++reads;
    size_t want = 0;
    for (uint32_t i = 0; i < local_count; ++i) want += local[i].iov_len;
    const ssize_t got = process_vm_readv(getpid(), local, local_count, remote, remote_count, 0);
    return got >= 0 && static_cast<size_t>(got) == want;
  }
};

class PullDescriptorHostileTest : public HostilePeerTest {
 protected:
  void SetUp() override {
    StartEngine([this](EngineConfig& c) { c.peer_memory = &reader_; });
    source_.assign(65536, 0x3C);
  }
  // A WRITE Only (or another opcode) carrying `descriptor` as a pull.
  void InjectPull(QueuePair* qp, Opcode opcode, const std::vector<uint8_t>& descriptor, uint32_t rkey, uint64_t va,
                  uint32_t dma_length, uint32_t psn = kRqPsn) {
    Inject(qp, opcode, psn, static_cast<uint32_t>(descriptor.size()), /*ack_request=*/true,
           [&](PacketFields& f) {
             f.bth.reserved7 = kBthPullDescriptor;
             f.reth.virtual_address = va;
             f.reth.rkey = rkey;
             f.reth.dma_length = dma_length;
           },
           descriptor.data());
  }
  static std::vector<uint8_t> Descriptor(std::initializer_list<PullSegment> segments, uint32_t packets = 1) {
    PullDescriptor d;
    d.packets = packets;
    for (const PullSegment& s : segments) {
      d.segments[d.count++] = s;
      d.total += s.length;
    }
    std::vector<uint8_t> bytes(PullDescriptorBytes(d.count));
    WritePullDescriptor(d, bytes.data());
    return bytes;
  }
  uint64_t Source(size_t offset = 0) { return reinterpret_cast<uint64_t>(source_.data() + offset); }
  NakCode OnlyNak(const std::vector<Sent>& sent) {
    EXPECT_EQ(CountNaks(sent, AethKind::kNak), 1u);
    for (const Sent& s : sent) {
      if (s.opcode->operation == Operation::kAcknowledge && s.fields.aeth.kind() == AethKind::kNak) {
        return static_cast<NakCode>(s.fields.aeth.value());
      }
    }
    return NakCode::kInvalidRequest;
  }
  bool RegionUntouched() const {
    for (size_t i = 0; i < region_->size; ++i) {
      if (region_->data()[i] != 0) return false;
    }
    return true;
  }

  PullReader reader_;
  std::vector<uint8_t> source_;
};

TEST_F(PullDescriptorHostileTest, AGoodDescriptorLandsExactlyWhereTheKeyGrants) {
  InjectPull(qp_, Opcode::kRcRdmaWriteOnly, Descriptor({{Source(), 4096}, {Source(8192), 4096}}, 8), keys_.rkey,
             region_->va() + 100, 8192);
  auto sent = Transmitted(2);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].fields.aeth.kind(), AethKind::kAck);
  EXPECT_EQ(sent[0].fields.bth.psn.value(), kRqPsn + 7) << "the ACK covers every PSN the descriptor spans";
  EXPECT_EQ(reader_.reads, 1);
  EXPECT_EQ(region_->data()[99], 0);
  EXPECT_EQ(region_->data()[100], 0x3C);
  EXPECT_EQ(region_->data()[100 + 8191], 0x3C);
  EXPECT_EQ(region_->data()[100 + 8192], 0);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

TEST_F(PullDescriptorHostileTest, MalformedDescriptorsAreInvalidRequestsAndNothingIsRead) {
  std::vector<uint8_t> garbage(48, 0xFF);
  std::vector<uint8_t> truncated = Descriptor({{Source(), 4096}});
  truncated.pop_back();
  const std::vector<std::vector<uint8_t>> bad = {
      garbage, truncated, Descriptor({{Source(), 4096}}, 0),
      Descriptor({{Source(), 4096}}),  // says 4096 bytes, the RETH 8192
  };
  for (const std::vector<uint8_t>& d : bad) {
    QueuePair* qp = MakeConnectedQp();
    InjectPull(qp, Opcode::kRcRdmaWriteOnly, d, keys_.rkey, region_->va(), 8192);
    EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kInvalidRequest);
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
  }
  // On a READ request (which has no payload): not something a descriptor is.
  QueuePair* qp = MakeConnectedQp();
  InjectPull(qp, Opcode::kRcRdmaReadRequest, {}, keys_.rkey, region_->va(), 64);
  EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kInvalidRequest);
  EXPECT_EQ(reader_.reads, 0);
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(PullDescriptorHostileTest, KeysNotGivenAndDeregisteredRegionsAreRemoteAccessErrors) {
  const auto d = Descriptor({{Source(), 4096}});
  InjectPull(qp_, Opcode::kRcRdmaWriteOnly, d, keys_.rkey + 1, region_->va(), 4096);
  EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kRemoteAccessError);
  QueuePair* qp = MakeConnectedQp();
  InjectPull(qp, Opcode::kRcRdmaWriteOnly, Descriptor({{Source(), 65536}}), keys_.rkey, region_->va() + 1, 65536);
  EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kRemoteAccessError) << "one byte past the region";
  // Deregistered before the descriptor is handled: the key is gone.
  qp = MakeConnectedQp();
  ASSERT_TRUE(engine_->DeregMr(keys_.lkey).ok());
  InjectPull(qp, Opcode::kRcRdmaWriteOnly, d, keys_.rkey, region_->va(), 4096);
  EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kRemoteAccessError);
  EXPECT_EQ(reader_.reads, 0);
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(PullDescriptorHostileTest, MemoryTheSenderDoesNotHaveFailsOnlyItsQp) {
  // Unmapped, and a range that runs off a mapping: the copy fails (what it
  // got before the fault is inside the granted range), the QP stops.
  void* page = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<uint8_t*>(page) + 4096, 4096), 0);
  const uint64_t mapped = reinterpret_cast<uint64_t>(page);
  for (const auto& d : {Descriptor({{mapped + 4096, 64}}), Descriptor({{mapped, 8192}}),
                        Descriptor({{0xFFFFFFFFFFFFF000ull, 4095}})}) {
    QueuePair* qp = MakeConnectedQp();
    const uint32_t length = static_cast<uint32_t>(d[8] | (d[9] << 8));
    InjectPull(qp, Opcode::kRcRdmaWriteOnly, d, keys_.rkey, region_->va(), length);
    EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kInvalidRequest);
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR);
  }
  munmap(page, 4096);
  EXPECT_EQ(engine_->counters().pull_failures, 3u);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS) << "other QPs carry on";
}

TEST_F(PullDescriptorHostileTest, ASendTakesOnlyWhatItsReceiveHolds) {
  PostRecv(qp_, 1, 4096);
  InjectPull(qp_, Opcode::kRcSendOnly, Descriptor({{Source(), 8192}}, 8), 0, 0, 0);
  EXPECT_EQ(OnlyNak(Transmitted(2)), NakCode::kInvalidRequest);
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(reader_.reads, 0);
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(PullDescriptorHostileTest, ADescriptorToAUcQpIsDroppedUnread) {
  QpInitAttr init = OneCqQpInit(IBV_QPT_UC, pd_, cq_, 64, 2);
  QueuePair* uc = *engine_->CreateQp(init);
  ibv_qp_attr a{};  // UC: no READ or atomic attributes (ibv_modify_qp(3))
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_TRUE(engine_->ModifyQp(uc, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS).ok());
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = kPeerQpn;
  a.rq_psn = kRqPsn;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer_gid_.data(), 16);
  ASSERT_TRUE(
      engine_->ModifyQp(uc, a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN).ok());
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kSqPsn;
  ASSERT_TRUE(engine_->ModifyQp(uc, a, IBV_QP_STATE | IBV_QP_SQ_PSN).ok());
  InjectPull(uc, Opcode::kUcRdmaWriteOnly, Descriptor({{Source(), 4096}}), keys_.rkey, region_->va(), 4096);
  EXPECT_TRUE(Transmitted(2).empty());
  EXPECT_EQ(engine_->counters().pulls_refused, 1u);
  EXPECT_EQ(uc->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(reader_.reads, 0);
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(PullDescriptorHostileTest, FromWhereNoCopyIsAllowedADescriptorIsDroppedUnseen) {
  reader_.accept = false;
  InjectPull(qp_, Opcode::kRcRdmaWriteOnly, Descriptor({{Source(), 4096}}), keys_.rkey, region_->va(), 4096);
  // And as a response: a descriptor is never an answer.
  InjectPull(qp_, Opcode::kRcAcknowledge, {}, 0, 0, 0, kSqPsn);
  EXPECT_TRUE(Transmitted(2).empty());
  EXPECT_EQ(engine_->counters().pulls_refused, 2u);
  EXPECT_EQ(reader_.reads, 0);
  EXPECT_TRUE(RegionUntouched());
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// Staged chunks (transport/pull_descriptor.h) from a linked process: its
// payload area holds what it likes, its descriptors say what they like.
// Nothing lands outside what the key or the receive grants, a chunk the
// area does not hold as described is never copied, and a bad one fails
// only its QP.
class AreaReader final : public PeerMemory {
 public:
  bool from_link = true;
  uint64_t sequence = 2;  // what the area says chunk 0 holds
  std::vector<uint8_t> area = std::vector<uint8_t>(kStagedChunkBytes, 0x5A);
  bool TakesPulls(uint32_t, const Gid&) override { return false; }
  uint32_t PullSource(const rte_mbuf*) override { return 0; }
  bool Pull(uint32_t, const iovec*, uint32_t, const iovec*, uint32_t) override { return false; }
  uint32_t LinkSource(const rte_mbuf*) override { return from_link ? 3 : 0; }
  int reads = 0, takes = 0;
  const uint8_t* StagedData(uint32_t, uint32_t chunk, uint64_t s, uint32_t length) override {
    ++reads;
    return chunk == 0 && s == sequence && length <= area.size() ? area.data() : nullptr;
  }
  bool StagedIntact(uint32_t, uint32_t chunk, uint64_t s) override { return chunk == 0 && s == sequence; }
  void TakeStaged(uint32_t, uint32_t, uint64_t) override { ++takes; }
};

class StagedChunkHostileTest : public HostilePeerTest {
 protected:
  void SetUp() override { StartEngine([this](EngineConfig& c) { c.peer_memory = &area_; }); }
  void InjectChunk(QueuePair* qp, Opcode opcode, const StagedChunk& chunk, uint32_t dma_length,
                   uint32_t psn = kRqPsn, uint32_t rkey = 0, size_t descriptor_bytes = kStagedChunkDescriptorBytes) {
    std::vector<uint8_t> bytes(std::max(descriptor_bytes, kStagedChunkDescriptorBytes));
    WriteStagedChunk(chunk, bytes.data());
    bytes.resize(descriptor_bytes);
    Inject(qp, opcode, psn, static_cast<uint32_t>(bytes.size()), /*ack_request=*/true,
           [&](PacketFields& f) {
             f.bth.reserved7 = kBthStagedChunk;
             f.reth.virtual_address = region_->va();
             f.reth.rkey = rkey != 0 ? rkey : keys_.rkey;
             f.reth.dma_length = dma_length;
           },
           bytes.data());
  }
  bool RegionUntouched() const {
    for (size_t i = 0; i < region_->size; ++i) {
      if (region_->data()[i] != 0) return false;
    }
    return true;
  }
  NakCode FirstNak(const std::vector<Sent>& sent) {
    for (const Sent& s : sent) {
      if (s.opcode->operation == Operation::kAcknowledge && s.fields.aeth.kind() == AethKind::kNak) {
        return static_cast<NakCode>(s.fields.aeth.value());
      }
    }
    ADD_FAILURE() << "no NAK";
    return NakCode::kInvalidRequest;
  }
  void PostRead(QueuePair* qp, uint32_t length) {
    ibv_sge sge{region_->va(), length, keys_.lkey};
    ibv_send_wr wr = SignaledSendWr(9, IBV_WR_RDMA_READ, &sge);
    wr.wr.rdma.remote_addr = 0x10000;
    wr.wr.rdma.rkey = 0x77;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(engine_->PostSend(qp, &wr, &bad), 0);
  }
  AreaReader area_;
};

TEST_F(StagedChunkHostileTest, GoodChunksLandWhereTheKeyGrantsAndAreAcknowledgedThroughTheirLastPsn) {
  // A WRITE of 3 MTUs + 100 bytes as two chunks: First (2 MTUs), Last.
  InjectChunk(qp_, Opcode::kRcRdmaWriteFirst, {.chunk = 0, .length = 2 * kMtu, .sequence = 2}, 3 * kMtu + 100);
  InjectChunk(qp_, Opcode::kRcRdmaWriteLast, {.chunk = 0, .length = kMtu + 100, .sequence = 2}, 0, kRqPsn + 2);
  auto sent = Transmitted(4);
  ASSERT_FALSE(sent.empty());
  for (const Sent& ack : sent) EXPECT_EQ(ack.fields.aeth.kind(), AethKind::kAck);
  EXPECT_EQ(sent.back().fields.bth.psn.value(), kRqPsn + 3) << "acknowledged through the last PSN the chunks span";
  EXPECT_EQ(region_->data()[0], 0x5A);
  EXPECT_EQ(region_->data()[3 * kMtu + 99], 0x5A);
  EXPECT_EQ(region_->data()[3 * kMtu + 100], 0);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
  EXPECT_EQ(engine_->counters().staged_received, 2u);
}

TEST_F(StagedChunkHostileTest, MalformedOrMisstatedChunksFailTheirQpAndNothingLands) {
  struct Case {
    const char* what;
    Opcode opcode;
    StagedChunk chunk;
    uint32_t dma_length;
    size_t bytes = kStagedChunkDescriptorBytes;
    uint32_t rkey = 0;
  };
  const Case cases[] = {
      {"a descriptor a byte short", Opcode::kRcRdmaWriteOnly, {0, 100, 2}, 100, kStagedChunkDescriptorBytes - 1},
      {"a descriptor a byte long", Opcode::kRcRdmaWriteOnly, {0, 100, 2}, 100, kStagedChunkDescriptorBytes + 1},
      {"an odd sequence", Opcode::kRcRdmaWriteOnly, {0, 100, 3}, 100},
      {"a sequence the area does not hold", Opcode::kRcRdmaWriteOnly, {0, 100, 4}, 100},
      {"a chunk the area does not have", Opcode::kRcRdmaWriteOnly, {9, 100, 2}, 100},
      {"more than a chunk", Opcode::kRcRdmaWriteOnly, {0, kStagedChunkBytes + 1, 2}, kStagedChunkBytes + 1},
      {"a First of part of an MTU", Opcode::kRcRdmaWriteFirst, {0, kMtu + 1, 2}, 4 * kMtu},
      {"a Middle with nothing begun", Opcode::kRcRdmaWriteMiddle, {0, kMtu, 2}, 0},
      {"more than the RETH says", Opcode::kRcRdmaWriteOnly, {0, 200, 2}, 100},
      {"a key not given", Opcode::kRcRdmaWriteOnly, {0, 100, 2}, 100, kStagedChunkDescriptorBytes, 0x7777},
      {"beyond the region", Opcode::kRcRdmaWriteFirst, {0, kStagedChunkBytes, 2}, 2 * kStagedChunkBytes},
  };
  for (const Case& c : cases) {
    QueuePair* qp = MakeConnectedQp();
    InjectChunk(qp, c.opcode, c.chunk, c.dma_length, kRqPsn, c.rkey, c.bytes);
    auto sent = Transmitted(2);
    EXPECT_EQ(sent.size(), 1u) << c.what;
    if (!sent.empty()) FirstNak(sent);
    EXPECT_EQ(qp->state.load(), IBV_QPS_ERR) << c.what;
    EXPECT_TRUE(RegionUntouched()) << c.what;
  }
  EXPECT_EQ(engine_->counters().staged_received, 0u);
}

TEST_F(StagedChunkHostileTest, AChunkNotFromALinkOrNotARequestOrReadResponseIsDroppedUnseen) {
  area_.from_link = false;
  InjectChunk(qp_, Opcode::kRcRdmaWriteOnly, {0, 100, 2}, 100);
  EXPECT_TRUE(Transmitted(2).empty());
  area_.from_link = true;
  InjectChunk(qp_, Opcode::kRcAcknowledge, {0, 100, 2}, 0, kSqPsn, 0, /*descriptor_bytes=*/0);
  // Both link flags at once is neither form.
  Inject(qp_, Opcode::kRcRdmaWriteOnly, kRqPsn, 16, true, [&](PacketFields& f) {
    f.bth.reserved7 = kBthStagedChunk | kBthPullDescriptor;
    f.reth.virtual_address = region_->va();
    f.reth.rkey = keys_.rkey;
    f.reth.dma_length = 100;
  });
  EXPECT_TRUE(Transmitted(2).empty());
  EXPECT_EQ(engine_->counters().staged_refused, 3u);
  EXPECT_TRUE(RegionUntouched());
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

// A READ's response as staged chunks: what they hold lands in the READ's
// buffer, where their PSNs say, and each is given back to its responder.
TEST_F(StagedChunkHostileTest, StagedReadResponsesLandInTheReadAndAreGivenBack) {
  PostRead(qp_, 3 * kMtu + 100);
  ASSERT_EQ(Transmitted().size(), 1u);
  InjectChunk(qp_, Opcode::kRcRdmaReadResponseFirst, {.chunk = 0, .length = 2 * kMtu, .sequence = 2}, 0, kSqPsn);
  InjectChunk(qp_, Opcode::kRcRdmaReadResponseLast, {.chunk = 0, .length = kMtu + 100, .sequence = 2}, 0,
              kSqPsn + 2);
  Transmitted();
  auto wc = Completions();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(region_->data()[0], 0x5A);
  EXPECT_EQ(region_->data()[3 * kMtu + 99], 0x5A);
  EXPECT_EQ(region_->data()[3 * kMtu + 100], 0) << "nothing past the READ";
  EXPECT_EQ(area_.takes, 2);
  EXPECT_EQ(engine_->counters().staged_received, 2u);
  // A staged response nobody asked for reads nothing, and is given back.
  const int reads = area_.reads;
  InjectChunk(qp_, Opcode::kRcRdmaReadResponseOnly, {.chunk = 0, .length = 100, .sequence = 2}, 0, kSqPsn + 4);
  EXPECT_TRUE(Transmitted().empty());
  EXPECT_EQ(area_.reads, reads);
  EXPECT_EQ(area_.takes, 3);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

TEST_F(StagedChunkHostileTest, MisstatedReadResponsesFailTheReadOrAreAskedForAgainAndNothingLands) {
  struct Case {
    const char* what;
    Opcode opcode;
    StagedChunk chunk;
    bool fails;  // a bad response (IBTA 9.9.3.1.2), not data that is gone
    size_t bytes = kStagedChunkDescriptorBytes;
  };
  const Case cases[] = {
      {"a descriptor a byte short", Opcode::kRcRdmaReadResponseOnly, {0, 100, 2}, true, kStagedChunkDescriptorBytes - 1},
      {"more than the READ asked for", Opcode::kRcRdmaReadResponseFirst, {0, 4 * kMtu, 2}, true},
      {"a First of part of an MTU", Opcode::kRcRdmaReadResponseFirst, {0, kMtu + 1, 2}, true},
      {"a chunk the area does not have", Opcode::kRcRdmaReadResponseFirst, {9, kMtu, 2}, false},
      {"a sequence the area does not hold", Opcode::kRcRdmaReadResponseFirst, {0, kMtu, 4}, false},
  };
  for (const Case& c : cases) {
    QueuePair* qp = MakeConnectedQp();
    PostRead(qp, 3 * kMtu + 100);
    ASSERT_EQ(Transmitted().size(), 1u) << c.what;
    InjectChunk(qp, c.opcode, c.chunk, 0, kSqPsn, 0, c.bytes);
    auto sent = Transmitted(2);
    auto wc = Completions();
    if (c.fails) {
      ASSERT_EQ(wc.size(), 1u) << c.what;
      EXPECT_EQ(wc[0].status, IBV_WC_BAD_RESP_ERR) << c.what;
      EXPECT_EQ(qp->state.load(), IBV_QPS_ERR) << c.what;
    } else {
      EXPECT_TRUE(wc.empty()) << c.what;
      ASSERT_FALSE(sent.empty()) << c.what << ": the READ is asked for again";
      EXPECT_EQ(sent[0].opcode->operation, Operation::kRdmaReadRequest) << c.what;
      EXPECT_EQ(sent[0].fields.bth.psn.value(), kSqPsn) << c.what;
      EXPECT_EQ(qp->state.load(), IBV_QPS_RTS) << c.what;
    }
    EXPECT_TRUE(RegionUntouched()) << c.what;
  }
  EXPECT_EQ(engine_->counters().staged_received, 0u);
}

// Frames in link form (transport/link_frame.h) from a linked process: a
// good one lands as its wire twin would; a bad link header, a UD opcode or
// a frame too short for a BTH is a parse error, never handed to the
// neighbour handler as if it were ARP or ND, and nothing lands.
class LinkFramePort final : public PeerMemory {
 public:
  bool TakesPulls(uint32_t, const Gid&) override { return false; }
  uint32_t PullSource(const rte_mbuf*) override { return 0; }
  bool Pull(uint32_t, const iovec*, uint32_t, const iovec*, uint32_t) override { return false; }
  bool LinkFrame(const rte_mbuf* m) override { return m->hash.usr == 1; }
};

class LinkFrameHostileTest : public HostilePeerTest {
 protected:
  void SetUp() override {
    StartEngine([this](EngineConfig& c) {
      c.peer_memory = &port_form_;
      c.non_roce_handler = [this](rte_mbuf* m) {
        ++handed_to_neighbours_;
        rte_pktmbuf_free(m);
      };
    });
  }
  // A WRITE Only of 64 bytes into the region, in link form, its bytes then
  // changed by `spoil`; `keep` bytes of it.
  void InjectLinkWrite(const std::function<void(std::vector<uint8_t>&)>& spoil, size_t keep = SIZE_MAX) {
    PacketFields f;
    f.dst_mac = our_mac_;
    f.src_mac = peer_mac_;
    f.src_gid = peer_gid_;
    f.dst_gid = our_gid_;
    f.bth.opcode = static_cast<uint8_t>(Opcode::kRcRdmaWriteOnly);
    f.bth.dest_qp = qp_->qpn;
    f.bth.psn = Psn(kRqPsn);
    f.reth = {region_->va(), keys_.rkey, 64};
    f.payload_length = 64;
    std::vector<uint8_t> payload(64, 0x6C), wire(FrameLength(f)), link(FrameLength(f));
    size_t length = 0;
    ASSERT_EQ(BuildPacket(f, payload.data(), wire.data(), wire.size(), &length), BuildError::kOk);
    link.resize(WriteLinkFrame(wire.data(), length, link.data(), link.size()));
    ASSERT_FALSE(link.empty());
    if (spoil) spoil(link);
    link.resize(std::min(keep, link.size()));
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(link.size())), link.data(), link.size());
    m->hash.usr = 1;  // the port's word: it came in link form
    port_.inbound.push_back(m);
  }
  LinkFramePort port_form_;
  int handed_to_neighbours_ = 0;
};

TEST_F(LinkFrameHostileTest, BadLinkFramesAreParseErrorsAndAGoodOneLands) {
  const auto arp_type = [](std::vector<uint8_t>& b) { b[12] = 0x08, b[13] = 0x06; };
  InjectLinkWrite([&](std::vector<uint8_t>& b) { arp_type(b), b[0] = 5; });  // no such IP version
  InjectLinkWrite([&](std::vector<uint8_t>& b) { arp_type(b), b[3] = 1; });  // a reserved byte
  InjectLinkWrite([](std::vector<uint8_t>& b) { b[kLinkSrcGidOffset] = 0xfd; });  // "IPv4", not ::ffff:a.b.c.d
  InjectLinkWrite([](std::vector<uint8_t>& b) { b[kLinkHeaderBytes] = uint8_t(Opcode::kUdSendOnly); });
  InjectLinkWrite(nullptr, kLinkHeaderBytes + 11);  // too short for a BTH
  Transmitted(2);
  EXPECT_EQ(handed_to_neighbours_, 0);
  EXPECT_EQ(engine_->counters().rx_parse_errors, 5u);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(region_->data()[i], 0) << "byte " << i;
  InjectLinkWrite(nullptr);
  Transmitted(2);
  EXPECT_EQ(region_->data()[0], 0x6C);
  EXPECT_EQ(region_->data()[63], 0x6C);
  EXPECT_EQ(region_->data()[64], 0);
  EXPECT_EQ(qp_->state.load(), IBV_QPS_RTS);
}

}  // namespace
}  // namespace uroce::transport
