#include "transport/pull_descriptor.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::transport {
namespace {

PullDescriptor TwoSegments() {
  PullDescriptor d;
  d.packets = 3;
  d.count = 2;
  d.total = 5000;
  d.segments[0] = {0x7f0000001000, 4096};
  d.segments[1] = {0x7f0000100000, 904};
  return d;
}

std::vector<uint8_t> Written(const PullDescriptor& d) {
  std::vector<uint8_t> bytes(PullDescriptorBytes(d.count));
  EXPECT_EQ(WritePullDescriptor(d, bytes.data()), bytes.size());
  return bytes;
}

TEST(PullDescriptorTest, WhatIsWrittenParsesBack) {
  const std::vector<uint8_t> bytes = Written(TwoSegments());
  ASSERT_EQ(bytes.size(), 16u + 2 * 16u);
  PullDescriptor d;
  ASSERT_TRUE(ParsePullDescriptor(bytes.data(), bytes.size(), &d));
  EXPECT_EQ(d.packets, 3u);
  EXPECT_EQ(d.count, 2u);
  EXPECT_EQ(d.total, 5000u);
  EXPECT_EQ(d.segments[0].address, 0x7f0000001000u);
  EXPECT_EQ(d.segments[1].length, 904u);
}

TEST(PullDescriptorTest, RefusesWhatAnotherProcessCouldGetWrong) {
  PullDescriptor d;
  const std::vector<uint8_t> good = Written(TwoSegments());
  // Not exactly its length: one byte short, one byte more.
  EXPECT_FALSE(ParsePullDescriptor(good.data(), good.size() - 1, &d));
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(ParsePullDescriptor(longer.data(), longer.size(), &d));
  EXPECT_FALSE(ParsePullDescriptor(nullptr, 0, &d));

  auto refused = [](PullDescriptor bad) {
    PullDescriptor out;
    const std::vector<uint8_t> bytes = Written(bad);
    return !ParsePullDescriptor(bytes.data(), bytes.size(), &out);
  };
  PullDescriptor bad = TwoSegments();
  bad.total = 5001;  // the segments say 5000
  EXPECT_TRUE(refused(bad));
  bad = TwoSegments();
  bad.packets = 0;
  EXPECT_TRUE(refused(bad));
  bad.packets = kMaxPullPackets + 1;
  EXPECT_TRUE(refused(bad));
  bad = TwoSegments();
  bad.segments[1].length = 0;  // an empty segment
  bad.segments[0].length = 5000;
  EXPECT_TRUE(refused(bad));
  bad = TwoSegments();
  bad.segments[0].address = ~0ull - 10;  // wraps around the address space
  EXPECT_TRUE(refused(bad));
  bad = TwoSegments();
  // Lengths whose sum wraps 64 bits to the total.
  bad.segments[0].length = (1ull << 63);
  bad.segments[1].length = (1ull << 63) + 5000;
  EXPECT_TRUE(refused(bad));
  bad = TwoSegments();
  bad.total = kMaxPullBytes + 1;
  bad.segments[0].length = kMaxPullBytes + 1 - 904;
  EXPECT_TRUE(refused(bad));
  // Too many segments, or none, as the count says.
  std::vector<uint8_t> many = good;
  many[4] = kMaxPullSegments + 1;
  EXPECT_FALSE(ParsePullDescriptor(many.data(), many.size(), &d));
  many[4] = 0;
  EXPECT_FALSE(ParsePullDescriptor(many.data(), many.size(), &d));
}

TEST(StagedChunkTest, WhatIsWrittenParsesBack) {
  uint8_t bytes[kStagedChunkDescriptorBytes];
  ASSERT_EQ(WriteStagedChunk({.chunk = 5, .length = 65536, .sequence = 8}, bytes), sizeof(bytes));
  StagedChunk c;
  ASSERT_TRUE(ParseStagedChunk(bytes, sizeof(bytes), &c));
  EXPECT_EQ(c.chunk, 5u);
  EXPECT_EQ(c.length, 65536u);
  EXPECT_EQ(c.sequence, 8u);
}

TEST(StagedChunkTest, RefusesWhatAnotherProcessCouldGetWrong) {
  const StagedChunk bad[] = {
      {.chunk = kMaxStageChunks, .length = 100, .sequence = 2},      // no such chunk
      {.chunk = 0, .length = 0, .sequence = 2},                      // empty
      {.chunk = 0, .length = kStagedChunkBytes + 1, .sequence = 2},  // more than a chunk holds
      {.chunk = 0, .length = 100, .sequence = 0},                    // never filled
      {.chunk = 0, .length = 100, .sequence = 3},                    // odd: being written
  };
  for (const StagedChunk& b : bad) {
    uint8_t bytes[kStagedChunkDescriptorBytes];
    WriteStagedChunk(b, bytes);
    StagedChunk c;
    EXPECT_FALSE(ParseStagedChunk(bytes, sizeof(bytes), &c)) << b.chunk << " " << b.length << " " << b.sequence;
  }
  uint8_t longer[kStagedChunkDescriptorBytes + 1] = {};
  WriteStagedChunk({.chunk = 1, .length = 1, .sequence = 2}, longer);
  StagedChunk c;
  EXPECT_TRUE(ParseStagedChunk(longer, kStagedChunkDescriptorBytes, &c));
  EXPECT_FALSE(ParseStagedChunk(longer, sizeof(longer), &c));
  EXPECT_FALSE(ParseStagedChunk(longer, kStagedChunkDescriptorBytes - 1, &c));
  EXPECT_FALSE(ParseStagedChunk(nullptr, 0, &c));
}

}  // namespace
}  // namespace uroce::transport
