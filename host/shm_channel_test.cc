// The daemon's shared-memory port (host/shm_channel.h): frames both ways,
// full rings, and a peer that writes nonsense into the shared memory.
#include "host/shm_channel.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

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

constexpr unsigned kPoolSize = 1023;

class ShmChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = CreatePktPool({.name = "shm_test", .mbufs = kPoolSize, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    auto daemon = ShmChannel::Create(8, 1518);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    auto process = ShmChannel::Map(daemon_->fd());
    ASSERT_TRUE(process.ok()) << process.status().ToString();
    process_ = std::move(*process);
  }
  void TearDown() override {
    daemon_.reset();
    process_.reset();
    EXPECT_EQ(AvailableMbufs(pool_.get()), kPoolSize) << "a buffer leaked";
  }
  rte_mbuf* Frame(uint32_t length, uint8_t fill) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
    std::memset(rte_pktmbuf_append(m, static_cast<uint16_t>(length)), fill, length);
    return m;
  }
  // The shared memory as the other side sees it (a second mapping).
  uint8_t* Shared() {
    if (shared_ == nullptr) {
      shared_size_ = ShmChannel::FileSize(8, 1536);
      shared_ = static_cast<uint8_t*>(mmap(nullptr, shared_size_, PROT_READ | PROT_WRITE, MAP_SHARED, daemon_->fd(), 0));
    }
    return shared_;
  }
  ~ShmChannelTest() override {
    if (shared_ != nullptr) munmap(shared_, shared_size_);
  }

  MempoolPtr pool_;
  std::unique_ptr<ShmChannel> daemon_, process_;
  uint8_t* shared_ = nullptr;
  size_t shared_size_ = 0;
};

TEST_F(ShmChannelTest, FramesGoBothWaysWholeAndInOrder) {
  rte_mbuf* out[3] = {Frame(60, 1), Frame(1518, 2), Frame(300, 3)};
  ASSERT_EQ(daemon_->Send(out, 3), 3);
  rte_mbuf* in[8];
  ASSERT_EQ(process_->Receive(in, 8, pool_.get()), 3);
  const uint32_t lengths[3] = {60, 1518, 300};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rte_pktmbuf_pkt_len(in[i]), lengths[i]);
    EXPECT_EQ(rte_pktmbuf_mtod(in[i], uint8_t*)[lengths[i] - 1], i + 1);
  }
  // Back the other way, in the same mbufs.
  ASSERT_EQ(process_->Send(in, 3), 3);
  ASSERT_EQ(daemon_->Receive(in, 8, pool_.get()), 3);
  EXPECT_EQ(rte_pktmbuf_pkt_len(in[1]), 1518u);
  rte_pktmbuf_free_bulk(in, 3);
  EXPECT_EQ(daemon_->Receive(in, 8, pool_.get()), 0);
  EXPECT_EQ(process_->counters().rx_frames, 3u);
}

TEST_F(ShmChannelTest, AFullRingTakesWhatFitsAndTooLongFramesAreDropped) {
  std::vector<rte_mbuf*> out;
  for (int i = 0; i < 10; ++i) out.push_back(Frame(100, static_cast<uint8_t>(i)));
  EXPECT_EQ(daemon_->Send(out.data(), 10), 8);  // 8 slots
  EXPECT_EQ(daemon_->Send(out.data() + 8, 2), 0);
  rte_mbuf* in[16];
  ASSERT_EQ(process_->Receive(in, 16, pool_.get()), 8);
  EXPECT_EQ(rte_pktmbuf_mtod(in[7], uint8_t*)[0], 7);
  rte_pktmbuf_free_bulk(in, 8);
  EXPECT_EQ(daemon_->Send(out.data() + 8, 2), 2);
  ASSERT_EQ(process_->Receive(in, 16, pool_.get()), 2);
  rte_pktmbuf_free_bulk(in, 2);
  // A frame longer than a slot holds is dropped, and counted as taken.
  rte_mbuf* big = rte_pktmbuf_alloc(pool_.get());
  rte_mbuf* tail = Frame(1000, 9);
  std::memset(rte_pktmbuf_append(big, 1000), 9, 1000);
  ASSERT_EQ(rte_pktmbuf_chain(big, tail), 0);  // 2000 bytes in two segments
  EXPECT_EQ(daemon_->Send(&big, 1), 1);
  EXPECT_EQ(daemon_->counters().tx_too_long, 1u);
  EXPECT_EQ(process_->Receive(in, 16, pool_.get()), 0);
}

TEST_F(ShmChannelTest, ChainedFramesAreCopiedWhole) {
  rte_mbuf* head = Frame(700, 4);
  rte_mbuf* tail = Frame(500, 5);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  ASSERT_EQ(process_->Send(&head, 1), 1);
  rte_mbuf* in[1];
  ASSERT_EQ(daemon_->Receive(in, 1, pool_.get()), 1);
  ASSERT_EQ(rte_pktmbuf_pkt_len(in[0]), 1200u);
  EXPECT_EQ(rte_pktmbuf_mtod(in[0], uint8_t*)[699], 4);
  EXPECT_EQ(rte_pktmbuf_mtod(in[0], uint8_t*)[700], 5);
  rte_pktmbuf_free(in[0]);
}

// The process may write anything into the shared memory: the daemon reads
// nothing it should not and keeps every buffer.
TEST_F(ShmChannelTest, NonsenseFromTheProcessIsRefused) {
  // Ring 1 (process to daemon) starts after the header (two lines) and ring 0.
  constexpr size_t kHeader = 128;
  const size_t ring1 = kHeader + 2 * 64 + 8 * 1536;
  uint8_t* produced = Shared() + ring1;
  uint8_t* slots = produced + 128;
  rte_mbuf* in[16];
  // An index far ahead of what the ring holds.
  uint32_t index = 1000;
  std::memcpy(produced, &index, 4);
  EXPECT_EQ(daemon_->Receive(in, 16, pool_.get()), 0);
  EXPECT_EQ(daemon_->counters().rx_bad_index, 1u);
  // Three slots: a length of 0, one beyond a slot, one right.
  const uint32_t lengths[3] = {0, 0xFFFFFFFF, 64};
  for (int i = 0; i < 3; ++i) std::memcpy(slots + i * 1536, &lengths[i], 4);
  index = 3;
  std::memcpy(produced, &index, 4);
  ASSERT_EQ(daemon_->Receive(in, 16, pool_.get()), 1);
  EXPECT_EQ(rte_pktmbuf_pkt_len(in[0]), 64u);
  EXPECT_EQ(daemon_->counters().rx_bad_length, 2u);
  rte_pktmbuf_free(in[0]);
  // A consumer index that claims more was read than was written: no room
  // once the sender looks at it, which is when the room it knew of is used
  // up (the 8 slots of the ring).
  uint8_t* consumed0 = Shared() + kHeader + 64;
  index = 12345;
  std::memcpy(consumed0, &index, 4);
  for (int i = 0; i < 8; ++i) {
    rte_mbuf* out = Frame(64, static_cast<uint8_t>(i));
    ASSERT_EQ(daemon_->Send(&out, 1), 1);
  }
  rte_mbuf* out = Frame(64, 9);
  EXPECT_EQ(daemon_->Send(&out, 1), 0);
  rte_pktmbuf_free(out);
}

// A RoCEv2 frame of `opcode` with 64 bytes of payload, as the engine builds
// it (`icrc_left_out`: as it builds it for a link, without its ICRC).
rte_mbuf* RoceFrame(rte_mempool* pool, transport::Opcode opcode, bool icrc_left_out = false) {
  transport::PacketFields f;
  f.src_gid = f.dst_gid = transport::Ipv4MappedGid(0x0A000001);
  f.bth.opcode = static_cast<uint8_t>(opcode);
  f.bth.dest_qp = 0x030011;
  f.payload_length = 64;
  const uint8_t payload[64] = {1, 2, 3};
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  EXPECT_EQ(transport::BuildPacket(f, payload, m), transport::BuildError::kOk);
  m->hash.usr = 0;
  if (icrc_left_out) {
    std::memset(rte_pktmbuf_mtod_offset(m, uint8_t*, rte_pktmbuf_data_len(m) - 4), 0, 4);
    m->hash.usr = transport::kIcrcLeftOut;
  }
  return m;
}

TEST_F(ShmChannelTest, ALinkCarriesConnectedFramesInLinkFormToASideThatTakesIt) {
  process_->TakeLinkFrames();
  rte_mbuf* out[3] = {RoceFrame(pool_.get(), transport::Opcode::kRcSendOnly),
                      RoceFrame(pool_.get(), transport::Opcode::kUdSendOnly), Frame(60, 7)};
  const uint32_t wire_length = rte_pktmbuf_data_len(out[0]);
  ASSERT_EQ(daemon_->SendLinkFrames(out, 3), 3);
  EXPECT_EQ(daemon_->counters().tx_link_frames, 1u);
  rte_mbuf* in[8];
  ASSERT_EQ(process_->Receive(in, 8, pool_.get()), 3);
  // The RC SEND: 40 bytes of link header for Ethernet, IP, UDP and the
  // ICRC (46 bytes), marked, and read by the link parser.
  EXPECT_EQ(rte_pktmbuf_data_len(in[0]), wire_length - 46 + transport::kLinkHeaderBytes);
  EXPECT_EQ(in[0]->hash.usr, kLinkFrameMark);
  transport::PacketView view;
  ASSERT_EQ(transport::ParseLinkFrame(in[0], &view), transport::ParseError::kOk);
  EXPECT_EQ(view.fields.bth.dest_qp, 0x030011u);
  EXPECT_EQ(view.payload[2], 3);
  // UD and a frame that is not RoCE: as they were.
  EXPECT_EQ(in[1]->hash.usr, 0u);
  EXPECT_EQ(transport::ParsePacket(in[1], transport::ParseOptions{}, &view), transport::ParseError::kOk);
  EXPECT_EQ(in[2]->hash.usr, 0u);
  EXPECT_EQ(rte_pktmbuf_data_len(in[2]), 60u);
  EXPECT_EQ(process_->counters().rx_link_frames, 1u);
  rte_pktmbuf_free_bulk(in, 3);
}

TEST_F(ShmChannelTest, TheLinkFormIsRefusedWhereItWasNotAskedFor) {
  // The daemon's side of a port never takes it (its switch reads Ethernet).
  rte_mbuf* out = RoceFrame(pool_.get(), transport::Opcode::kRcSendOnly);
  ASSERT_EQ(process_->SendLinkFrames(&out, 1), 1);
  rte_mbuf* in[2];
  EXPECT_EQ(daemon_->Receive(in, 2, pool_.get()), 0);
  EXPECT_EQ(daemon_->counters().rx_bad_length, 1u);
  // Nor a slot written by hand.
  const uint8_t bytes[64] = {4};
  ASSERT_TRUE(process_->SendBytes(bytes, sizeof(bytes), true));
  ASSERT_TRUE(process_->SendBytes(bytes, sizeof(bytes), false));
  ASSERT_EQ(daemon_->Receive(in, 2, pool_.get()), 1);
  EXPECT_EQ(in[0]->hash.usr, 0u);
  EXPECT_EQ(daemon_->counters().rx_bad_length, 2u);
  rte_pktmbuf_free(in[0]);
}

TEST_F(ShmChannelTest, AFrameBuiltWithoutItsIcrcThatCannotGoInLinkFormGetsOne) {
  process_->TakeLinkFrames();
  // UD has no link form: it leaves as a wire frame, with its ICRC written.
  rte_mbuf* out[2] = {RoceFrame(pool_.get(), transport::Opcode::kUdSendOnly, true),
                      RoceFrame(pool_.get(), transport::Opcode::kRcSendOnly, true)};
  ASSERT_EQ(daemon_->SendLinkFrames(out, 2), 2);
  rte_mbuf* in[2];
  ASSERT_EQ(process_->Receive(in, 2, pool_.get()), 2);
  transport::PacketView view;
  EXPECT_EQ(transport::ParsePacket(in[0], transport::ParseOptions{}, &view), transport::ParseError::kOk);
  EXPECT_EQ(transport::ParseLinkFrame(in[1], &view), transport::ParseError::kOk);
  rte_pktmbuf_free_bulk(in, 2);
  // Sent with Send (the daemon's port), a frame is copied as it is.
  rte_mbuf* plain = RoceFrame(pool_.get(), transport::Opcode::kRcSendOnly, true);
  ASSERT_EQ(daemon_->Send(&plain, 1), 1);
  ASSERT_EQ(process_->Receive(in, 1, pool_.get()), 1);
  EXPECT_EQ(in[0]->hash.usr, 0u);
  EXPECT_EQ(transport::ParsePacket(in[0], transport::ParseOptions{}, &view), transport::ParseError::kBadIcrc);
  rte_pktmbuf_free(in[0]);
}

TEST(ShmChannelAckTest, EachSideWritesItsOwnAreaAndReadsTheOther) {
  auto daemon = ShmChannel::Create(8, 1518, 0, 16);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto process = ShmChannel::Map((*daemon)->fd());
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  EXPECT_EQ((*process)->ack_entries(), 16u);
  (*daemon)->StoreOwnAck(3, 0xABCD);
  (*process)->StoreOwnAck(3, 0x1111);
  EXPECT_EQ((*process)->LoadPeerAck(3), 0xABCDu);
  EXPECT_EQ((*process)->LoadPeerAck(19), 0xABCDu) << "the index wraps";
  EXPECT_EQ((*daemon)->LoadPeerAck(3), 0x1111u);
  EXPECT_EQ((*daemon)->LoadOwnAck(3), 0xABCDu);
  EXPECT_EQ((*daemon)->LoadPeerAck(4), 0u);
  EXPECT_FALSE(ShmChannel::Create(8, 1518, 0, 12).ok());
  EXPECT_FALSE(ShmChannel::Create(8, 1518, 0, 2 * kMaxAckEntries).ok());
  // A header that says another number of entries than the file holds.
  const size_t size = ShmChannel::FileSize(8, 1536, 0, 16);
  uint8_t* mem = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, (*daemon)->fd(), 0));
  ASSERT_NE(mem, MAP_FAILED);
  mem[32] = 32;  // ack_entries: 16 -> 32
  EXPECT_NE(ShmChannel::Map((*daemon)->fd()).status().message().find("geometry"), std::string::npos);
  mem[32] = 16;
  EXPECT_TRUE(ShmChannel::Map((*daemon)->fd()).ok());
  munmap(mem, size);
}

TEST_F(ShmChannelTest, MapRefusesWhatIsNotAPort) {
  EXPECT_FALSE(ShmChannel::Map(-1).ok());
  // Not sealed.
  const int plain = memfd_create("plain", MFD_CLOEXEC);
  ASSERT_GE(plain, 0);
  ASSERT_EQ(ftruncate(plain, static_cast<off_t>(ShmChannel::FileSize(8, 1536))), 0);
  EXPECT_NE(ShmChannel::Map(plain).status().message().find("sealed"), std::string::npos);
  close(plain);
  // Sealed, but a bad header (the real one, changed).
  auto other = ShmChannel::Create(8, 1518);
  ASSERT_TRUE(other.ok());
  uint8_t* mem = static_cast<uint8_t*>(
      mmap(nullptr, ShmChannel::FileSize(8, 1536), PROT_READ | PROT_WRITE, MAP_SHARED, (*other)->fd(), 0));
  ASSERT_NE(mem, MAP_FAILED);
  mem[12] = 16;  // slots: 8 -> 16, which the file's size does not hold
  EXPECT_NE(ShmChannel::Map((*other)->fd()).status().message().find("geometry"), std::string::npos);
  mem[12] = 8;
  mem[0] ^= 1;  // magic
  EXPECT_FALSE(ShmChannel::Map((*other)->fd()).ok());
  munmap(mem, ShmChannel::FileSize(8, 1536));
  EXPECT_FALSE(ShmChannel::Create(6, 1518).ok());
  EXPECT_FALSE(ShmChannel::Create(8, 100000).ok());
}

// A channel with a payload area of four chunks each way, and its other
// side mapped from its file.
class ShmChannelStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = ShmChannel::Create(8, 1518, 4);
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    auto process = ShmChannel::Map((*daemon)->fd());
    ASSERT_TRUE(process.ok()) << process.status().ToString();
    daemon_ = std::move(*daemon);
    process_ = std::move(*process);
  }
  std::unique_ptr<ShmChannel> daemon_, process_;
};

TEST_F(ShmChannelStageTest, AChunkIsReadOnlyWhileItHoldsWhatTheDescriptorSays) {
  ShmChannel& d = *daemon_;
  ShmChannel& p = *process_;
  EXPECT_EQ(p.stage_chunks(), 4u);
  EXPECT_EQ(p.StagedData(1, 2, 100), nullptr) << "never filled";

  std::memset(d.BeginStage(1), 0x5a, 100);
  const uint64_t sequence = d.EndStage(1);
  EXPECT_EQ(sequence % 2, 0u);
  EXPECT_NE(sequence, 0u);
  const uint8_t* data = p.StagedData(1, sequence, 100);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data[0], 0x5a);
  EXPECT_EQ(data[99], 0x5a);
  EXPECT_TRUE(p.StagedIntact(1, sequence));
  // Each side reads the other's area only.
  EXPECT_EQ(d.StagedData(1, sequence, 100), nullptr);
  // Out of range, odd, or another sequence.
  EXPECT_EQ(p.StagedData(4, sequence, 100), nullptr);
  EXPECT_EQ(p.StagedData(1, sequence, 0), nullptr);
  EXPECT_EQ(p.StagedData(1, sequence, transport::kStagedChunkBytes + 1), nullptr);
  EXPECT_EQ(p.StagedData(1, sequence + 1, 100), nullptr);
  EXPECT_EQ(p.StagedData(1, sequence + 2, 100), nullptr);
  EXPECT_FALSE(p.StagedIntact(7, sequence));

  // Filling it again: not intact while being written, nor after.
  d.BeginStage(1);
  EXPECT_FALSE(p.StagedIntact(1, sequence));
  const uint64_t next = d.EndStage(1);
  EXPECT_GT(next, sequence);
  EXPECT_FALSE(p.StagedIntact(1, sequence));
  EXPECT_NE(p.StagedData(1, next, 100), nullptr);

  // The other way.
  std::memset(p.BeginStage(0), 0x33, 10);
  const uint64_t back = p.EndStage(0);
  ASSERT_NE(d.StagedData(0, back, 10), nullptr);
  EXPECT_EQ(d.StagedData(0, back, 10)[9], 0x33);
}

TEST_F(ShmChannelStageTest, TheReaderSaysWhichFillItIsDoneWith) {
  ShmChannel& d = *daemon_;
  ShmChannel& p = *process_;
  d.BeginStage(2);
  const uint64_t first = d.EndStage(2);
  EXPECT_FALSE(d.Taken(2, first)) << "not before the reader says so";
  p.MarkTaken(2, first);
  EXPECT_TRUE(d.Taken(2, first));
  EXPECT_FALSE(p.Taken(2, first)) << "each side's word is about its own area";
  // The next fill is not taken by the word the last one left.
  d.BeginStage(2);
  const uint64_t second = d.EndStage(2);
  EXPECT_FALSE(d.Taken(2, second));
  // Out of range: nothing written, nothing taken.
  p.MarkTaken(4, second);
  EXPECT_FALSE(d.Taken(4, second));
  // The word leaves the chunk's data and sequence alone.
  p.MarkTaken(2, second);
  EXPECT_TRUE(d.Taken(2, second));
  EXPECT_TRUE(p.StagedIntact(2, second));
}

TEST(ShmChannelStageLimitsTest, TooManyChunksAreRefused) {
  EXPECT_FALSE(ShmChannel::Create(8, 1518, transport::kMaxStageChunks + 1).ok());
  auto plain = ShmChannel::Create(8, 1518);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->stage_chunks(), 0u);
  EXPECT_EQ((*plain)->StagedData(0, 2, 1), nullptr);
}

}  // namespace
}  // namespace uroce::host
