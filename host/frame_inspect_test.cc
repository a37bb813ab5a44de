// InspectFrame against the packet parser (transport/packet_parser.h): the
// switch must route a frame as RoCE exactly when the parser, the receiving
// engine's own check short of the ICRC, takes it, and with the same
// addresses, QPNs and UD payload. The frames are the rxe captures
// (testdata/captures, the outside oracle), the neighbour frames of the fuzz
// corpus, and seeded mutations of both: every short length, byte changes in
// the headers, and bytes after the packet.
//
// The capture and corpus files come as arguments.
#include "host/frame_inspect.h"

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/pcap_file.h"
#include "transport/opcode.h"
#include "transport/packet_parser.h"
#include "transport/wire_types.h"

namespace uroce::host {
namespace {

std::vector<std::string>& InputPaths() {
  static std::vector<std::string> paths;
  return paths;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::vector<uint8_t>> BaseFrames() {
  std::vector<std::vector<uint8_t>> frames;
  for (const std::string& path : InputPaths()) {
    if (EndsWith(path, ".pcap")) {
      auto reader = PcapReader::Open(path);
      EXPECT_TRUE(reader.ok()) << reader.status().ToString();
      if (!reader.ok()) continue;
      PcapRecord record;
      while (true) {
        auto more = reader->Next(&record);
        if (!more.ok() || !*more) break;
        frames.emplace_back(record.data, record.data + record.captured_length);
      }
    } else {
      std::ifstream in(path, std::ios::binary);
      frames.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  return frames;
}

// Every base frame, then its mutations, seeded so that a failure replays.
std::vector<std::vector<uint8_t>> AllFrames() {
  const std::vector<std::vector<uint8_t>> base = BaseFrames();
  std::vector<std::vector<uint8_t>> frames = base;
  std::mt19937 random(34);
  for (const auto& frame : base) {
    // Every length up to the end of a BTH and DETH, and the last few.
    for (size_t length = 0; length < frame.size() && length < 80; ++length) {
      frames.emplace_back(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(length));
    }
    for (size_t cut = 1; cut <= 8 && cut < frame.size(); ++cut) {
      frames.emplace_back(frame.begin(), frame.end() - static_cast<std::ptrdiff_t>(cut));
    }
    // Bytes after the packet (Ethernet padding, or anything).
    for (size_t extra : {1, 4, 46}) {
      std::vector<uint8_t> longer = frame;
      longer.resize(frame.size() + extra, 0xA5);
      frames.push_back(std::move(longer));
    }
    // One to three header bytes changed (lengths, versions, protocol, port,
    // opcode, pad count, QPNs).
    for (int k = 0; k < 40; ++k) {
      std::vector<uint8_t> changed = frame;
      const size_t span = std::min<size_t>(changed.size(), 80);
      if (span == 0) break;
      const int count = 1 + static_cast<int>(random() % 3);
      for (int j = 0; j < count; ++j) changed[random() % span] = static_cast<uint8_t>(random());
      frames.push_back(std::move(changed));
    }
  }
  return frames;
}

// A single-segment mbuf over `bytes` that needs no pool: InspectFrame reads
// only the first segment's data.
rte_mbuf MbufOver(std::vector<uint8_t>& bytes) {
  rte_mbuf m{};
  m.buf_addr = bytes.data();
  m.data_off = 0;
  m.data_len = static_cast<uint16_t>(bytes.size());
  m.pkt_len = static_cast<uint32_t>(bytes.size());
  m.nb_segs = 1;
  return m;
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::ostringstream out;
  for (size_t i = 0; i < bytes.size() && i < 96; ++i) {
    static const char kDigits[] = "0123456789abcdef";
    out << kDigits[bytes[i] >> 4] << kDigits[bytes[i] & 15];
  }
  return out.str();
}

TEST(FrameInspectTest, RoutesAsRoceExactlyWhatTheParserTakes) {
  ASSERT_GE(InputPaths().size(), 13u) << "pass the capture files and the neighbour corpus as arguments";
  const transport::ParseOptions switch_options{.verify_icrc = false, .verify_ipv4_checksum = false};
  size_t roce = 0, ud = 0, cm = 0, refused_roce = 0, neighbor = 0, other = 0, malformed = 0, disagreements = 0;
  std::map<std::string, size_t> kinds;  // how they disagree, for the failure report
  std::vector<std::vector<uint8_t>> frames = AllFrames();
  for (auto& frame : frames) {
    transport::PacketView view;
    const transport::ParseError e = transport::ParsePacket(frame.data(), frame.size(), switch_options, &view);
    const rte_mbuf m = MbufOver(frame);
    FrameInfo info;
    const bool inspected = InspectFrame(&m, &info);
    auto disagree = [&](const char* what) {
      kinds[what]++;
      if (++disagreements <= 10) {
        ADD_FAILURE() << what << " (parser: " << transport::ParseErrorName(e) << ", " << frame.size() << " bytes) "
                      << Hex(frame);
      }
    };
    if (!inspected) {
      malformed++;
      if (e == transport::ParseError::kOk && !view.fields.has_vlan) disagree("a frame the parser takes is malformed");
      continue;
    }
    if (info.kind != FrameInfo::Kind::kRoce) {
      (info.kind == FrameInfo::Kind::kNeighbor ? neighbor : other)++;
      if (view.is_roce && !view.fields.has_vlan) disagree("UDP 4791 that is not routed as RoCE nor malformed");
      continue;
    }
    roce++;
    if (e != transport::ParseError::kOk) {
      refused_roce++;
      disagree("routed as RoCE, but the parser refuses it");
      continue;
    }
    if (view.fields.has_vlan) disagree("a tagged frame routed as RoCE (the switch's ports are untagged)");
    const bool view_ud = view.opcode->service == transport::TransportService::kUd;
    if (info.src_ip != view.fields.src_gid || info.dst_ip != view.fields.dst_gid) disagree("addresses differ");
    if (info.ipv6_header != (view.fields.ip_version == transport::IpVersion::kIpv6)) disagree("IP version differs");
    if (info.dest_qpn != view.fields.bth.dest_qp) disagree("destination QPN differs");
    if (info.ud != view_ud) disagree("UD differs");
    if (!view_ud) continue;
    ud++;
    if (info.src_qpn == 1 && info.dest_qpn == 1) cm++;
    if (info.src_qpn != view.fields.deth.src_qp) disagree("source QPN differs");
    if (info.payload != static_cast<size_t>(view.payload - frame.data())) disagree("payload offset differs");
    if (info.payload_length != view.fields.payload_length) disagree("payload length differs");
  }
  for (const auto& [what, count] : kinds) std::printf("%zu frames: %s\n", count, what.c_str());
  EXPECT_EQ(disagreements, 0u);
  EXPECT_EQ(refused_roce, 0u);
  // The inputs reach every kind, so the comparison above is not empty.
  EXPECT_GT(roce, 1000u);
  EXPECT_GT(ud, 100u);
  EXPECT_GT(cm, 10u);
  EXPECT_GT(neighbor, 100u);
  EXPECT_GT(other, 100u);
  EXPECT_GT(malformed, 1000u);
  std::printf("%zu frames: %zu RoCE (%zu UD, %zu to and from QP 1), %zu neighbour, %zu other, %zu malformed\n",
              frames.size(), roce, ud, cm, neighbor, other, malformed);
}

}  // namespace
}  // namespace uroce::host

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) uroce::host::InputPaths().push_back(argv[i]);
  return RUN_ALL_TESTS();
}
