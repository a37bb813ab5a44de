// Real RoCEv2 frames from the Linux kernel's rxe (testdata/captures, see its
// README) as the outside oracle: every frame decodes with a correct ICRC,
// building the decoded fields again gives the same bytes, and the ICRC
// covers exactly what IBTA says it covers.
//
// The capture files come as arguments ($(rootpaths //testdata/captures:pcaps)).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/pcap_file.h"
#include "transport/icrc.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

std::vector<std::string>& CapturePaths() {
  static std::vector<std::string> paths;
  return paths;
}

std::string BaseName(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

struct Frame {
  std::string file;
  size_t number = 0;  // 1-based, as Wireshark counts
  std::vector<uint8_t> bytes;
};

std::vector<Frame> ReadAll(const std::string& path) {
  std::vector<Frame> frames;
  auto reader = PcapReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return frames;
  PcapRecord record;
  while (true) {
    auto more = reader->Next(&record);
    EXPECT_TRUE(more.ok()) << more.status().ToString();
    if (!more.ok() || !*more) break;
    EXPECT_EQ(record.captured_length, record.original_length) << path << ": a frame cut by the snap length";
    frames.push_back({BaseName(path), frames.size() + 1,
                      std::vector<uint8_t>(record.data, record.data + record.captured_length)});
  }
  return frames;
}

// Frames to UDP port 4791, with their parse.
struct RoceFrame {
  Frame frame;
  PacketView view;  // points into frame.bytes: keep RoceFrame where it is
};

std::map<std::string, std::vector<Frame>>& AllFrames() {
  static std::map<std::string, std::vector<Frame>> all;
  if (all.empty()) {
    for (const std::string& path : CapturePaths()) all[BaseName(path)] = ReadAll(path);
  }
  return all;
}

TEST(CapturesTest, TheCapturesAreThere) {
  // The README lists 13 files; each must have come through.
  ASSERT_GE(CapturePaths().size(), 13u) << "pass the capture files as arguments";
  for (const char* name : {"rc_pingpong_64.pcap", "rc_pingpong_4096.pcap", "uc_pingpong_2048.pcap",
                           "ud_pingpong_512.pcap", "send_bw_64.pcap", "send_bw_8192.pcap", "write_bw_64.pcap",
                           "write_bw_8192.pcap", "write_bw_ipv6_64.pcap", "read_bw_64.pcap", "atomic_cmp_swap.pcap",
                           "rping_rdma_cm.pcap", "host_ud_interop.pcap"}) {
    EXPECT_EQ(AllFrames().count(name), 1u) << name;
  }
}

TEST(CapturesTest, EveryRoceFrameParsesWithCorrectIcrc) {
  size_t roce = 0;
  for (const auto& [file, frames] : AllFrames()) {
    size_t roce_in_file = 0;
    for (const Frame& f : frames) {
      PacketView view;
      const ParseError e = ParsePacket(f.bytes.data(), f.bytes.size(), ParseOptions{}, &view);
      if (!view.is_roce) {
        EXPECT_EQ(e, ParseError::kNotRoce) << file << " frame " << f.number;
        continue;
      }
      ++roce_in_file;
      EXPECT_EQ(e, ParseError::kOk) << file << " frame " << f.number << ": " << ParseErrorName(e);
      EXPECT_TRUE(view.icrc_ok()) << file << " frame " << f.number;
      EXPECT_EQ(view.packet_end, f.bytes.size()) << file << " frame " << f.number << ": Ethernet padding";
    }
    EXPECT_GT(roce_in_file, 0u) << file;
    roce += roce_in_file;
  }
  EXPECT_GT(roce, 500u);
}

TEST(CapturesTest, BuildingTheDecodedFieldsReproducesEveryFrame) {
  for (const auto& [file, frames] : AllFrames()) {
    for (const Frame& f : frames) {
      PacketView view;
      if (ParsePacket(f.bytes.data(), f.bytes.size(), ParseOptions{}, &view) != ParseError::kOk) continue;
      std::vector<uint8_t> rebuilt(FrameLength(view.fields));
      size_t length = 0;
      ASSERT_EQ(BuildPacket(view.fields, view.payload, rebuilt.data(), rebuilt.size(), &length), BuildError::kOk)
          << file << " frame " << f.number;
      ASSERT_EQ(length, view.packet_end) << file << " frame " << f.number;
      for (size_t i = 0; i < length; ++i) {
        ASSERT_EQ(rebuilt[i], f.bytes[i]) << file << " frame " << f.number << " byte " << i;
      }
    }
  }
}

// Byte positions (from the IP header) the ICRC takes as all ones.
std::vector<std::pair<size_t, uint8_t>> MaskedBits(const PacketView& v) {
  const size_t udp = v.ip_header_bytes;
  const size_t bth = udp + 8;
  std::vector<std::pair<size_t, uint8_t>> masked;  // offset, mask of bits
  if (v.fields.ip_version == IpVersion::kIpv4) {
    masked = {{1, 0xFF}, {8, 0xFF}, {10, 0xFF}, {11, 0xFF}};
  } else {
    masked = {{0, 0x0F}, {1, 0xFF}, {2, 0xFF}, {3, 0xFF}, {7, 0xFF}};
  }
  masked.push_back({udp + 6, 0xFF});
  masked.push_back({udp + 7, 0xFF});
  masked.push_back({bth + 4, 0xFF});
  return masked;
}

// Flips every bit the ICRC covers in one frame of each kind: masked bits
// keep it, every other bit breaks it. Bits outside the IP packet (the
// Ethernet header) are not covered.
TEST(CapturesTest, MaskedFieldsKeepTheIcrcAndEveryCoveredBitBreaksIt) {
  std::map<std::string, int> kinds_checked;
  for (const auto& [file, frames] : AllFrames()) {
    for (const Frame& f : frames) {
      PacketView view;
      if (ParsePacket(f.bytes.data(), f.bytes.size(), ParseOptions{}, &view) != ParseError::kOk) continue;
      const std::string kind = std::string(view.opcode->name) +
                               (view.fields.ip_version == IpVersion::kIpv4 ? " v4" : " v6");
      if (kinds_checked[kind]++ > 0) continue;

      const auto masked = MaskedBits(view);
      std::vector<uint8_t> bytes = f.bytes;
      const size_t l3 = view.l3_offset;
      const size_t icrc_at = view.packet_end - kIcrcBytes;
      const IpVersion version = view.fields.ip_version;
      for (size_t i = l3; i < icrc_at; ++i) {
        uint8_t mask = 0;
        for (const auto& [offset, bits] : masked) {
          if (offset == i - l3) mask = bits;
        }
        for (int bit = 0; bit < 8; ++bit) {
          bytes[i] ^= static_cast<uint8_t>(1 << bit);
          const uint32_t icrc = ComputeIcrc(bytes.data() + l3, view.ip_header_bytes, version, icrc_at - l3);
          if (mask & (1 << bit)) {
            ASSERT_EQ(icrc, view.icrc_stored) << file << " frame " << f.number << " byte " << i << " bit " << bit;
          } else {
            ASSERT_NE(icrc, view.icrc_stored) << file << " frame " << f.number << " byte " << i << " bit " << bit;
          }
          bytes[i] ^= static_cast<uint8_t>(1 << bit);
        }
      }
      // Whole masked fields rewritten, as a router would: still a good packet
      // (the IPv4 header checksum aside, which TTL changes would make right).
      for (const auto& [offset, bits] : masked) bytes[l3 + offset] ^= bits;
      PacketView changed;
      EXPECT_EQ(ParsePacket(bytes.data(), bytes.size(), {.verify_icrc = true, .verify_ipv4_checksum = false},
                            &changed),
                ParseError::kOk)
          << file << " frame " << f.number;
      // The Ethernet header is not covered.
      bytes = f.bytes;
      for (size_t i = 0; i < 12; ++i) bytes[i] ^= 0xFF;
      EXPECT_EQ(ParsePacket(bytes.data(), bytes.size(), ParseOptions{}, &changed), ParseError::kOk);
    }
  }
  // RC, UC and UD kinds over IPv4, and IPv6.
  EXPECT_GE(kinds_checked.size(), 10u);
  EXPECT_EQ(kinds_checked.count("RC RDMA_WRITE_ONLY v6"), 1u);
  EXPECT_EQ(kinds_checked.count("UD SEND_ONLY v4"), 1u);
  EXPECT_EQ(kinds_checked.count("RC ATOMIC_ACKNOWLEDGE v4"), 1u);
}

// Facts the captures' README states, read back through the parser.
const PacketView ParseOk(const Frame& f) {
  PacketView view;
  EXPECT_EQ(ParsePacket(f.bytes.data(), f.bytes.size(), ParseOptions{}, &view), ParseError::kOk);
  return view;
}

TEST(CapturesTest, FactsFromTheReadme) {
  auto& all = AllFrames();
  // send_bw_8192: rxe restarts the message at frame 114 from the First PSN of frame 109.
  const auto& retry = all["send_bw_8192.pcap"];
  ASSERT_GE(retry.size(), 127u);
  const PacketView first = ParseOk(retry[109 - 1]);
  const PacketView again = ParseOk(retry[114 - 1]);
  EXPECT_EQ(first.fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcSendFirst));
  EXPECT_EQ(again.fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcSendFirst));
  EXPECT_EQ(again.fields.bth.psn, first.fields.bth.psn);
  EXPECT_EQ(ParseOk(retry[121 - 1]).fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcSendLast));
  EXPECT_EQ(ParseOk(retry[127 - 1]).fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcAcknowledge));

  // UD Q_Key 0x11111111; the CM's QP1 Q_Key 0x80010000.
  EXPECT_EQ(ParseOk(all["ud_pingpong_512.pcap"][0]).fields.deth.qkey, 0x11111111u);
  const PacketView cm = ParseOk(all["rping_rdma_cm.pcap"][0]);
  EXPECT_EQ(cm.fields.bth.dest_qp, 1u);
  EXPECT_EQ(cm.fields.deth.qkey, 0x80010000u);

  // WRITE First carries the whole message's DMA length; path MTU 1024.
  const PacketView write_first = ParseOk(all["write_bw_8192.pcap"][0]);
  EXPECT_EQ(write_first.fields.bth.opcode, static_cast<uint8_t>(Opcode::kRcRdmaWriteFirst));
  EXPECT_EQ(write_first.fields.reth.dma_length, 8192u);
  EXPECT_EQ(write_first.fields.payload_length, 1024u);

  // IPv6: fd77::2 -> fd77::3.
  const PacketView v6 = ParseOk(all["write_bw_ipv6_64.pcap"][0]);
  EXPECT_EQ(v6.fields.ip_version, IpVersion::kIpv6);
  const Gid fd77_3 = {0xFD, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
  EXPECT_EQ(v6.fields.dst_gid, fd77_3);

  // Every frame from kernel rxe leaves the UDP checksum 0.
  for (const auto& [file, frames] : all) {
    for (const Frame& f : frames) {
      PacketView view;
      if (ParsePacket(f.bytes.data(), f.bytes.size(), ParseOptions{}, &view) == ParseError::kOk) {
        EXPECT_EQ(view.fields.udp_checksum, 0) << file << " frame " << f.number;
      }
    }
  }
}

}  // namespace
}  // namespace uroce::transport

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) uroce::transport::CapturePaths().push_back(argv[i]);
  return RUN_ALL_TESTS();
}
