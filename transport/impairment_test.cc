// The bottleneck of transport/impairment.h: frames leave at the rate, behind
// those queued; a full queue drops; above K queued, ECN-capable frames leave
// marked CE with a right IPv4 checksum, and the rest are left alone. And
// loss that spares acknowledgements when asked, with the seed's meaning kept;
// and frames in link form, which have no ICRC.
#include "transport/impairment.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "pmd/mempool.h"
#include "transport/headers.h"
#include "transport/link_frame.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

constexpr unsigned kPool = 1023;

class BottleneckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    auto pool = pmd::CreatePktPool({.name = "bn_pool" + std::to_string(n++), .mbufs = kPool, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
  }
  void TearDown() override {
    stage_.reset();
    EXPECT_EQ(pmd::AvailableMbufs(pool_.get()), kPool) << "mbufs leaked";
  }
  void MakeStage(double rate, uint32_t queue_frames, uint32_t ecn_frames) {
    faults_.rate = rate;
    faults_.queue_frames = queue_frames;
    faults_.ecn_frames = ecn_frames;
    stage_ = std::make_unique<ImpairmentStage>(&generator_, &faults_, &counters_, pool_.get(), 64);
  }
  // A RoCEv2 SEND over IPv4 with `payload` bytes and this traffic class; or
  // with another opcode (an RC ACKNOWLEDGE: 0x11, no payload).
  rte_mbuf* Frame(uint32_t payload, uint8_t traffic_class, uint8_t opcode = 0x04) {
    PacketFields f;
    const uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
    f.src_gid = Ipv4MappedGid(a);
    f.dst_gid = Ipv4MappedGid(b);
    f.traffic_class = traffic_class;
    f.bth.opcode = opcode;  // 0x04: RC SEND Only
    f.payload_length = payload;
    std::vector<uint8_t> bytes(payload, 0x5A);
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    EXPECT_NE(m, nullptr);
    EXPECT_EQ(BuildPacket(f, bytes.data(), m), BuildError::kOk);
    return m;
  }
  // Frames released at `now`, freed; their parsed traffic classes in order.
  std::vector<uint8_t> ReleasedAt(uint64_t now) {
    std::vector<uint8_t> classes;
    rte_mbuf* out[64];
    const uint16_t n = stage_->Release(now, out, 64);
    for (uint16_t i = 0; i < n; ++i) {
      PacketView view;
      EXPECT_EQ(ParsePacket(out[i], ParseOptions{}, &view), ParseError::kOk) << "a marked frame must still parse";
      EXPECT_TRUE(view.icrc_ok()) << "the ICRC takes the ECN bits as ones";
      classes.push_back(view.fields.traffic_class);
    }
    rte_pktmbuf_free_bulk(out, n);
    return classes;
  }

  pmd::MempoolPtr pool_;
  FaultGenerator generator_{7};
  Impairments faults_;
  ImpairmentCounters counters_;
  std::unique_ptr<ImpairmentStage> stage_;
};

TEST_F(BottleneckTest, FramesLeaveAtTheRateBehindThoseQueued) {
  MakeStage(/*rate=*/10.0, 0, 0);
  rte_mbuf* frames[4];
  for (auto& m : frames) m = Frame(58, 0);
  const uint32_t bytes = rte_pktmbuf_pkt_len(frames[0]);
  ASSERT_EQ(stage_->Admit(frames, 4, 0), 4);
  const uint64_t each = (bytes + 5) / 10;  // bytes / rate, rounded
  EXPECT_TRUE(ReleasedAt(each - 1).empty());
  EXPECT_EQ(ReleasedAt(each).size(), 1u);
  EXPECT_EQ(ReleasedAt(3 * each).size(), 2u);
  EXPECT_EQ(ReleasedAt(4 * each).size(), 1u);
  EXPECT_EQ(counters_.queue_dropped, 0u);
}

TEST_F(BottleneckTest, AFullQueueDropsTheTail) {
  MakeStage(1.0, /*queue_frames=*/4, 0);
  rte_mbuf* frames[10];
  for (auto& m : frames) m = Frame(64, 0);
  ASSERT_EQ(stage_->Admit(frames, 10, 0), 10);
  EXPECT_EQ(counters_.queue_dropped, 6u);
  EXPECT_EQ(ReleasedAt(1'000'000).size(), 4u);
}

TEST_F(BottleneckTest, AboveKEcnCapableFramesAreMarkedCe) {
  MakeStage(1.0, 0, /*ecn_frames=*/2);
  rte_mbuf* frames[6];
  for (auto& m : frames) m = Frame(64, 0x02);  // ECT(0)
  ASSERT_EQ(stage_->Admit(frames, 6, 0), 6);
  rte_mbuf* not_capable = Frame(64, 0x00);
  ASSERT_EQ(stage_->Admit(&not_capable, 1, 0), 1);
  // Found 0, 1, 2 queued: left alone; found 3, 4, 5: marked; not ECT: never.
  EXPECT_EQ(ReleasedAt(1'000'000), (std::vector<uint8_t>{0x02, 0x02, 0x02, 0x03, 0x03, 0x03, 0x00}));
  EXPECT_EQ(counters_.ce_marked, 3u);
}

TEST_F(BottleneckTest, TheQueueDrainsAndMarkingStops) {
  MakeStage(1.0, 0, 1);
  rte_mbuf* frames[3];
  for (auto& m : frames) m = Frame(64, 0x01);  // ECT(1)
  ASSERT_EQ(stage_->Admit(frames, 3, 0), 3);
  EXPECT_EQ(ReleasedAt(1'000'000).size(), 3u);
  rte_mbuf* later = Frame(64, 0x01);
  ASSERT_EQ(stage_->Admit(&later, 1, 1'000'000), 1);
  EXPECT_EQ(ReleasedAt(2'000'000), (std::vector<uint8_t>{0x01}));
  EXPECT_EQ(counters_.ce_marked, 1u) << "only the third of the first three";
}

// Which of 2 * kPairs frames, a SEND then an ACK each time, a stage with
// this seed and loss drops (true: dropped), spare_acks as given.
std::vector<bool> DroppedFrames(rte_mempool* pool, double loss, bool spare_acks,
                                const std::function<rte_mbuf*(bool ack)>& make) {
  constexpr int kPairs = 100;
  FaultGenerator generator(11);
  Impairments faults;
  faults.loss = loss;
  faults.spare_acks = spare_acks;
  ImpairmentCounters counters;
  ImpairmentStage stage(&generator, &faults, &counters, pool, 2 * kPairs);
  std::vector<bool> dropped;
  for (int i = 0; i < 2 * kPairs; ++i) {
    rte_mbuf* m = make(i % 2 == 1);
    const uint64_t before = counters.dropped;
    EXPECT_EQ(stage.Admit(&m, 1, 0), 1);
    dropped.push_back(counters.dropped != before);
  }
  rte_mbuf* out[2 * kPairs];
  rte_pktmbuf_free_bulk(out, stage.Release(0, out, 2 * kPairs));
  return dropped;
}

TEST_F(BottleneckTest, LossSparesAcknowledgementsWhenAskedAndTheSeedKeepsItsMeaning) {
  auto make = [this](bool ack) { return ack ? Frame(0, 0, 0x11) : Frame(64, 0); };
  const std::vector<bool> all = DroppedFrames(pool_.get(), 0.3, false, make);
  const std::vector<bool> spared = DroppedFrames(pool_.get(), 0.3, true, make);
  int acks_lost = 0, sends_lost = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 2 == 1) {
      acks_lost += all[i];
      EXPECT_FALSE(spared[i]) << "frame " << i << " is an ACK";
    } else {
      sends_lost += all[i];
      EXPECT_EQ(spared[i], all[i]) << "frame " << i << ": the same draws decide the same SENDs";
    }
  }
  EXPECT_GT(acks_lost, 0) << "without spare_acks some ACKs are lost";
  EXPECT_GT(sends_lost, 0);
}

// The port's word on which frames came in link form: here, hash.usr 1.
class LinkFramePort : public PeerMemory {
 public:
  bool TakesPulls(uint32_t, const Gid&) override { return false; }
  uint32_t PullSource(const rte_mbuf*) override { return 0; }
  bool Pull(uint32_t, const iovec*, uint32_t, const iovec*, uint32_t) override { return false; }
  bool LinkFrame(const rte_mbuf* m) override { return m->hash.usr == 1; }
};

TEST_F(BottleneckTest, FramesInLinkFormAreLostWhenCorruptedAndSparedAndMarkedAsTheirHeaderSays) {
  LinkFramePort port;
  auto link_form = [this](rte_mbuf* wire) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    uint8_t* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(rte_pktmbuf_data_len(wire))));
    const size_t length = WriteLinkFrame(rte_pktmbuf_mtod(wire, const uint8_t*), rte_pktmbuf_data_len(wire), out,
                                         rte_pktmbuf_data_len(wire));
    EXPECT_GT(length, 0u);
    rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_data_len(wire) - length));
    rte_pktmbuf_free(wire);
    m->hash.usr = 1;
    return m;
  };
  // Every frame corrupted: the wire frame damaged and handed on (its ICRC
  // catches it), the link frame lost.
  faults_.corrupt = 1.0;
  stage_ = std::make_unique<ImpairmentStage>(&generator_, &faults_, &counters_, pool_.get(), 64);
  stage_->set_link_frames(&port);
  rte_mbuf* frames[2] = {Frame(64, 0), link_form(Frame(64, 0))};
  ASSERT_EQ(stage_->Admit(frames, 2, 0), 2);
  EXPECT_EQ(counters_.corrupted, 2u);
  EXPECT_EQ(counters_.dropped, 1u);
  rte_mbuf* out[4];
  ASSERT_EQ(stage_->Release(0, out, 4), 1);
  EXPECT_EQ(out[0]->hash.usr, 0u) << "the wire frame";
  PacketView view;
  EXPECT_NE(ParsePacket(out[0], ParseOptions{}, &view), ParseError::kOk);
  rte_pktmbuf_free(out[0]);
  // Every frame lost but acknowledgements, which a link frame's parse finds.
  faults_ = Impairments{};
  faults_.loss = 1.0;
  faults_.spare_acks = true;
  stage_ = std::make_unique<ImpairmentStage>(&generator_, &faults_, &counters_, pool_.get(), 64);
  stage_->set_link_frames(&port);
  rte_mbuf* acks[2] = {link_form(Frame(0, 0, 0x11)), link_form(Frame(64, 0))};
  ASSERT_EQ(stage_->Admit(acks, 2, 0), 2);
  ASSERT_EQ(stage_->Release(0, out, 4), 1);
  EXPECT_EQ(ParseLinkFrame(out[0], &view), ParseError::kOk);
  EXPECT_EQ(view.fields.bth.opcode, 0x11);
  rte_pktmbuf_free(out[0]);
  // Above K queued, an ECN-capable link frame is marked in its header.
  faults_ = Impairments{};
  MakeStage(1.0, 0, /*ecn_frames=*/1);
  stage_->set_link_frames(&port);
  rte_mbuf* capable[3] = {link_form(Frame(64, 0x02)), link_form(Frame(64, 0x02)), link_form(Frame(64, 0x02))};
  ASSERT_EQ(stage_->Admit(capable, 3, 0), 3);
  ASSERT_EQ(stage_->Release(1'000'000, out, 4), 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ParseLinkFrame(out[i], &view), ParseError::kOk);
    EXPECT_EQ(view.fields.traffic_class, i < 2 ? 0x02 : 0x03) << "frame " << i;
    EXPECT_EQ(view.fields.src_gid, Ipv4MappedGid(0x0A000001)) << "nothing else changes";
  }
  rte_pktmbuf_free_bulk(out, 3);
}

}  // namespace
}  // namespace uroce::transport
