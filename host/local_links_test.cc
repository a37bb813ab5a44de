// A process's port to the daemon with direct links to other processes
// (host/local_links.h): what goes where, what a linked process may send us,
// back-pressure, links coming and going, and every buffer back.
#include "host/local_links.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <vector>

#include "pmd/frame_test_util.h"
#include "pmd/mempool.h"
#include "transport/link_frame.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"
#include "transport/pull_descriptor.h"

namespace uroce::host {

using pmd::AvailableMbufs;
using pmd::CreatePktPool;
using pmd::MempoolPtr;

namespace {

using transport::Gid;
using transport::MacAddress;
using transport::Opcode;

constexpr unsigned kPoolSize = 2047;

using pmd::testing::Ip;
using pmd::testing::QueuePort;

const MacAddress kHostMac = {0x02, 0, 0, 0, 0, 0x01};
const MacAddress kOtherMac = {0x02, 0, 0, 0, 0, 0x02};
const Gid kHostV6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

uint32_t Qpn(uint32_t slot, uint32_t n) { return (slot << 16) + n; }

class LocalLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = CreatePktPool({.name = "links_test", .mbufs = kPoolSize, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    a_ = Make(3, &daemon_a_);
    b_ = Make(7, &daemon_b_);
  }
  void TearDown() override {
    for (rte_mbuf* m : received_) rte_pktmbuf_free(m);
    a_.reset();
    b_.reset();
    daemon_a_.Clear();
    daemon_b_.Clear();
    EXPECT_EQ(AvailableMbufs(pool_.get()), kPoolSize) << "a buffer leaked";
  }
  std::unique_ptr<LocalLinks> Make(uint32_t slot, QueuePort* daemon) {
    LocalLinks::Options o;
    o.daemon = daemon;
    o.pool = pool_.get();
    o.own_slot = slot;
    o.mac = kHostMac;
    o.gids = {Ip(1), kHostV6};
    return std::make_unique<LocalLinks>(o);
  }
  // Links a (slot 3) and b (slot 7) as the daemon does: one file, both ends.
  void Link(uint32_t slots = 64, uint32_t stage_chunks = 0) {
    auto file = ShmChannel::Create(slots, 1518, stage_chunks, kLinkAckEntries);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(a_->Add(7, (*file)->fd()).ok());
    ASSERT_TRUE(b_->Add(3, (*file)->fd()).ok());
    file_ = std::move(*file);
  }
  rte_mbuf* Roce(uint32_t qpn, Opcode op = Opcode::kRcSendOnly, uint32_t src_qpn = 0, const Gid& sip = Ip(1),
                 const Gid& dip = Ip(1), const MacAddress& smac = kHostMac) {
    rte_mbuf* m = pmd::testing::RoceFrame(pool_.get(), smac, sip, kHostMac, dip, qpn, op, src_qpn);
    EXPECT_NE(m, nullptr);
    return m;
  }
  uint16_t Send(LocalLinks* links, std::vector<rte_mbuf*> frames) {
    const uint16_t sent = links->TxBurst(frames.data(), static_cast<uint16_t>(frames.size()));
    for (size_t i = sent; i < frames.size(); ++i) rte_pktmbuf_free(frames[i]);
    return sent;
  }
  // Everything `links` receives now (kept, freed at teardown).
  size_t Receive(LocalLinks* links) {
    rte_mbuf* burst[32];
    size_t total = 0;
    for (uint16_t n; (n = links->RxBurst(burst, 32)) != 0; total += n) received_.insert(received_.end(), burst, burst + n);
    return total;
  }

  MempoolPtr pool_;
  QueuePort daemon_a_, daemon_b_;
  std::unique_ptr<LocalLinks> a_, b_;
  std::unique_ptr<ShmChannel> file_;
  std::vector<rte_mbuf*> received_;
};

TEST_F(LocalLinksTest, WithoutALinkEverythingGoesToTheDaemonButOurOwnQpsLoop) {
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5)), Roce(1, Opcode::kUdSendOnly, 1), Roce(Qpn(3, 9))}), 3);
  EXPECT_EQ(daemon_a_.out.size(), 2u);  // to slot 7 (no link yet) and the CM's QP 1
  EXPECT_EQ(Receive(a_.get()), 1u);     // QP 3:9 is ours: round the loop
  EXPECT_EQ(a_->counters().loop_frames, 1u);
  EXPECT_EQ(a_->counters().daemon_tx_frames, 2u);
}

TEST_F(LocalLinksTest, LinkedProcessesTalkStraightAndTheDaemonKeepsTheRest) {
  Link();
  const Gid other_host = Ip(9);
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5)), Roce(Qpn(7, 6)), Roce(1, Opcode::kUdSendOnly, 1),
                            Roce(Qpn(7, 5), Opcode::kRcSendOnly, 0, Ip(1), other_host)}),
            4);
  // QP 1 and the frame to another host went to the daemon.
  EXPECT_EQ(daemon_a_.out.size(), 2u);
  EXPECT_EQ(Receive(b_.get()), 2u);
  EXPECT_EQ(b_->counters().link_rx_frames, 2u);
  // And back the other way.
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 1))}), 1);
  EXPECT_EQ(Receive(a_.get()), 1u);
  EXPECT_EQ(a_->counters().links, 1u);
}

TEST_F(LocalLinksTest, FramesOfEveryShapeGoWhereTheirDestinationSays) {
  Link();
  // Route reads the common shapes at fixed offsets and the rest through the
  // parser: IPv6, a VLAN tag (nobody's here: the daemon), an IPv4 header
  // with options, a frame too short for its headers.
  auto shaped = [this](uint32_t qpn, const Gid& ip, bool vlan) {
    transport::PacketFields f;
    f.src_mac = kHostMac;
    f.dst_mac = kHostMac;
    f.src_gid = ip;
    f.dst_gid = ip;
    f.ip_version = transport::IsIpv4MappedGid(ip) ? transport::IpVersion::kIpv4 : transport::IpVersion::kIpv6;
    f.has_vlan = vlan;
    f.vlan_tci = vlan ? 5 : 0;
    f.udp_src_port = 0xC000;
    f.bth.opcode = static_cast<uint8_t>(Opcode::kRcSendOnly);
    f.bth.dest_qp = qpn;
    f.payload_length = 16;
    const uint8_t payload[16] = {};
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    EXPECT_EQ(transport::BuildPacket(f, payload, m), transport::BuildError::kOk);
    return m;
  };
  rte_mbuf* options = Roce(Qpn(7, 8));
  {
    // IHL 6: four bytes of options (a NOP and end-of-list padding) between
    // the IPv4 header and UDP, the total length made right (the header
    // checksum is the engine's to check, not the link's).
    uint8_t* f = rte_pktmbuf_mtod(options, uint8_t*);
    const uint16_t length = rte_pktmbuf_data_len(options);
    ASSERT_NE(rte_pktmbuf_append(options, 4), nullptr);
    std::memmove(f + 14 + 24, f + 14 + 20, length - 14 - 20);
    std::memset(f + 14 + 20, 0, 4);
    f[14 + 20] = 1;
    f[14] = 0x46;
    const uint16_t total = static_cast<uint16_t>((f[16] << 8 | f[17]) + 4);
    f[16] = static_cast<uint8_t>(total >> 8);
    f[17] = static_cast<uint8_t>(total);
  }
  rte_mbuf* short_frame = Roce(Qpn(7, 9));
  rte_pktmbuf_trim(short_frame, rte_pktmbuf_data_len(short_frame) - 40);
  EXPECT_EQ(Send(a_.get(), {shaped(Qpn(7, 5), kHostV6, false), shaped(Qpn(7, 6), Ip(1), true),
                            shaped(Qpn(7, 7), kHostV6, true), options, short_frame}),
            5);
  // The tagged and short frames went to the daemon; the IPv6 frame and the
  // one with options over the link (where the parser, with the ICRC left
  // for the engine, takes both).
  EXPECT_EQ(daemon_a_.out.size(), 3u);
  EXPECT_EQ(a_->counters().link_tx_frames, 2u);
  EXPECT_EQ(Receive(b_.get()), 2u);
}

TEST_F(LocalLinksTest, ANewLinkWaitsUntilTheSwitchTookWhatWentBefore) {
  // a's port to the daemon is a real channel here: the link must not carry
  // frames to b while frames to b still wait in it for the switch, or they
  // would overtake them.
  auto port = ShmChannel::Create(64, 1518);
  ASSERT_TRUE(port.ok());
  auto process_side = ShmChannel::Map((*port)->fd());
  ASSERT_TRUE(process_side.ok());
  ShmPortIo port_io(process_side->get(), pool_.get());
  LocalLinks::Options o;
  o.daemon = &port_io;
  o.daemon_channel = process_side->get();
  o.pool = pool_.get();
  o.own_slot = 3;
  o.mac = kHostMac;
  o.gids = {Ip(1)};
  a_ = std::make_unique<LocalLinks>(o);
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);  // before the link: to the switch
  Link();
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);  // the switch has not taken the first yet
  EXPECT_EQ(Receive(b_.get()), 0u);
  EXPECT_EQ(a_->counters().daemon_tx_frames, 2u);
  // The switch takes both (and passes them on); from now on the link.
  rte_mbuf* taken[4];
  EXPECT_EQ((*port)->Receive(taken, 4, pool_.get()), 2);
  rte_pktmbuf_free_bulk(taken, 2);
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  // And stays on it, whatever waits for the switch (a CM MAD here).
  EXPECT_EQ(Send(a_.get(), {Roce(1, Opcode::kUdSendOnly, 1), Roce(Qpn(7, 5))}), 2);
  EXPECT_EQ(Receive(b_.get()), 2u);
  EXPECT_EQ(a_->counters().link_tx_frames, 2u);
  a_.reset();  // before the channel it sends on
}

TEST_F(LocalLinksTest, ALinkedProcessMaySendOnlyAsTheHostToOurQps) {
  Link();
  // Written straight into the link as a hostile process would (its own
  // LocalLinks would route none of these there).
  std::vector<rte_mbuf*> hostile = {
      Roce(Qpn(3, 1), Opcode::kRcSendOnly, 0, Ip(9)),                     // as another host
      Roce(Qpn(3, 1), Opcode::kRcSendOnly, 0, Ip(1), Ip(1), kOtherMac),   // another MAC
      Roce(Qpn(5, 1)),                                                    // not our QPN
      Roce(1, Opcode::kUdSendOnly, 1),                                    // QP 1: the daemon's to route
      Roce(Qpn(3, 1), Opcode::kUdSendOnly, Qpn(9, 1)),                    // UD from another's lease
      Roce(Qpn(3, 1), Opcode::kUdSendOnly, Qpn(7, 1)),                    // fine
  };
  // a (slot 3) maps the link as its kDaemon side: slot 7 writes the other ring.
  auto as_b = ShmChannel::Map(file_->fd(), ShmChannel::Side::kProcess);
  ASSERT_TRUE(as_b.ok());
  ASSERT_EQ((*as_b)->Send(hostile.data(), static_cast<uint16_t>(hostile.size())), hostile.size());
  EXPECT_EQ(Receive(a_.get()), 1u);
  EXPECT_EQ(a_->counters().rx_refused, 5u);
}

TEST_F(LocalLinksTest, ConnectedFramesCrossALinkInLinkForm) {
  Link();
  // Not before the link carries frames (it waits for the switch to take
  // what went before): until then they are built whole.
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(7, 5), Ip(1)));
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5)), Roce(Qpn(7, 6), Opcode::kUdSendOnly, Qpn(3, 2))}), 2);
  EXPECT_TRUE(a_->LinkFrameTo(Qpn(7, 5), Ip(1)));
  EXPECT_TRUE(a_->LinkFrameTo(Qpn(7, 5), kHostV6));
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(7, 5), Ip(9)));  // slot 7 of another host: through the daemon
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(3, 5), Ip(1)));  // ours: the loop
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(9, 5), Ip(1)));  // no link
  EXPECT_FALSE(a_->LinkFrameTo(1, Ip(1)));
  ASSERT_EQ(Receive(b_.get()), 2u);
  // The RC SEND in link form, from the link it came by; UD as a wire frame.
  EXPECT_TRUE(b_->LinkFrame(received_[0]));
  EXPECT_NE(b_->LinkSource(received_[0]), 0u);
  transport::PacketView view;
  ASSERT_EQ(transport::ParseLinkFrame(received_[0], &view), transport::ParseError::kOk);
  EXPECT_EQ(view.fields.bth.dest_qp, Qpn(7, 5));
  EXPECT_EQ(view.fields.src_gid, Ip(1));
  EXPECT_FALSE(b_->LinkFrame(received_[1]));
  EXPECT_NE(b_->LinkSource(received_[1]), 0u);
  EXPECT_EQ(transport::ParsePacket(received_[1], transport::ParseOptions{}, &view), transport::ParseError::kOk);
  // Frames from the daemon are never in link form.
  daemon_b_.in.push_back(Roce(Qpn(7, 5)));
  ASSERT_EQ(Receive(b_.get()), 1u);
  EXPECT_FALSE(b_->LinkFrame(received_[2]));
  EXPECT_EQ(b_->LinkSource(received_[2]), 0u);
  // A closed link takes none.
  file_->MarkClosed();
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(7, 5), Ip(1)));
}

TEST_F(LocalLinksTest, AFrameBuiltWithoutItsIcrcThatLeavesInWireFormGetsIt) {
  Link();
  auto without_icrc = [this](uint32_t qpn) {
    rte_mbuf* m = Roce(qpn);
    std::memset(rte_pktmbuf_mtod_offset(m, uint8_t*, rte_pktmbuf_data_len(m) - 4), 0, 4);
    m->hash.usr = transport::kIcrcLeftOut;
    return m;
  };
  // Built for the link, which closed before it was sent: to the daemon,
  // whole. And one to our own QP (round the loop).
  rte_mbuf* late = without_icrc(Qpn(7, 5));
  file_->MarkClosed();
  EXPECT_EQ(Send(a_.get(), {late, without_icrc(Qpn(3, 5))}), 2);
  ASSERT_EQ(daemon_a_.out.size(), 1u);
  transport::PacketView view;
  EXPECT_EQ(transport::ParsePacket(daemon_a_.out[0], transport::ParseOptions{}, &view), transport::ParseError::kOk);
  ASSERT_EQ(Receive(a_.get()), 1u);
  EXPECT_EQ(transport::ParsePacket(received_[0], transport::ParseOptions{}, &view), transport::ParseError::kOk);
}

TEST_F(LocalLinksTest, WithoutTheLinkFormFramesCrossALinkAsTheyAre) {
  LocalLinks::Options o;
  o.daemon = &daemon_a_;
  o.pool = pool_.get();
  o.own_slot = 3;
  o.mac = kHostMac;
  o.gids = {Ip(1), kHostV6};
  o.link_frames = false;  // [impair] corrupt: only an ICRC catches the damage
  a_ = std::make_unique<LocalLinks>(o);
  Link();
  EXPECT_FALSE(a_->LinkFrameTo(Qpn(7, 5), Ip(1)));
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  EXPECT_FALSE(b_->LinkFrame(received_[0]));
  transport::PacketView view;
  EXPECT_EQ(transport::ParsePacket(received_[0], transport::ParseOptions{}, &view), transport::ParseError::kOk);
}

TEST_F(LocalLinksTest, ALinkedProcessMaySendInLinkFormOnlyAsTheHostToOurQps) {
  Link();
  auto link_form = [this](rte_mbuf* wire) {
    std::vector<uint8_t> bytes(rte_pktmbuf_data_len(wire));
    bytes.resize(transport::WriteLinkFrame(rte_pktmbuf_mtod(wire, const uint8_t*), rte_pktmbuf_data_len(wire),
                                           bytes.data(), bytes.size()));
    rte_pktmbuf_free(wire);
    EXPECT_FALSE(bytes.empty());
    return bytes;
  };
  std::vector<std::vector<uint8_t>> hostile = {
      link_form(Roce(Qpn(3, 1), Opcode::kRcSendOnly, 0, Ip(9))),          // as another host
      link_form(Roce(Qpn(3, 1), Opcode::kRcSendOnly, 0, Ip(1), Ip(9))),   // to another host
      link_form(Roce(Qpn(5, 1))),                                         // not our QPN
      link_form(Roce(Qpn(3, 1))),                                         // fine
  };
  hostile.push_back(hostile.back());
  // QP 1: the daemon's to route.
  hostile.back()[transport::kLinkHeaderBytes + 5] = hostile.back()[transport::kLinkHeaderBytes + 6] = 0;
  hostile.back()[transport::kLinkHeaderBytes + 7] = 1;
  hostile.push_back(std::vector<uint8_t>(transport::kLinkHeaderBytes + 11));  // too short for a BTH
  auto as_b = ShmChannel::Map(file_->fd(), ShmChannel::Side::kProcess);
  ASSERT_TRUE(as_b.ok());
  for (const auto& bytes : hostile) {
    ASSERT_TRUE((*as_b)->SendBytes(bytes.data(), static_cast<uint32_t>(bytes.size()), true));
  }
  EXPECT_EQ(Receive(a_.get()), 1u);
  EXPECT_EQ(a_->counters().rx_refused, 5u);
  EXPECT_TRUE(a_->LinkFrame(received_[0]));
}

TEST_F(LocalLinksTest, AnAckWordIsTakenOnlyAfterTheFramesSentBeforeIt) {
  Link(64, 0);
  // The links are in use both ways once each sent a frame over them.
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 5))}), 1);
  ASSERT_EQ(Receive(a_.get()), 1u);
  ASSERT_EQ(Receive(b_.get()), 1u);
  // b (the responder of a's QP 3:5) sends two frames, then stores a word.
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 5)), Roce(Qpn(3, 5))}), 2);
  ASSERT_TRUE(b_->WriteLinkAck(Qpn(3, 5), Ip(1), Qpn(3, 5), 0x1234));
  uint64_t own = 0;
  ASSERT_TRUE(b_->ReadOwnLinkAck(Qpn(3, 5), Ip(1), Qpn(3, 5), &own));
  EXPECT_EQ(own, 0x1234u);
  uint64_t word = 0, read_to = 0;
  ASSERT_TRUE(a_->ReadLinkAck(Qpn(7, 9), Ip(1), Qpn(3, 5), &word, &read_to));
  EXPECT_EQ(word, 0x1234u);
  EXPECT_FALSE(a_->LinkReadPast(Qpn(7, 9), Ip(1), read_to)) << "two frames before it not read yet";
  ASSERT_EQ(Receive(a_.get()), 2u);
  EXPECT_TRUE(a_->LinkReadPast(Qpn(7, 9), Ip(1), read_to));
  // Nothing for a QPN of no link, or of another host.
  EXPECT_FALSE(a_->ReadLinkAck(Qpn(9, 1), Ip(1), Qpn(3, 5), &word, &read_to));
  EXPECT_FALSE(a_->ReadLinkAck(Qpn(7, 9), Ip(9), Qpn(3, 5), &word, &read_to));
  EXPECT_FALSE(b_->WriteLinkAck(Qpn(3, 5), Ip(9), Qpn(3, 5), 1));
  // A link replaced since the word was read: nothing more comes from the
  // old one.
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 5))}), 1);
  ASSERT_TRUE(a_->ReadLinkAck(Qpn(7, 9), Ip(1), Qpn(3, 5), &word, &read_to));
  EXPECT_FALSE(a_->LinkReadPast(Qpn(7, 9), Ip(1), read_to));
  Link(64, 0);
  EXPECT_TRUE(a_->LinkReadPast(Qpn(7, 9), Ip(1), read_to));
  Receive(a_.get());
  a_->Reclaim();
  b_->Reclaim();
}

TEST_F(LocalLinksTest, AFullLinkHoldsTheRestInOrder) {
  Link(/*slots=*/4);
  std::vector<rte_mbuf*> frames;
  for (uint32_t i = 0; i < 6; ++i) frames.push_back(Roce(Qpn(7, i)));
  frames.push_back(Roce(Qpn(9, 1)));  // to the daemon, behind them
  // Four fit; the caller keeps the rest, the daemon's frame included.
  EXPECT_EQ(a_->TxBurst(frames.data(), 7), 4);
  EXPECT_TRUE(daemon_a_.out.empty());
  EXPECT_EQ(Receive(b_.get()), 4u);
  EXPECT_EQ(a_->TxBurst(frames.data() + 4, 3), 3);
  EXPECT_EQ(daemon_a_.out.size(), 1u);
  EXPECT_EQ(Receive(b_.get()), 2u);
}

TEST_F(LocalLinksTest, AClosedOrRemovedLinkSendsThroughTheDaemonAgain) {
  Link();
  file_->MarkClosed();  // the daemon: slot 7's process ended
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  EXPECT_EQ(daemon_a_.out.size(), 1u);
  b_->Remove(3);
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 5))}), 1);
  EXPECT_EQ(daemon_b_.out.size(), 1u);
  EXPECT_EQ(b_->counters().links, 0u);
  // The removed link is unmapped once the polling side has moved on.
  Receive(b_.get());
  b_->Reclaim();
}

TEST_F(LocalLinksTest, BadLinksAreRefused) {
  auto file = ShmChannel::Create(8, 1518);
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(a_->Add(3, (*file)->fd()).ok());    // our own slot
  EXPECT_FALSE(a_->Add(0, (*file)->fd()).ok());    // QP 1's
  EXPECT_FALSE(a_->Add(255, (*file)->fd()).ok());  // beyond the leases
  EXPECT_FALSE(a_->Add(7, -1).ok());
  EXPECT_EQ(a_->counters().links, 0u);
}

}  // namespace
}  // namespace uroce::host

namespace uroce::host {
namespace {

// Reading the other process's memory (transport/peer_memory.h): both ends
// are this process here, so each can read the other when told our own pid.
class LocalLinksPullTest : public LocalLinksTest {
 protected:
  void LinkAs(int64_t pid_of_b, int64_t pid_of_a, uint32_t uid) {
    auto file = ShmChannel::Create(64, 1518);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(a_->Add(7, (*file)->fd(), pid_of_b, uid).ok());
    ASSERT_TRUE(b_->Add(3, (*file)->fd(), pid_of_a, uid).ok());
    file_ = std::move(*file);
  }
  // Both sides check (the daemon watch's Reclaim), then a frame each way so
  // that the links are in use.
  void CheckAndUse() {
    a_->Reclaim();
    b_->Reclaim();
    a_->Reclaim();
    EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
    EXPECT_EQ(Send(b_.get(), {Roce(Qpn(3, 5))}), 1);
  }
  // The link a frame from the other side came by, as the engine asks.
  uint32_t SourceOfNextFrame(LocalLinks* links) {
    rte_mbuf* m = nullptr;
    if (links->RxBurst(&m, 1) != 1) return 0xFFFFFFFF;
    received_.push_back(m);
    return links->PullSource(m);
  }
};

TEST_F(LocalLinksPullTest, ProcessesThatReadEachOtherTakeLargeMessagesAsDescriptors) {
  LinkAs(getpid(), getpid(), geteuid());
  CheckAndUse();
  EXPECT_TRUE(a_->TakesPulls(Qpn(7, 5), Ip(1)));
  EXPECT_TRUE(b_->TakesPulls(Qpn(3, 5), Ip(1)));
  EXPECT_FALSE(a_->TakesPulls(Qpn(9, 5), Ip(1))) << "no link to slot 9";
  EXPECT_FALSE(a_->TakesPulls(Qpn(7, 5), Ip(9))) << "slot 7's QPN on another host: through the daemon";
  EXPECT_FALSE(a_->TakesPulls(Qpn(3, 5), Ip(1))) << "our own QPs loop";
  EXPECT_EQ(a_->counters().pull_links, 1u);
  const uint32_t source = SourceOfNextFrame(b_.get());
  ASSERT_NE(source, 0u);
  // The copy reads from that process only, and only what it names.
  std::vector<uint8_t> theirs(8192, 0x5A), ours(8192, 0);
  iovec local{ours.data(), ours.size()}, remote{theirs.data(), theirs.size()};
  EXPECT_TRUE(b_->Pull(source, &local, 1, &remote, 1));
  EXPECT_EQ(ours, theirs);
  iovec unmapped{reinterpret_cast<void*>(0x10), 64};
  local.iov_len = 64;
  EXPECT_FALSE(b_->Pull(source, &local, 1, &unmapped, 1)) << "a copy that faults only fails";
  EXPECT_FALSE(b_->Pull(source + 1, &local, 1, &remote, 1)) << "a slot without a link";

  // A frame through the daemon names no process, and is checked whole.
  daemon_b_.in.push_back(Roce(Qpn(7, 9)));
  EXPECT_EQ(SourceOfNextFrame(b_.get()), 0u);

  // Once the other process has ended (the daemon marks the file), or the
  // link is gone or replaced, nothing is read for it any more.
  file_->MarkClosed();
  EXPECT_FALSE(b_->Pull(source, &local, 1, &remote, 1)) << "its pid may be another process's soon";
  b_->Remove(3);
  EXPECT_FALSE(b_->Pull(source, &local, 1, &remote, 1));
  EXPECT_FALSE(b_->TakesPulls(Qpn(3, 5), Ip(1)));
}

TEST_F(LocalLinksPullTest, NoDescriptorsWithAProcessOfAnotherUserOrOneTheDaemonDidNotName) {
  for (auto [pid, uid] : {std::pair<int64_t, uint32_t>{getpid(), geteuid() + 1}, {0, geteuid()}}) {
    LinkAs(pid, pid, uid);
    CheckAndUse();
    EXPECT_FALSE(a_->TakesPulls(Qpn(7, 5), Ip(1)));
    EXPECT_EQ(a_->counters().pull_links, 0u);
    EXPECT_EQ(SourceOfNextFrame(b_.get()), 0u);
    a_->Remove(7);
    b_->Remove(3);
  }
}

TEST_F(LocalLinksPullTest, AProcessThatIsNotTheOneItSaysOrLiesAboutItsCookieIsNotRead) {
  // The daemon names a process that does not hold the cookie (our parent):
  // reading it gives something else, or is not allowed.
  LinkAs(getppid(), getppid(), geteuid());
  CheckAndUse();
  EXPECT_FALSE(a_->TakesPulls(Qpn(7, 5), Ip(1)));
  EXPECT_FALSE(b_->TakesPulls(Qpn(3, 5), Ip(1)));
  a_->Remove(7);
  b_->Remove(3);

  // Garbage in the other side's offer: an address that is not mapped.
  auto file = ShmChannel::Create(64, 1518);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(a_->Add(7, (*file)->fd(), getpid(), geteuid()).ok());
  auto forged = ShmChannel::Map((*file)->fd(), ShmChannel::Side::kProcess);  // b's side, written by hand
  ASSERT_TRUE(forged.ok());
  (*forged)->OfferPullProbe();
  uint64_t address = 0, cookie = 0;
  ASSERT_TRUE((*file)->PeerPullProbe(&address, &cookie));  // the daemon's side sees b's offer
  // Overwrite b's offer with an unmapped address and claim to read a.
  void* header = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (*file)->fd(), 0);
  ASSERT_NE(header, MAP_FAILED);
  auto* offers = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(header) + 64);
  offers[3] = 0x10;  // the process side's cookie_address (the second offer's first word)
  (*forged)->SetReadsPeer();
  a_->Reclaim();
  EXPECT_FALSE(a_->TakesPulls(Qpn(7, 5), Ip(1))) << "b claims to read us, but we cannot read b";
  EXPECT_EQ(a_->counters().pull_links, 0u);
  munmap(header, 4096);
}

TEST_F(LocalLinksTest, AChunkIsStagedInTheLinksAreaForTheOtherProcessAlone) {
  Link(64, 4);
  std::vector<uint8_t> data(3000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  iovec pieces[2] = {{data.data(), 1000}, {data.data() + 1000, 2000}};
  transport::StageTicket ticket;
  // Only where Route sends the descriptor over the link, which it has not
  // used yet.
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 2, &ticket, transport::StageCopy::kCached));
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  const uint32_t source = b_->LinkSource(received_.back());
  ASSERT_NE(source, 0u);
  ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 2, &ticket, transport::StageCopy::kStreaming));
  const uint8_t* staged = b_->StagedData(source, ticket.chunk, ticket.sequence, 3000);
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(std::memcmp(staged, data.data(), 3000), 0);
  EXPECT_TRUE(b_->StagedIntact(source, ticket.chunk, ticket.sequence));
  // Not toward another host (Route sends that to the daemon), not more than
  // a chunk, not what names a chunk or length the area does not have.
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(9), pieces, 2, &ticket, transport::StageCopy::kCached));
  iovec too_long{data.data(), transport::kStagedChunkBytes + 1};
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), &too_long, 1, &ticket, transport::StageCopy::kCached));
  EXPECT_EQ(b_->StagedData(source, 4, ticket.sequence, 10), nullptr);
  EXPECT_EQ(b_->StagedData(source, ticket.chunk, ticket.sequence, transport::kStagedChunkBytes + 1), nullptr);
  EXPECT_EQ(b_->StagedData(source, ticket.chunk, ticket.sequence + 2, 10), nullptr);

  // Four chunks: three more, then none until one comes back.
  transport::StageTicket more[3];
  for (auto& t : more) ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 1, &t, transport::StageCopy::kCached));
  transport::StageTicket none;
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 1, &none, transport::StageCopy::kCached));
  a_->Unstage(ticket);
  transport::StageTicket again;
  ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 1, &again, transport::StageCopy::kCached));
  EXPECT_EQ(again.chunk, ticket.chunk);
  EXPECT_NE(again.sequence, ticket.sequence);
  // The reader of the old descriptor sees the chunk was filled again.
  EXPECT_FALSE(b_->StagedIntact(source, ticket.chunk, ticket.sequence));
  EXPECT_EQ(b_->StagedData(source, ticket.chunk, ticket.sequence, 1000), nullptr);

  // A frame that came round our own loop names no link.
  EXPECT_EQ(Send(b_.get(), {Roce(Qpn(7, 9))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  EXPECT_EQ(b_->LinkSource(received_.back()), 0u);

  // A new link replaces the old: what named the old one names nothing.
  Link(64, 4);
  EXPECT_EQ(b_->StagedData(source, again.chunk, again.sequence, 1000), nullptr);
  EXPECT_FALSE(b_->StagedIntact(source, again.chunk, again.sequence));
  a_->Unstage(more[0]);  // ignored: its area went with the old link
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  transport::StageTicket fresh[4];
  for (auto& t : fresh) EXPECT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), pieces, 1, &t, transport::StageCopy::kCached)) << "the new area is all free";
}

// A READ response's chunk, which no acknowledgement gives back: the reader
// marks it taken in the area, and a full area reuses what was taken. The
// holder's ticket then names a chunk that is someone else's: its Unstage is
// ignored and StageTaken says it is gone.
TEST_F(LocalLinksTest, AChunkTheReaderTookIsFilledAgainWhenTheAreaIsFull) {
  Link(64, 2);
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  const uint32_t source = b_->LinkSource(received_.back());
  ASSERT_NE(source, 0u);
  std::vector<uint8_t> data(100, 0x42);
  iovec piece{data.data(), data.size()};
  transport::StageTicket read_chunk, send_chunk, none;
  ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &read_chunk, transport::StageCopy::kStreaming));
  ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &send_chunk, transport::StageCopy::kCached));
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &none, transport::StageCopy::kCached)) << "both held";
  EXPECT_FALSE(a_->StageTaken(read_chunk));

  b_->TakeStaged(source, read_chunk.chunk, read_chunk.sequence);
  EXPECT_TRUE(a_->StageTaken(read_chunk));
  EXPECT_FALSE(a_->StageTaken(send_chunk));
  transport::StageTicket reused;
  ASSERT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &reused, transport::StageCopy::kCached));
  EXPECT_EQ(reused.chunk, read_chunk.chunk);
  EXPECT_TRUE(a_->StageTaken(read_chunk)) << "filled again: gone either way";
  EXPECT_FALSE(a_->StageTaken(reused));
  a_->Unstage(read_chunk);  // ignored: the chunk is the new fill's now
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &none, transport::StageCopy::kCached)) << "the new fill still holds it";
  // A taken mark for an older fill, or a chunk the area does not have,
  // frees nothing.
  b_->TakeStaged(source, reused.chunk, read_chunk.sequence);
  b_->TakeStaged(source, 9, reused.sequence);
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &none, transport::StageCopy::kCached));
  a_->Unstage(reused);
  EXPECT_TRUE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &none, transport::StageCopy::kCached));
}

TEST_F(LocalLinksTest, ALinkWithoutAPayloadAreaStagesNothing) {
  Link(64, 0);
  EXPECT_EQ(Send(a_.get(), {Roce(Qpn(7, 5))}), 1);
  ASSERT_EQ(Receive(b_.get()), 1u);
  uint8_t byte = 1;
  iovec piece{&byte, 1};
  transport::StageTicket ticket;
  EXPECT_FALSE(a_->Stage(Qpn(7, 5), Ip(1), &piece, 1, &ticket, transport::StageCopy::kCached));
}

}  // namespace
}  // namespace uroce::host
