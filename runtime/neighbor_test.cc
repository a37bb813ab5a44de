// ARP and neighbour discovery: the frames on their own, then two engines on
// a net_ring pair that find each other's MACs by themselves (no static
// neighbour entries) while their QPs connect, over IPv4 and IPv6.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "runtime/config.h"
#include "pmd/eal_test_environment.h"
#include "pmd/eth_port_io.h"
#include "pmd/mempool.h"
#include "host/neighbor_frames.h"
#include "runtime/neighbor_resolver.h"
#include "pmd/port.h"
#include "pmd/ring_pair.h"
#include "testing/engine_pair.h"
#include "transport/address_text.h"
#include "transport/engine.h"
#include "transport/verbs_wr.h"

namespace uroce::runtime {

using pmd::AvailableMbufs;
using host::BuildArpReply;
using host::BuildArpRequest;
using host::BuildNeighborAdvertisement;
using host::BuildNeighborSolicitation;
using pmd::CreatePktPool;
using pmd::CreateRingPair;
using pmd::DestroyRingPair;
using pmd::EthPortIo;
using transport::GidToString;
using host::Icmpv6Checksum;
using pmd::MempoolPtr;
using host::NeighborMessage;
using host::NeighborMessageKind;
using transport::ParseIpAddress;
using host::ParseNeighborMessage;
using pmd::PortConfig;
using pmd::RingPair;
using pmd::StartPort;
using host::kMaxNeighborFrame;
using host::kMinEthernetFrame;
using host::kNaFlagOverride;
using host::kNaFlagSolicited;
using host::kNdHopLimit;

namespace {

using transport::Gid;
using transport::MacAddress;

Gid Ip(const char* text) {
  Gid g{};
  EXPECT_TRUE(ParseIpAddress(text, &g)) << text;
  return g;
}

const MacAddress kMacA = {0x02, 0, 0, 0, 0, 0x0a};
const MacAddress kMacB = {0x02, 0, 0, 0, 0, 0x0b};
const MacAddress kMacC = {0x02, 0, 0, 0, 0, 0x0c};  // a third station on the link: the attacker
const MacAddress kMacD = {0x02, 0, 0, 0, 0, 0x0d};

TEST(NeighborFramesTest, ArpRequestAndReply) {
  uint8_t frame[kMaxNeighborFrame];
  const size_t n = BuildArpRequest(frame, kMacA, Ip("10.0.0.1"), Ip("10.0.0.2"));
  EXPECT_EQ(n, kMinEthernetFrame);  // 42 bytes padded
  for (int i = 0; i < 6; ++i) EXPECT_EQ(frame[i], 0xFF);  // broadcast
  NeighborMessage m = ParseNeighborMessage(frame, n);
  ASSERT_EQ(m.kind, NeighborMessageKind::kArpRequest);
  EXPECT_EQ(m.sender_ip, Ip("10.0.0.1"));
  EXPECT_EQ(m.sender_mac, kMacA);
  EXPECT_TRUE(m.has_sender_mac);
  EXPECT_EQ(m.target_ip, Ip("10.0.0.2"));

  const size_t r = BuildArpReply(frame, kMacB, Ip("10.0.0.2"), kMacA, Ip("10.0.0.1"));
  EXPECT_EQ(std::memcmp(frame, kMacA.data(), 6), 0);  // unicast to the asker
  m = ParseNeighborMessage(frame, r);
  ASSERT_EQ(m.kind, NeighborMessageKind::kArpReply);
  EXPECT_EQ(m.sender_ip, Ip("10.0.0.2"));
  EXPECT_EQ(m.sender_mac, kMacB);
  EXPECT_EQ(m.target_ip, Ip("10.0.0.1"));

  // Truncated, or another hardware type: not ARP as uroce speaks it.
  EXPECT_EQ(ParseNeighborMessage(frame, 30).kind, NeighborMessageKind::kNone);
  frame[15] = 6;  // hardware type 6 (IEEE 802)
  EXPECT_EQ(ParseNeighborMessage(frame, r).kind, NeighborMessageKind::kNone);
}

TEST(NeighborFramesTest, SolicitationAndAdvertisement) {
  uint8_t frame[kMaxNeighborFrame];
  const Gid me = Ip("fd00:75::1"), peer = Ip("fd00:75::abcd:ef12");
  const size_t n = BuildNeighborSolicitation(frame, kMacA, me, peer);
  EXPECT_EQ(n, kMaxNeighborFrame);
  // 33:33:ff + the target's low 24 bits; ff02::1:ffcd:ef12.
  const uint8_t want_mac[6] = {0x33, 0x33, 0xff, 0xcd, 0xef, 0x12};
  EXPECT_EQ(std::memcmp(frame, want_mac, 6), 0);
  EXPECT_EQ(frame[14 + 7], kNdHopLimit);
  EXPECT_EQ(frame[14 + 24], 0xff);
  EXPECT_EQ(frame[14 + 25], 0x02);
  NeighborMessage m = ParseNeighborMessage(frame, n);
  ASSERT_EQ(m.kind, NeighborMessageKind::kNeighborSolicitation);
  EXPECT_EQ(m.sender_ip, me);
  EXPECT_EQ(m.sender_mac, kMacA);
  EXPECT_EQ(m.target_ip, peer);

  const size_t a = BuildNeighborAdvertisement(frame, kMacB, peer, kMacA, me);
  m = ParseNeighborMessage(frame, a);
  ASSERT_EQ(m.kind, NeighborMessageKind::kNeighborAdvertisement);
  EXPECT_EQ(m.sender_ip, peer);
  EXPECT_EQ(m.sender_mac, kMacB);
  EXPECT_EQ(transport::LoadBe32(frame + 14 + 40 + 4) & (kNaFlagSolicited | kNaFlagOverride),
            kNaFlagSolicited | kNaFlagOverride);

  // RFC 4861 7.1.2: a bad checksum or a hop limit other than 255 is dropped.
  uint8_t bad[kMaxNeighborFrame];
  std::memcpy(bad, frame, a);
  bad[14 + 40 + 8] ^= 1;  // target address changed, checksum not
  EXPECT_EQ(ParseNeighborMessage(bad, a).kind, NeighborMessageKind::kNone);
  std::memcpy(bad, frame, a);
  bad[14 + 7] = 64;
  EXPECT_EQ(ParseNeighborMessage(bad, a).kind, NeighborMessageKind::kNone);
}

TEST(NeighborFramesTest, OtherFramesAreIgnored) {
  uint8_t frame[64] = {};
  frame[12] = 0x08;  // IPv4
  EXPECT_EQ(ParseNeighborMessage(frame, sizeof(frame)).kind, NeighborMessageKind::kNone);
  EXPECT_EQ(ParseNeighborMessage(frame, 10).kind, NeighborMessageKind::kNone);
}

// Two engines over a ring pair, each with its resolver; one thread polls
// both (inline progress), as the resolver does while it waits.
class ResolverPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const std::string name = "nb" + std::to_string(counter++);
    auto pool = CreatePktPool({.name = name + "_pool", .mbufs = kPoolSize, .per_core_cache = 0,
                               .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    auto pair = CreateRingPair(name);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = *pair;
    PortConfig pc;
    pc.rx_pool = pool_.get();
    ASSERT_TRUE(StartPort(pair_.port_a, pc).ok());
    ASSERT_TRUE(StartPort(pair_.port_b, pc).ok());
  }

  void MakeSide(int i, const std::vector<Gid>& gids, const MacAddress& mac, unsigned timeout_ms = 3000,
                unsigned failure_cache_ms = 1000) {
    io_[i] = std::make_unique<EthPortIo>(i == 0 ? pair_.port_a : pair_.port_b, 0);
    NeighborResolver::Options o;
    o.mac = mac;
    o.addresses = gids;
    o.pool = pool_.get();
    o.timeout_ms = timeout_ms;
    o.retry_ms = 20;
    o.failure_cache_ms = failure_cache_ms;
    resolver_[i] = std::make_unique<NeighborResolver>(o);
    transport::EngineConfig c;
    c.mac = mac;
    c.gids = gids;
    c.port_mtu = 9000;
    c.tx_pool = pool_.get();
    c.io = io_[i].get();
    NeighborResolver* r = resolver_[i].get();
    c.non_roce_handler = [r](rte_mbuf* m) { r->HandleFrame(m); };
    c.resolve_neighbor = [r](const Gid& ip) { return r->Resolve(ip); };
    side_[i].engine = std::make_unique<transport::Engine>(c);
    side_[i].gid = gids[0];
    side_[i].mac = mac;
    side_[i].pd = *side_[i].engine->AllocPd();
    side_[i].cq = *side_[i].engine->CreateCq(256);
    r->Attach(side_[i].engine.get(), [this] { PollBoth(); });
  }

  void PollBoth() {
    for (auto& s : side_) {
      if (s.engine) s.engine->Poll();
    }
    if (on_poll_) on_poll_();
  }

  // Hands `frame` to side i's resolver as if its engine had received it
  // (what a third station on the link can send).
  void Inject(int i, const uint8_t* frame, size_t length) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    ASSERT_NE(m, nullptr);
    uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(length)));
    ASSERT_NE(p, nullptr);
    std::memcpy(p, frame, length);
    resolver_[i]->HandleFrame(m);
  }

  // "`ip` is at `mac`", an ARP reply to side i (whose address is `to`).
  void InjectArpReply(int i, const Gid& ip, const MacAddress& mac, const Gid& to) {
    uint8_t frame[kMaxNeighborFrame];
    const size_t n = BuildArpReply(frame, mac, ip, side_[i].mac, to);
    Inject(i, frame, n);
  }

  MacAddress NeighborOf(int i, const Gid& ip) {
    MacAddress mac{};
    EXPECT_TRUE(side_[i].engine->LookupNeighbor(ip, &mac)) << GidToString(ip);
    return mac;
  }

  // One SEND from A to B, checked byte for byte.
  void SendOnce(transport::QueuePair* qa, transport::QueuePair* qb) {
    std::vector<uint8_t> src(3000), dst(3000, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
    const int access = IBV_ACCESS_LOCAL_WRITE;
    auto ka = side_[0].engine->RegMr(side_[0].pd, src.data(), src.size(), reinterpret_cast<uint64_t>(src.data()), access);
    auto kb = side_[1].engine->RegMr(side_[1].pd, dst.data(), dst.size(), reinterpret_cast<uint64_t>(dst.data()), access);
    ASSERT_TRUE(ka.ok() && kb.ok());
    ibv_sge rs{reinterpret_cast<uint64_t>(dst.data()), 3000, kb->lkey};
    ibv_recv_wr rwr = transport::RecvWr(0, &rs);
    const ibv_recv_wr* bad_r = nullptr;
    ASSERT_EQ(side_[1].engine->PostRecv(qb, &rwr, &bad_r), 0);
    ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 3000, ka->lkey};
    ibv_send_wr swr = transport::SignaledSendWr(0, IBV_WR_SEND, &ss);
    const ibv_send_wr* bad_s = nullptr;
    ASSERT_EQ(side_[0].engine->PostSend(qa, &swr, &bad_s), 0);
    ibv_wc wc;
    int got_a = 0, got_b = 0;
    for (int i = 0; i < 1'000'000 && (got_a == 0 || got_b == 0); ++i) {
      PollBoth();
      if (side_[0].cq->Poll(1, &wc) == 1) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        ++got_a;
      }
      if (side_[1].cq->Poll(1, &wc) == 1) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.byte_len, 3000u);
        ++got_b;
      }
    }
    EXPECT_EQ(got_a, 1);
    EXPECT_EQ(got_b, 1);
    EXPECT_EQ(src, dst);
  }

  void TearDown() override {
    for (auto& s : side_) s.engine.reset();
    EXPECT_TRUE(DestroyRingPair(pair_).ok());
    EXPECT_EQ(AvailableMbufs(pool_.get()), kPoolSize) << "an mbuf leaked";
  }

  static constexpr unsigned kPoolSize = 2047;
  MempoolPtr pool_;
  RingPair pair_;
  std::unique_ptr<EthPortIo> io_[2];
  std::unique_ptr<NeighborResolver> resolver_[2];
  transport::EngineSide side_[2];
  std::function<void()> on_poll_;  // runs on every poll, while a resolution waits
};

TEST_F(ResolverPairTest, QpsConnectOverArpWithoutStaticEntries) {
  MakeSide(0, {Ip("10.7.0.1")}, kMacA);
  MakeSide(1, {Ip("10.7.0.2")}, kMacB);
  auto qps = transport::ConnectQueuePairs(side_[0], side_[1], transport::RcConnectOptions{});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  MacAddress mac;
  ASSERT_TRUE(side_[0].engine->LookupNeighbor(Ip("10.7.0.2"), &mac));
  EXPECT_EQ(mac, kMacB);
  ASSERT_TRUE(side_[1].engine->LookupNeighbor(Ip("10.7.0.1"), &mac));
  EXPECT_EQ(mac, kMacA);
  // Each side asked and the other answered: a request binds nothing (only
  // the answer to our own request does), so B asked for A itself.
  const NeighborCounters a = resolver_[0]->counters(), b = resolver_[1]->counters();
  EXPECT_GE(a.arp_requests_sent, 1u);
  EXPECT_GE(a.arp_replies_received, 1u);
  EXPECT_GE(b.arp_requests_received, 1u);
  EXPECT_GE(b.arp_replies_sent, 1u);
  EXPECT_GE(b.arp_requests_sent, 1u);
  EXPECT_EQ(a.learned, 1u);
  EXPECT_EQ(b.learned, 1u);
  EXPECT_GE(side_[0].engine->counters().tx_raw_frames, 1u);
  SendOnce(qps->first, qps->second);
}

TEST_F(ResolverPairTest, QpsConnectOverNeighborDiscovery) {
  MakeSide(0, {Ip("fd00:77::1")}, kMacA);
  MakeSide(1, {Ip("fd00:77::2")}, kMacB);
  auto qps = transport::ConnectQueuePairs(side_[0], side_[1], transport::RcConnectOptions{});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  const NeighborCounters a = resolver_[0]->counters(), b = resolver_[1]->counters();
  EXPECT_GE(a.nd_solicitations_sent, 1u);
  EXPECT_GE(a.nd_advertisements_received, 1u);
  EXPECT_GE(b.nd_solicitations_received, 1u);
  EXPECT_GE(b.nd_advertisements_sent, 1u);
  SendOnce(qps->first, qps->second);
}

TEST_F(ResolverPairTest, UnansweredResolutionFailsNamingTheAddress) {
  MakeSide(0, {Ip("10.8.0.1")}, kMacA, /*timeout_ms=*/60);
  MakeSide(1, {Ip("10.8.0.2")}, kMacB);
  transport::EngineSide ghost;
  ghost.gid = Ip("10.8.0.99");  // nobody has it
  transport::QpInitAttr init;
  init.pd = side_[0].pd;
  init.send_cq = init.recv_cq = side_[0].cq;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  auto qp = side_[0].engine->CreateQp(init);
  ASSERT_TRUE(qp.ok());
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_TRUE(side_[0].engine->ModifyQp(*qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS).ok());
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 0x99;
  attr.ah_attr.is_global = 1;
  std::memcpy(attr.ah_attr.grh.dgid.raw, ghost.gid.data(), 16);
  Status s = side_[0].engine->ModifyQp(*qp, attr,
                                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("ibv_modify_qp: no ARP answer for 10.8.0.99"), std::string::npos) << s.message();
  EXPECT_GE(resolver_[0]->counters().arp_requests_sent, 1u);
  EXPECT_EQ(resolver_[0]->counters().resolve_timeouts, 1u);
  // B saw requests that were not for it and stayed quiet.
  EXPECT_EQ(resolver_[1]->counters().arp_replies_sent, 0u);
}

// Our own address needs no ARP: loopback (the engine's default) has it, and
// nothing goes on the wire.
TEST_F(ResolverPairTest, OwnAddressIsLoopbackWithoutArp) {
  MakeSide(0, {Ip("10.9.0.1")}, kMacA);
  MakeSide(1, {Ip("10.9.0.2")}, kMacB);
  Status s = resolver_[0]->Resolve(Ip("10.9.0.1"));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(resolver_[0]->counters().arp_requests_sent, 0u);
  s = resolver_[0]->Resolve(Ip("fd00::5"));  // no IPv6 address to ask from
  EXPECT_NE(s.message().find("no local IPv6 address"), std::string::npos) << s.message();
}

// ARP and ND have no authentication; a station that
// answers what nobody asked must not bind (or rebind) an address.
TEST_F(ResolverPairTest, UnsolicitedReplyForANewAddressIsNotLearned) {
  MakeSide(0, {Ip("10.10.0.1")}, kMacA, /*timeout_ms=*/60);
  MakeSide(1, {Ip("10.10.0.2")}, kMacB);
  // C claims 10.10.0.50 before anyone asked for it.
  InjectArpReply(0, Ip("10.10.0.50"), kMacC, Ip("10.10.0.1"));
  Status s = resolver_[0]->Resolve(Ip("10.10.0.50"), 60);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(side_[0].engine->LookupNeighbor(Ip("10.10.0.50"), nullptr));
  EXPECT_GE(resolver_[0]->counters().refused, 1u);
  EXPECT_EQ(resolver_[0]->counters().learned, 0u);
}

TEST_F(ResolverPairTest, UnsolicitedAdvertisementForANewAddressIsNotLearned) {
  MakeSide(0, {Ip("fd00:10::1")}, kMacA, /*timeout_ms=*/60);
  MakeSide(1, {Ip("fd00:10::2")}, kMacB);
  uint8_t frame[kMaxNeighborFrame];
  // Solicited and Override set, as an answer would have them: still nobody asked.
  const size_t n = BuildNeighborAdvertisement(frame, kMacC, Ip("fd00:10::50"), kMacA, Ip("fd00:10::1"));
  Inject(0, frame, n);
  Status s = resolver_[0]->Resolve(Ip("fd00:10::50"), 60);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(side_[0].engine->LookupNeighbor(Ip("fd00:10::50"), nullptr));
}

TEST_F(ResolverPairTest, UnsolicitedReplyForAKnownAddressKeepsItsMac) {
  MakeSide(0, {Ip("10.11.0.1"), Ip("fd00:11::1")}, kMacA);
  MakeSide(1, {Ip("10.11.0.2"), Ip("fd00:11::2")}, kMacB);
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("10.11.0.2")).ok());
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("fd00:11::2")).ok());
  EXPECT_EQ(NeighborOf(0, Ip("10.11.0.2")), kMacB);
  // C says B's addresses are at C: a reply, an advertisement (Override set),
  // and a request aimed at A from B's address (RFC 826 would merge it).
  InjectArpReply(0, Ip("10.11.0.2"), kMacC, Ip("10.11.0.1"));
  uint8_t frame[kMaxNeighborFrame];
  size_t n = BuildNeighborAdvertisement(frame, kMacC, Ip("fd00:11::2"), kMacA, Ip("fd00:11::1"));
  Inject(0, frame, n);
  n = BuildArpRequest(frame, kMacC, Ip("10.11.0.2"), Ip("10.11.0.1"));
  Inject(0, frame, n);
  n = BuildNeighborSolicitation(frame, kMacC, Ip("fd00:11::2"), Ip("fd00:11::1"));
  Inject(0, frame, n);
  // A resolution drains what arrived; both entries keep B's MAC.
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("10.11.0.2")).ok());
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("fd00:11::2")).ok());
  EXPECT_EQ(NeighborOf(0, Ip("10.11.0.2")), kMacB);
  EXPECT_EQ(NeighborOf(0, Ip("fd00:11::2")), kMacB);
  EXPECT_GE(resolver_[0]->counters().refused, 4u);
  // The requests were still answered (to the MAC they came from).
  EXPECT_GE(resolver_[0]->counters().arp_replies_sent, 1u);
  EXPECT_GE(resolver_[0]->counters().nd_advertisements_sent, 1u);

  // A static entry is not changed by what arrives either.
  side_[0].engine->AddNeighbor(Ip("10.11.0.3"), kMacD);
  InjectArpReply(0, Ip("10.11.0.3"), kMacC, Ip("10.11.0.1"));
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("10.11.0.3")).ok());
  EXPECT_EQ(NeighborOf(0, Ip("10.11.0.3")), kMacD);
}

TEST_F(ResolverPairTest, SolicitedReplyIsLearned) {
  MakeSide(0, {Ip("10.12.0.1"), Ip("fd00:12::1")}, kMacA, /*timeout_ms=*/2000);
  MakeSide(1, {Ip("10.12.0.2")}, kMacB);
  // Nobody on the ring has 10.12.0.77; C answers A's request for it.
  bool answered = false;
  on_poll_ = [&] {
    if (!answered && resolver_[0]->counters().arp_requests_sent >= 1) {
      answered = true;
      InjectArpReply(0, Ip("10.12.0.77"), kMacC, Ip("10.12.0.1"));
    }
  };
  Status s = resolver_[0]->Resolve(Ip("10.12.0.77"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(NeighborOf(0, Ip("10.12.0.77")), kMacC);
  EXPECT_EQ(resolver_[0]->counters().learned, 1u);
  EXPECT_EQ(resolver_[0]->pending_entries(), 0u);  // answered: no longer outstanding
  // A second answer, with another MAC, answers nothing: the first one stands.
  on_poll_ = nullptr;
  InjectArpReply(0, Ip("10.12.0.77"), kMacD, Ip("10.12.0.1"));
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("10.12.0.77")).ok());
  EXPECT_EQ(NeighborOf(0, Ip("10.12.0.77")), kMacC);

  // IPv6: an advertisement answering our solicitation is learned; one
  // without the Solicited flag is not an answer (RFC 4861 7.2.4).
  answered = false;
  on_poll_ = [&] {
    if (answered || resolver_[0]->counters().nd_solicitations_sent < 1) return;
    answered = true;
    uint8_t frame[kMaxNeighborFrame];
    const size_t n = BuildNeighborAdvertisement(frame, kMacD, Ip("fd00:12::77"), kMacA, Ip("fd00:12::1"));
    uint8_t* icmp = frame + 14 + 40;
    transport::StoreBe32(icmp + 4, kNaFlagOverride);  // unsolicited
    transport::StoreBe16(icmp + 2, 0);
    transport::StoreBe16(icmp + 2, Icmpv6Checksum(frame + 14 + 8, frame + 14 + 24, icmp, n - 14 - 40));
    ASSERT_EQ(ParseNeighborMessage(frame, n).kind, NeighborMessageKind::kNeighborAdvertisement);
    Inject(0, frame, n);
    const size_t m = BuildNeighborAdvertisement(frame, kMacC, Ip("fd00:12::77"), kMacA, Ip("fd00:12::1"));
    Inject(0, frame, m);
  };
  s = resolver_[0]->Resolve(Ip("fd00:12::77"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(NeighborOf(0, Ip("fd00:12::77")), kMacC);
  on_poll_ = nullptr;
}

TEST_F(ResolverPairTest, RequestsNeverCreateEntries) {
  MakeSide(0, {Ip("10.13.0.1")}, kMacA, /*timeout_ms=*/60);
  MakeSide(1, {Ip("10.13.0.2")}, kMacB);
  uint8_t frame[kMaxNeighborFrame];
  const size_t n = BuildArpRequest(frame, kMacC, Ip("10.13.0.9"), Ip("10.13.0.1"));
  Inject(0, frame, n);
  EXPECT_EQ(resolver_[0]->counters().arp_replies_sent, 1u);  // answered...
  Status s = resolver_[0]->Resolve(Ip("10.13.0.9"), 60);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();  // ...but not learned
  EXPECT_FALSE(side_[0].engine->LookupNeighbor(Ip("10.13.0.9"), nullptr));
}

TEST_F(ResolverPairTest, FailuresAreCachedAndTablesBounded) {
  MakeSide(0, {Ip("10.14.0.1")}, kMacA, /*timeout_ms=*/30, /*failure_cache_ms=*/60000);
  MakeSide(1, {Ip("10.14.0.2")}, kMacB);
  Status s = resolver_[0]->Resolve(Ip("10.14.0.99"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  const uint64_t sent = resolver_[0]->counters().arp_requests_sent;
  EXPECT_GE(sent, 1u);
  // Asked again at once: fails without a request on the wire.
  s = resolver_[0]->Resolve(Ip("10.14.0.99"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no ARP answer for 10.14.0.99"), std::string::npos) << s.message();
  EXPECT_EQ(resolver_[0]->counters().arp_requests_sent, sent);
  EXPECT_EQ(resolver_[0]->counters().resolve_cached_failures, 1u);
  EXPECT_EQ(resolver_[0]->counters().resolve_timeouts, 1u);
  // Many addresses nobody answers: the tables stay within their bounds.
  for (int i = 0; i < 100; ++i) {
    (void)resolver_[0]->Resolve(Ip(("10.14.1." + std::to_string(i)).c_str()), 1);
  }
  EXPECT_LE(resolver_[0]->pending_entries(), NeighborResolver::kMaxPending);
  EXPECT_LE(resolver_[0]->failure_entries(), NeighborResolver::kMaxFailures);
  EXPECT_EQ(resolver_[0]->failure_entries(), NeighborResolver::kMaxFailures);
  // A late answer to a request still outstanding is taken.
  InjectArpReply(0, Ip("10.14.1.99"), kMacC, Ip("10.14.0.1"));
  ASSERT_TRUE(resolver_[0]->Resolve(Ip("10.14.1.99")).ok());
  EXPECT_EQ(NeighborOf(0, Ip("10.14.1.99")), kMacC);
}

}  // namespace
}  // namespace uroce::runtime
