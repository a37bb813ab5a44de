#include "common/pcap_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace uroce {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::vector<uint8_t> Header(bool big_endian, bool nanoseconds, uint32_t link_type = 1) {
  std::vector<uint8_t> h(24, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) h[at + i] = static_cast<uint8_t>(big_endian ? v >> (24 - 8 * i) : v >> (8 * i));
  };
  auto put16 = [&](size_t at, uint16_t v) {
    h[at] = static_cast<uint8_t>(big_endian ? v >> 8 : v);
    h[at + 1] = static_cast<uint8_t>(big_endian ? v : v >> 8);
  };
  put32(0, nanoseconds ? 0xA1B23C4D : 0xA1B2C3D4);
  put16(4, 2);
  put16(6, 4);
  put32(16, 65535);
  put32(20, link_type);
  return h;
}

void AppendRecord(std::vector<uint8_t>& file, bool big_endian, uint32_t sec, uint32_t frac,
                  const std::vector<uint8_t>& data) {
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) file.push_back(static_cast<uint8_t>(big_endian ? v >> (24 - 8 * i) : v >> (8 * i)));
  };
  put32(sec);
  put32(frac);
  put32(static_cast<uint32_t>(data.size()));
  put32(static_cast<uint32_t>(data.size()));
  file.insert(file.end(), data.begin(), data.end());
}

TEST(PcapReaderTest, ReadsAllFourVariants) {
  for (bool big : {false, true}) {
    for (bool nano : {false, true}) {
      std::vector<uint8_t> file = Header(big, nano);
      AppendRecord(file, big, 7, 5, {1, 2, 3});
      AppendRecord(file, big, 8, 0, {});
      auto reader = PcapReader::FromBytes(file, "mem");
      ASSERT_TRUE(reader.ok()) << reader.status().ToString();
      EXPECT_EQ(reader->big_endian(), big);
      EXPECT_EQ(reader->nanosecond_timestamps(), nano);
      PcapRecord r;
      auto more = reader->Next(&r);
      ASSERT_TRUE(more.ok() && *more);
      EXPECT_EQ(r.captured_length, 3u);
      EXPECT_EQ(r.data[2], 3);
      EXPECT_EQ(r.timestamp_ns, 7000000000ull + (nano ? 5 : 5000));
      more = reader->Next(&r);
      ASSERT_TRUE(more.ok() && *more);
      EXPECT_EQ(r.captured_length, 0u);
      more = reader->Next(&r);
      ASSERT_TRUE(more.ok());
      EXPECT_FALSE(*more);
    }
  }
}

TEST(PcapReaderTest, BadFilesAreClearErrors) {
  auto missing = PcapReader::Open(TempPath("does-not-exist.pcap"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto empty = PcapReader::FromBytes({}, "empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("not a pcap file"), std::string::npos);

  auto text = PcapReader::FromBytes({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, "text");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("bad magic"), std::string::npos);

  auto pcapng = PcapReader::FromBytes({0x0A, 0x0D, 0x0D, 0x0A, 0, 0, 0, 0}, "ng");
  ASSERT_FALSE(pcapng.ok());
  EXPECT_NE(pcapng.status().message().find("pcapng"), std::string::npos);

  std::vector<uint8_t> short_header = Header(false, false);
  short_header.resize(20);
  EXPECT_FALSE(PcapReader::FromBytes(short_header, "short").ok());

  auto linux_sll = PcapReader::FromBytes(Header(false, false, 113), "sll");
  ASSERT_FALSE(linux_sll.ok());
  EXPECT_NE(linux_sll.status().message().find("link type 113"), std::string::npos);

  std::vector<uint8_t> cut = Header(false, false);
  AppendRecord(cut, false, 1, 1, std::vector<uint8_t>(100, 7));
  cut.resize(cut.size() - 1);
  auto reader = PcapReader::FromBytes(cut, "cut");
  ASSERT_TRUE(reader.ok());
  PcapRecord r;
  auto more = reader->Next(&r);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("truncated"), std::string::npos);

  std::vector<uint8_t> cut_header = Header(false, false);
  cut_header.resize(24 + 10);
  reader = PcapReader::FromBytes(cut_header, "cut header");
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(reader->Next(&r).ok());
}

TEST(PcapWriterTest, WhatItWritesReadsBack) {
  const std::string path = TempPath("written.pcap");
  {
    auto writer = PcapWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    const std::vector<uint8_t> a = {1, 2, 3, 4}, b(1500, 0xEE);
    ASSERT_TRUE(writer->Write(a.data(), a.size(), 1500000000123456789ull).ok());
    ASSERT_TRUE(writer->Write(b.data(), b.size(), 1500000001000000000ull).ok());
    ASSERT_TRUE(writer->Close().ok());
  }
  auto reader = PcapReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  PcapRecord r;
  ASSERT_TRUE(*reader->Next(&r));
  EXPECT_EQ(r.captured_length, 4u);
  EXPECT_EQ(r.timestamp_ns, 1500000000123456000ull);  // microseconds kept
  ASSERT_TRUE(*reader->Next(&r));
  EXPECT_EQ(r.captured_length, 1500u);
  EXPECT_EQ(r.data[1499], 0xEE);
  EXPECT_FALSE(*reader->Next(&r));
}

}  // namespace
}  // namespace uroce
