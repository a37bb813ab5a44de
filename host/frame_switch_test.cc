// The daemon's switch: frames go to the process that owns the destination
// QPN, from the wire and between processes; processes cannot speak as
// someone else; ARP for the host is answered; every buffer comes back.
#include "host/frame_switch.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "cm/cm_mad.h"
#include "pmd/frame_test_util.h"
#include "pmd/mempool.h"
#include "host/neighbor_frames.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"

namespace uroce::host {

using pmd::AvailableMbufs;
using pmd::CreatePktPool;
using pmd::MempoolPtr;

namespace {

using transport::Gid;
using transport::MacAddress;
using transport::Opcode;

using pmd::testing::Ip;
using pmd::testing::QueuePort;

const MacAddress kHostMac = {0x02, 0, 0, 0, 0, 0x01};
const MacAddress kPeerMac = {0x02, 0, 0, 0, 0, 0x02};

class FrameSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = CreatePktPool({.name = "switch_test", .mbufs = 1023, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    FrameSwitch::Options o;
    o.mac = kHostMac;
    o.gids = {Ip(1)};
    o.uplink = &uplink_;
    o.pool = pool_.get();
    switch_ = std::make_unique<FrameSwitch>(o);
    ASSERT_TRUE(switch_->Attach(1, &proc_[0]).ok());
    ASSERT_TRUE(switch_->Attach(2, &proc_[1]).ok());
  }
  void TearDown() override {
    switch_.reset();
    uplink_.Clear();
    for (auto& p : proc_) p.Clear();
    EXPECT_EQ(AvailableMbufs(pool_.get()), 1023u) << "a buffer leaked";
  }

  // A RoCEv2 frame from (smac, sip) to (dmac, dip), QPN `qpn`.
  rte_mbuf* Roce(const MacAddress& smac, const Gid& sip, const MacAddress& dmac, const Gid& dip, uint32_t qpn,
                 Opcode op = Opcode::kRcSendOnly, uint32_t src_qpn = 0) {
    rte_mbuf* m = pmd::testing::RoceFrame(pool_.get(), smac, sip, dmac, dip, qpn, op, src_qpn);
    EXPECT_NE(m, nullptr);
    return m;
  }
  // A CM MAD to QP 1 (UD, from QP 1), as a connection manager sends it.
  rte_mbuf* Mad(const MacAddress& smac, const Gid& sip, const cm::CmMad& mad, const Gid& dip = Ip(1),
                uint32_t src_qp = 1) {
    transport::PacketFields f;
    f.src_mac = smac;
    f.dst_mac = kHostMac;
    f.src_gid = sip;
    f.dst_gid = dip;
    f.udp_src_port = 0xC000;
    f.bth.opcode = static_cast<uint8_t>(Opcode::kUdSendOnly);
    f.bth.dest_qp = 1;
    f.deth.src_qp = src_qp;
    f.deth.qkey = 0x80010000;
    f.payload_length = cm::kMadBytes;
    uint8_t payload[cm::kMadBytes];
    cm::EncodeCmMad(mad, payload);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    EXPECT_EQ(transport::BuildPacket(f, payload, m), transport::BuildError::kOk);
    return m;
  }
  rte_mbuf* Raw(const uint8_t* bytes, size_t len) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), bytes, len);
    return m;
  }

  QueuePort uplink_;
  QueuePort proc_[2];
  MempoolPtr pool_;
  std::unique_ptr<FrameSwitch> switch_;
};

TEST_F(FrameSwitchTest, FramesFromTheWireGoToTheOwnerOfTheirQpn) {
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x010005));
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x02FFFF));
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x030001));  // nobody's
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(9), 0x010005));  // not our address
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 1));         // to QP 1, not a UD frame from it
  switch_->Poll();
  EXPECT_EQ(proc_[0].out.size(), 1u);
  EXPECT_EQ(proc_[1].out.size(), 1u);
  EXPECT_EQ(switch_->counters().unknown_qpn, 1u);
  EXPECT_EQ(switch_->counters().not_for_us, 1u);
  EXPECT_EQ(switch_->counters().cm_bad_qp, 1u);
  EXPECT_EQ(switch_->port_counters(0).rx_dropped, 3u);
}

TEST_F(FrameSwitchTest, ProcessesReachEachOtherThroughTheHostAddressWithoutTheWire) {
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x020010));
  proc_[1].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010020));
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010030));  // to itself
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 0x000777));  // another host
  switch_->Poll();
  EXPECT_EQ(proc_[1].out.size(), 1u);
  EXPECT_EQ(proc_[0].out.size(), 2u);
  EXPECT_EQ(uplink_.out.size(), 1u);
  EXPECT_EQ(switch_->counters().local_frames, 3u);
}

TEST_F(FrameSwitchTest, FramesToAnotherUplinksAddressCrossToItsSwitchNotTheWire) {
  // A second uplink of the same daemon (address Ip(5), its own MAC), with
  // the same two processes attached there (a process has one slot).
  const MacAddress second_mac = {0x02, 0, 0, 0, 0, 0x05};
  QueuePort second_uplink, second_proc[2];
  FrameSwitch::Options o;
  o.mac = second_mac;
  o.gids = {Ip(5)};
  o.uplink = &second_uplink;
  o.pool = pool_.get();
  FrameSwitch second(o);
  ASSERT_TRUE(second.Attach(1, &second_proc[0]).ok());
  ASSERT_TRUE(second.Attach(2, &second_proc[1]).ok());
  switch_->SetSiblings({&second});
  second.SetSiblings({switch_.get()});
  ASSERT_TRUE(switch_->Listen(7000, 2).ok());
  ASSERT_TRUE(second.Listen(7000, 2).ok());

  // Process 1 on the first uplink to process 2's QP at the second's address.
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(5), 0x020010));
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(5), 0x030010));  // nobody's QPN
  switch_->Poll();
  second.Poll();
  EXPECT_TRUE(uplink_.out.empty());
  EXPECT_TRUE(second_uplink.out.empty());
  EXPECT_EQ(second_proc[1].out.size(), 1u);  // its port on the second uplink
  EXPECT_TRUE(proc_[1].out.empty());
  EXPECT_EQ(switch_->counters().cross_frames, 2u);
  EXPECT_EQ(second.counters().unknown_qpn, 1u);
  EXPECT_EQ(switch_->port_counters(1).rx_dropped, 1u);  // the sender's port
  EXPECT_FALSE(switch_->has_link_requests());  // links join processes on one uplink
  EXPECT_FALSE(second.has_link_requests());
  // And back, from the second uplink's address to the first's.
  second_proc[1].in.push_back(Roce(second_mac, Ip(5), second_mac, Ip(1), 0x010020));
  second.Poll();
  switch_->Poll();
  EXPECT_EQ(proc_[0].out.size(), 1u);
  EXPECT_EQ(second.counters().cross_frames, 1u);
  // A REQ for a port nobody listens on is refused back to the caller's
  // port on its own uplink; one for a listener reaches it on the other.
  for (auto& p : proc_) p.Clear();
  for (auto& p : second_proc) p.Clear();
  cm::CmMad mad;
  cm::CmReq req;
  req.local_comm_id = 1u << kSwitchCommIdShift | 5;
  req.service_id = cm::kRdmaIpServiceIdBase | 7001;
  mad.message = req;
  proc_[0].in.push_back(Mad(kHostMac, Ip(1), mad, Ip(5)));
  req.service_id = cm::kRdmaIpServiceIdBase | 7000;
  mad.message = req;
  proc_[0].in.push_back(Mad(kHostMac, Ip(1), mad, Ip(5)));
  switch_->Poll();
  second.Poll();
  ASSERT_EQ(proc_[0].out.size(), 1u);  // the REJ, on the caller's own uplink
  EXPECT_EQ(second.counters().cm_rejects, 1u);
  EXPECT_EQ(second_proc[1].out.size(), 1u);  // the REQ, at the listener
  EXPECT_TRUE(uplink_.out.empty());
  EXPECT_TRUE(second_uplink.out.empty());
  for (auto& p : proc_) p.Clear();
  for (auto& p : second_proc) p.Clear();
}

TEST_F(FrameSwitchTest, ProcessesThatTalkAreAskedToBeLinkedOnce) {
  FrameSwitch::LinkRequest requests[8];
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010030));  // to itself: no pair
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 0x020777));  // another host: no pair
  switch_->Poll();
  EXPECT_FALSE(switch_->has_link_requests());
  // One way only (a process sending to another's QPNs, whatever it does
  // with them) is no reason for a link.
  for (int i = 0; i < 4; ++i) proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x020010));
  switch_->Poll();
  EXPECT_FALSE(switch_->has_link_requests());
  proc_[1].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010020));
  switch_->Poll();
  ASSERT_EQ(switch_->TakeLinkRequests(requests, 8), 1u);
  EXPECT_EQ(requests[0].a, 1u);
  EXPECT_EQ(requests[0].b, 2u);
  // Asked once; again only after one of them left and the slot came back.
  proc_[1].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010020));
  switch_->Poll();
  EXPECT_FALSE(switch_->has_link_requests());
  switch_->Detach(2);
  ASSERT_TRUE(switch_->Attach(2, &proc_[1]).ok());
  proc_[1].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x010020));
  switch_->Poll();
  EXPECT_FALSE(switch_->has_link_requests());  // what slot 2's last process got counts no more
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kHostMac, Ip(1), 0x020010));
  switch_->Poll();
  EXPECT_EQ(switch_->TakeLinkRequests(requests, 8), 1u);
}

TEST_F(FrameSwitchTest, AProcessCannotSpeakAsAnotherAddressMacOrQpn) {
  proc_[0].in.push_back(Roce(kPeerMac, Ip(1), kPeerMac, Ip(2), 5));   // another MAC
  proc_[0].in.push_back(Roce(kHostMac, Ip(7), kPeerMac, Ip(2), 5));   // another IP
  // UD from a QPN of slot 2's lease, and from its own.
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 5, Opcode::kUdSendOnly, 0x020001));
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 5, Opcode::kUdSendOnly, 0x010001));
  // From QP 1 (every process's GSI QP) only CM messages go: 16 bytes are none.
  proc_[0].in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 1, Opcode::kUdSendOnly, 1));
  switch_->Poll();
  EXPECT_EQ(switch_->counters().spoofed, 4u);
  EXPECT_EQ(uplink_.out.size(), 1u);
  EXPECT_EQ(switch_->port_counters(1).rx_dropped, 4u);
}

TEST_F(FrameSwitchTest, ArpForTheHostIsAnsweredAndAnswersReachEveryProcess) {
  uint8_t frame[kMaxNeighborFrame];
  // A peer asks for our address: the switch answers on the uplink.
  uplink_.in.push_back(Raw(frame, BuildArpRequest(frame, kPeerMac, Ip(2), Ip(1))));
  // A process asks for the peer's: out on the uplink; the reply to every process.
  proc_[0].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(2))));
  switch_->Poll();
  ASSERT_EQ(uplink_.out.size(), 2u);
  size_t replies = 0;
  for (rte_mbuf* m : uplink_.out) {
    NeighborMessage msg = ParseNeighborMessage(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
    if (msg.kind == NeighborMessageKind::kArpReply) {
      ++replies;
      EXPECT_EQ(msg.sender_ip, Ip(1));
      EXPECT_EQ(msg.sender_mac, kHostMac);
    }
  }
  EXPECT_EQ(replies, 1u);
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kPeerMac, Ip(2), kHostMac, Ip(1))));
  switch_->Poll();
  EXPECT_EQ(proc_[0].out.size(), 1u);
  EXPECT_EQ(proc_[1].out.size(), 1u);
  // A process may not answer for the host.
  proc_[1].in.push_back(Raw(frame, BuildArpReply(frame, kHostMac, Ip(1), kPeerMac, Ip(2))));
  switch_->Poll();
  EXPECT_EQ(uplink_.out.size(), 2u);
}

// A neighbour learns the asker's MAC from a request (RFC 826, RFC 4861
// 7.2.3): a process's own ARP sender hardware address, NS source
// link-layer option or gratuitous request would tell the LAN that the
// host's address is at another MAC. The switch asks in its own words.
TEST_F(FrameSwitchTest, ProcessNeighbourRequestsAreRebuiltAsTheHosts) {
  const Gid host_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Gid peer_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  const MacAddress poison = {0x02, 0x66, 0x66, 0x66, 0x66, 0x66};
  switch_.reset();
  FrameSwitch::Options o;
  o.mac = kHostMac;
  o.gids = {Ip(1), Ip(3), host_ip6};
  o.uplink = &uplink_;
  o.pool = pool_.get();
  switch_ = std::make_unique<FrameSwitch>(o);
  ASSERT_TRUE(switch_->Attach(1, &proc_[0]).ok());
  ASSERT_TRUE(switch_->Attach(2, &proc_[1]).ok());
  uint8_t frame[kMaxNeighborFrame];
  // An ARP request whose sender hardware address (byte 22 on) is not ours.
  size_t len = BuildArpRequest(frame, kHostMac, Ip(1), Ip(2));
  std::memcpy(frame + 22, poison.data(), 6);
  proc_[0].in.push_back(Raw(frame, len));
  // An NS whose source link-layer option (its MAC at byte 14 + 40 + 24 + 2)
  // is not ours, with a valid checksum.
  len = BuildNeighborSolicitation(frame, kHostMac, host_ip6, peer_ip6);
  constexpr size_t kIcmp = 14 + 40;
  std::memcpy(frame + kIcmp + sizeof(NdMessage) + 2, poison.data(), 6);
  frame[kIcmp + 2] = frame[kIcmp + 3] = 0;
  transport::StoreBe16(frame + kIcmp + 2, Icmpv6Checksum(frame + 22, frame + 38, frame + kIcmp,
                                                          sizeof(NdMessage) + sizeof(NdLinkLayerOption)));
  {
    const NeighborMessage poisoned = ParseNeighborMessage(frame, len);
    ASSERT_EQ(poisoned.kind, NeighborMessageKind::kNeighborSolicitation);
    ASSERT_EQ(poisoned.sender_mac, poison);
  }
  proc_[0].in.push_back(Raw(frame, len));
  // A gratuitous request (the sender's own address) and one for a
  // multicast address: refused.
  proc_[1].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(1))));
  const uint8_t group[4] = {224, 0, 0, 1};
  proc_[1].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), transport::Ipv4MappedGid(group))));
  // Another of the host's addresses: answered by the switch, not asked.
  len = BuildArpRequest(frame, kHostMac, Ip(1), Ip(3));
  std::memcpy(frame + 22, poison.data(), 6);
  proc_[1].in.push_back(Raw(frame, len));
  switch_->Poll();

  ASSERT_EQ(uplink_.out.size(), 2u);
  for (rte_mbuf* m : uplink_.out) {
    const NeighborMessage msg = ParseNeighborMessage(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
    const bool arp = msg.kind == NeighborMessageKind::kArpRequest;
    EXPECT_TRUE(arp || msg.kind == NeighborMessageKind::kNeighborSolicitation);
    EXPECT_EQ(msg.sender_mac, kHostMac);
    EXPECT_EQ(msg.eth_src, kHostMac);
    EXPECT_EQ(msg.sender_ip, arp ? Ip(1) : host_ip6);
    EXPECT_EQ(msg.target_ip, arp ? Ip(2) : peer_ip6);
    EXPECT_NE(msg.target_ip, msg.sender_ip) << "no gratuitous request";
  }
  ASSERT_EQ(proc_[1].out.size(), 1u);
  const NeighborMessage local = ParseNeighborMessage(rte_pktmbuf_mtod(proc_[1].out[0], const uint8_t*),
                                                     rte_pktmbuf_data_len(proc_[1].out[0]));
  EXPECT_EQ(local.kind, NeighborMessageKind::kArpReply);
  EXPECT_EQ(local.sender_ip, Ip(3));
  EXPECT_EQ(local.sender_mac, kHostMac);
  EXPECT_TRUE(proc_[0].out.empty());
  EXPECT_EQ(switch_->counters().neighbor_rebuilt, 2u);
  EXPECT_EQ(switch_->counters().neighbor_refused, 2u);
  EXPECT_EQ(switch_->port_counters(2).rx_dropped, 2u);
}

// A kernel uplink: the kernel answers ARP/ND for the host and gets the
// answers to requests, so the switch answers nothing from the wire and hands
// the processes' requests to the daemon as questions.
TEST_F(FrameSwitchTest, KernelModeTurnsNeighbourRequestsIntoQuestionsForTheDaemon) {
  switch_.reset();
  FrameSwitch::Options o;
  o.mac = kHostMac;
  o.gids = {Ip(1)};
  o.uplink = &uplink_;
  o.pool = pool_.get();
  o.kernel_neighbors = true;
  switch_ = std::make_unique<FrameSwitch>(o);
  ASSERT_TRUE(switch_->Attach(1, &proc_[0]).ok());
  ASSERT_TRUE(switch_->Attach(2, &proc_[1]).ok());
  uint8_t frame[kMaxNeighborFrame];
  // From the wire: a request for the host's address and a reply; neither is
  // answered nor copied (the kernel's).
  uplink_.in.push_back(Raw(frame, BuildArpRequest(frame, kPeerMac, Ip(2), Ip(1))));
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kPeerMac, Ip(2), kHostMac, Ip(1))));
  // Process 2 asks for the peer, process 1 for the host itself.
  proc_[1].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(2))));
  proc_[0].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(1))));
  switch_->Poll();
  EXPECT_TRUE(uplink_.out.empty());
  EXPECT_TRUE(proc_[1].out.empty());
  // The host's own address is answered at once, as the uplink's MAC.
  ASSERT_EQ(proc_[0].out.size(), 1u);
  NeighborMessage own = ParseNeighborMessage(rte_pktmbuf_mtod(proc_[0].out[0], const uint8_t*),
                                             rte_pktmbuf_data_len(proc_[0].out[0]));
  EXPECT_EQ(own.kind, NeighborMessageKind::kArpReply);
  EXPECT_EQ(own.sender_mac, kHostMac);
  ASSERT_TRUE(switch_->has_neighbor_questions());
  NeighborQuestion q[FrameSwitch::kQuestions];
  ASSERT_EQ(switch_->TakeNeighborQuestions(q, FrameSwitch::kQuestions), 1u);
  EXPECT_FALSE(switch_->has_neighbor_questions());
  EXPECT_EQ(q[0].slot, 2u);
  EXPECT_FALSE(q[0].ipv6);
  EXPECT_EQ(q[0].target, Ip(2));
  // The daemon's answer (from the kernel's table) reaches only the asker.
  switch_->AnswerNeighborQuestion(q[0], kPeerMac);
  switch_->Poll();
  ASSERT_EQ(proc_[1].out.size(), 1u);
  NeighborMessage answer = ParseNeighborMessage(rte_pktmbuf_mtod(proc_[1].out[0], const uint8_t*),
                                                rte_pktmbuf_data_len(proc_[1].out[0]));
  EXPECT_EQ(answer.kind, NeighborMessageKind::kArpReply);
  EXPECT_EQ(answer.sender_ip, Ip(2));
  EXPECT_EQ(answer.sender_mac, kPeerMac);
  EXPECT_EQ(proc_[0].out.size(), 1u);
  EXPECT_TRUE(uplink_.out.empty());
  // One process's flood takes only its share of the queue (the rest is
  // counted and dropped), and a question of another process still gets in.
  for (unsigned i = 0; i < FrameSwitch::kQuestions + 10; ++i) {
    proc_[0].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(static_cast<uint8_t>(10 + i)))));
  }
  for (int i = 0; i < 8; ++i) switch_->Poll();
  proc_[1].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(200))));
  switch_->Poll();
  EXPECT_EQ(switch_->counters().neighbor_over_quota, FrameSwitch::kQuestions + 10 - FrameSwitch::kQuestionsPerProcess);
  EXPECT_EQ(switch_->counters().neighbor_questions_dropped, 0u);
  ASSERT_EQ(switch_->TakeNeighborQuestions(q, FrameSwitch::kQuestions), FrameSwitch::kQuestionsPerProcess + 1);
  EXPECT_EQ(q[FrameSwitch::kQuestionsPerProcess].slot, 2u);
  EXPECT_EQ(q[FrameSwitch::kQuestionsPerProcess].target, Ip(200));
  // Taken questions give the share back.
  proc_[0].in.push_back(Raw(frame, BuildArpRequest(frame, kHostMac, Ip(1), Ip(201))));
  switch_->Poll();
  ASSERT_EQ(switch_->TakeNeighborQuestions(q, FrameSwitch::kQuestions), 1u);
  EXPECT_EQ(q[0].slot, 1u);
  // An answer for a process that left goes nowhere.
  q[0].slot = 2;
  switch_->Detach(2);
  switch_->AnswerNeighborQuestion(q[0], kPeerMac);
  switch_->Poll();
  EXPECT_EQ(proc_[1].out.size(), 1u);
}

TEST_F(FrameSwitchTest, CmRequestsGoToTheListenerAndAnswersToTheirCommunicationId) {
  ASSERT_TRUE(switch_->Listen(7174, 2).ok());
  EXPECT_EQ(switch_->Listen(7174, 1).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(switch_->listener(7174), 2u);
  cm::CmMad req_mad;
  cm::CmReq req;
  req.local_comm_id = 0x01345678;  // slot 1's: the process on slot 1 sends it too
  req.service_id = cm::IpServiceId(7174);
  req.local_qpn = 0x777;
  req.starting_psn = 1;
  req.path_mtu = 3;  // IBV_MTU_1024
  req_mad.message = req;
  uplink_.in.push_back(Mad(kPeerMac, Ip(2), req_mad));        // from another host
  proc_[0].in.push_back(Mad(kHostMac, Ip(1), req_mad));       // from a process on this host
  req.service_id = cm::IpServiceId(7175);
  req_mad.message = req;
  uplink_.in.push_back(Mad(kPeerMac, Ip(2), req_mad));        // nobody listens
  cm::CmMad rep_mad;
  cm::CmRep rep;
  rep.local_comm_id = 0x02000001;
  rep.remote_comm_id = 0x01000042;  // slot 1's
  rep.local_qpn = 0x020005;
  rep_mad.message = rep;
  proc_[1].in.push_back(Mad(kHostMac, Ip(1), rep_mad));
  rep.remote_comm_id = 0x07000042;  // nobody's
  rep_mad.message = rep;
  uplink_.in.push_back(Mad(kPeerMac, Ip(2), rep_mad));
  switch_->Poll();
  EXPECT_EQ(proc_[1].out.size(), 2u) << "both REQs reach the listener";
  EXPECT_EQ(proc_[0].out.size(), 1u) << "the REP reaches the caller";
  // The REQ nobody listens for is rejected to its caller, on the uplink.
  ASSERT_EQ(uplink_.out.size(), 1u);
  {
    rte_mbuf* m = uplink_.out[0];
    const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
    EXPECT_EQ(0, std::memcmp(p, kPeerMac.data(), 6));
    cm::CmMad answer;
    const size_t mad_at = 14 + 20 + 8 + 12 + 8;
    ASSERT_EQ(cm::DecodeCmMad(p + mad_at, rte_pktmbuf_data_len(m) - mad_at - 4, &answer),
              cm::CmMadError::kOk);
    const auto* rej = std::get_if<cm::CmRej>(&answer.message);
    ASSERT_NE(rej, nullptr);
    EXPECT_EQ(rej->reason, cm::kRejInvalidServiceId);
    EXPECT_EQ(rej->remote_comm_id, 0x01345678u);
  }
  EXPECT_EQ(switch_->counters().cm_rejects, 1u);
  EXPECT_EQ(switch_->counters().cm_routed, 3u);
  // Each process's CM messages by kind (REQ 0, REP 3): what it sent that
  // passed, what was routed to it.
  const std::array<uint64_t, kSwitchCmKinds> one_req = {1, 0, 0, 0, 0, 0, 0};
  const std::array<uint64_t, kSwitchCmKinds> two_reqs = {2, 0, 0, 0, 0, 0, 0};
  const std::array<uint64_t, kSwitchCmKinds> one_rep = {0, 0, 0, 1, 0, 0, 0};
  EXPECT_EQ(switch_->port_counters(1).cm_sent, one_req);
  EXPECT_EQ(switch_->port_counters(1).cm_received, one_rep);
  EXPECT_EQ(switch_->port_counters(2).cm_sent, one_rep);
  EXPECT_EQ(switch_->port_counters(2).cm_received, two_reqs);
  EXPECT_STREQ(SwitchCmKindName(3), "rep");
  EXPECT_STREQ(SwitchCmKindName(6), "drep");
  EXPECT_EQ(switch_->counters().cm_no_listener, 1u);
  EXPECT_EQ(switch_->counters().cm_unrouted, 1u);
  // A process may not speak for another's connection: slot 2 sending a DREQ
  // with slot 1's communication ID as its own is dropped.
  cm::CmMad dreq_mad;
  cm::CmDreq dreq;
  dreq.local_comm_id = 0x01000042;
  dreq.remote_comm_id = 0x02000001;
  dreq_mad.message = dreq;
  proc_[1].in.push_back(Mad(kHostMac, Ip(1), dreq_mad));
  const uint64_t spoofed = switch_->counters().spoofed;
  switch_->Poll();
  EXPECT_EQ(switch_->counters().spoofed, spoofed + 1);
  EXPECT_EQ(proc_[1].out.size(), 2u) << "the forged DREQ reached nobody";
  EXPECT_EQ(switch_->port_counters(2).cm_sent, one_rep) << "nor counts as sent";
  // Nor reject it: a REJ with no sender ID is nobody's (uroce's CM puts its
  // own in every REJ), and a CM MAD from a leased QPN, or from any QP but
  // QP 1 on the wire, is no CM message.
  cm::CmMad rej_mad;
  cm::CmRej rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = 0x01000042;
  rej_mad.message = rej;
  proc_[1].in.push_back(Mad(kHostMac, Ip(1), rej_mad));
  rej.local_comm_id = 0x02000077;  // slot 2's own, but sent from a leased QPN
  rej_mad.message = rej;
  proc_[1].in.push_back(Mad(kHostMac, Ip(1), rej_mad, Ip(1), 0x020001));
  uplink_.in.push_back(Mad(kPeerMac, Ip(2), rej_mad, Ip(1), 5));
  const size_t caller_had = proc_[0].out.size();
  switch_->Poll();
  EXPECT_EQ(switch_->counters().spoofed, spoofed + 3);
  EXPECT_EQ(switch_->counters().cm_bad_qp, 1u);
  EXPECT_EQ(proc_[0].out.size(), caller_had) << "a forged REJ reached the caller";
  // slot 2's REJ with its own ID, from QP 1, is routed.
  proc_[1].in.push_back(Mad(kHostMac, Ip(1), rej_mad));
  switch_->Poll();
  EXPECT_EQ(proc_[0].out.size(), caller_had + 1);
  // A caller that gives up on its REQ before any answer names only its own
  // ID (remote ID 0): the REJ goes where that REQ went, the listener on slot
  // 2, whether the caller is a process here (slot 1) or another host; a
  // REJ of a REQ the switch never routed goes nowhere.
  cm::CmMad abandon_mad;
  cm::CmRej abandon;
  abandon.local_comm_id = 0x01345678;  // the REQs above
  abandon.remote_comm_id = 0;
  abandon.message_rejected = cm::CmMessageKind::kReq;
  abandon.reason = cm::kRejTimeout;
  abandon_mad.message = abandon;
  proc_[0].in.push_back(Mad(kHostMac, Ip(1), abandon_mad));
  uplink_.in.push_back(Mad(kPeerMac, Ip(2), abandon_mad));
  abandon.local_comm_id = 0x01345679;  // never sent a REQ
  abandon_mad.message = abandon;
  proc_[0].in.push_back(Mad(kHostMac, Ip(1), abandon_mad));
  uplink_.in.push_back(Mad(kPeerMac, Ip(4), abandon_mad));
  const size_t listener_had = proc_[1].out.size();
  const uint64_t unrouted = switch_->counters().cm_unrouted;
  switch_->Poll();
  EXPECT_EQ(proc_[1].out.size(), listener_had + 2) << "both callers' REJs reach the listener";
  EXPECT_EQ(switch_->counters().cm_unrouted, unrouted + 2);
  // A process that goes takes its ports with it.
  switch_->Detach(2);
  EXPECT_EQ(switch_->listener(7174), 0u);
  ASSERT_TRUE(switch_->Listen(7174, 1).ok());
  switch_->Unlisten(7174, 2);
  EXPECT_EQ(switch_->listener(7174), 1u) << "only the listener itself stops listening";
}

// Nothing from the wire speaks as the host: attached processes' engines run
// with loopback off, so only the switch can refuse a frame that claims the
// host's own address (this uplink's or a sibling's), or a source address or
// MAC no host has (RFC 1122 3.2.1.3, RFC 4291). Our own frames seen again
// on an af_packet port are not for us, not attacks.
TEST_F(FrameSwitchTest, FramesFromTheWireCannotClaimTheHostsAddress) {
  const Gid host_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Gid peer_ip6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  switch_.reset();
  FrameSwitch::Options o;
  o.mac = kHostMac;
  o.gids = {Ip(1), host_ip6};
  o.uplink = &uplink_;
  o.pool = pool_.get();
  switch_ = std::make_unique<FrameSwitch>(o);
  ASSERT_TRUE(switch_->Attach(1, &proc_[0]).ok());
  ASSERT_TRUE(switch_->Attach(2, &proc_[1]).ok());
  // A second uplink of the same daemon, address Ip(5).
  QueuePort second_uplink;
  o.mac = {0x02, 0, 0, 0, 0, 0x05};
  o.gids = {Ip(5)};
  o.uplink = &second_uplink;
  FrameSwitch second(o);
  switch_->SetSiblings({&second});
  second.SetSiblings({switch_.get()});

  auto v4 = [](uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    const uint8_t bytes[4] = {a, b, c, d};
    return transport::Ipv4MappedGid(bytes);
  };
  auto roce6 = [&](const MacAddress& smac, const Gid& sip, const Gid& dip) {
    transport::PacketFields f;
    f.src_mac = smac;
    f.dst_mac = kHostMac;
    f.ip_version = transport::IpVersion::kIpv6;
    f.src_gid = sip;
    f.dst_gid = dip;
    f.udp_src_port = 0xC000;
    f.bth.opcode = static_cast<uint8_t>(Opcode::kRcSendOnly);
    f.bth.dest_qp = 0x010005;
    f.payload_length = 16;
    const uint8_t payload[16] = {};
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    EXPECT_EQ(transport::BuildPacket(f, payload, m), transport::BuildError::kOk);
    return m;
  };
  const uint32_t victim = 0x010005;  // a QPN of the process on slot 1
  // The host's own addresses as the source: this uplink's, IPv4 and IPv6,
  // and the second uplink's.
  uplink_.in.push_back(Roce(kPeerMac, Ip(1), kHostMac, Ip(1), victim));
  uplink_.in.push_back(roce6(kPeerMac, host_ip6, host_ip6));
  uplink_.in.push_back(Roce(kPeerMac, Ip(5), kHostMac, Ip(1), victim));
  // Sources no host sends from.
  uplink_.in.push_back(Roce(kPeerMac, v4(224, 0, 0, 1), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Roce(kPeerMac, v4(0, 0, 0, 0), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Roce(kPeerMac, v4(127, 0, 0, 1), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Roce(kPeerMac, v4(255, 255, 255, 255), kHostMac, Ip(1), victim));
  const Gid all_nodes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Gid unspecified = {};
  const Gid loopback6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  uplink_.in.push_back(roce6(kPeerMac, all_nodes, host_ip6));
  uplink_.in.push_back(roce6(kPeerMac, unspecified, host_ip6));
  uplink_.in.push_back(roce6(kPeerMac, loopback6, host_ip6));
  uplink_.in.push_back(roce6(kPeerMac, Ip(2), host_ip6));  // IPv4-mapped in an IPv6 header
  // Ethernet sources no station has, and our own.
  const MacAddress broadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  const MacAddress multicast = {0x01, 0x00, 0x5e, 0, 0, 1};
  uplink_.in.push_back(Roce(broadcast, Ip(2), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Roce(multicast, Ip(2), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Roce(kHostMac, Ip(2), kHostMac, Ip(1), victim));
  // Answers that claim the host's addresses: ARP replies for Ip(1) and for
  // the second uplink's Ip(5), an NA for the IPv6 address.
  uint8_t frame[kMaxNeighborFrame];
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kPeerMac, Ip(1), kHostMac, Ip(2))));
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kPeerMac, Ip(5), kHostMac, Ip(2))));
  uplink_.in.push_back(Raw(frame, BuildNeighborAdvertisement(frame, kPeerMac, host_ip6, kHostMac, peer_ip6)));
  // Our own frames as an af_packet port shows them again: to another host.
  uplink_.in.push_back(Roce(kHostMac, Ip(1), kPeerMac, Ip(2), 0x000777));
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kHostMac, Ip(1), kPeerMac, Ip(2))));
  // A peer's honest frame and answer still pass.
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), victim));
  uplink_.in.push_back(Raw(frame, BuildArpReply(frame, kPeerMac, Ip(2), kHostMac, Ip(1))));
  switch_->Poll();
  EXPECT_EQ(proc_[0].out.size(), 2u) << "only the honest frame and the honest answer reach the process";
  EXPECT_EQ(proc_[1].out.size(), 1u) << "only the honest answer is copied";
  EXPECT_EQ(switch_->counters().wire_own_source, 6u);
  EXPECT_EQ(switch_->counters().wire_bad_source, 11u);
  EXPECT_EQ(switch_->counters().not_for_us, 2u);
  EXPECT_EQ(switch_->port_counters(0).rx_dropped, 19u);
  EXPECT_TRUE(uplink_.out.empty());
  EXPECT_TRUE(second_uplink.out.empty());
}

TEST_F(FrameSwitchTest, MalformedFramesAreCountedAndFreed) {
  const uint8_t tiny[10] = {};
  uplink_.in.push_back(Raw(tiny, sizeof(tiny)));
  rte_mbuf* cut = Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x010005);
  rte_pktmbuf_trim(cut, rte_pktmbuf_pkt_len(cut) - 14 - 20 - 8 - 4);  // BTH cut short
  uplink_.in.push_back(cut);
  switch_->Poll();
  EXPECT_EQ(switch_->counters().malformed, 2u);
  EXPECT_TRUE(proc_[0].out.empty());
}

TEST_F(FrameSwitchTest, DetachedSlotsReceiveNothingAndAFullPortDrops) {
  switch_->Detach(2);
  EXPECT_FALSE(switch_->attached(2));
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x020001));
  proc_[0].tx_room = 0;
  uplink_.in.push_back(Roce(kPeerMac, Ip(2), kHostMac, Ip(1), 0x010001));
  switch_->Poll();
  EXPECT_EQ(switch_->counters().unknown_qpn, 1u);
  EXPECT_EQ(switch_->port_counters(1).tx_full, 1u);
  EXPECT_TRUE(proc_[0].out.empty());
  EXPECT_EQ(switch_->Attach(1, &proc_[1]).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(switch_->Attach(0, &proc_[1]).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(switch_->Attach(255, &proc_[1]).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uroce::host
