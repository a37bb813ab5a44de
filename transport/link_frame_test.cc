// The link form of a RoCEv2 packet (transport/link_frame.h): what a wire
// frame becomes, that the link parser reads back the same transport, and
// that the shapes without one are left alone.
#include "transport/link_frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/headers.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

PacketFields SendFields(IpVersion version, uint8_t opcode, uint32_t payload_length) {
  PacketFields f;
  f.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  f.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  f.ip_version = version;
  if (version == IpVersion::kIpv4) {
    f.src_gid = Ipv4MappedGid(0x0A000001);
    f.dst_gid = Ipv4MappedGid(0x0A000001);
  } else {
    f.src_gid = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    f.dst_gid = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    f.ipv6_flow_label = 0x12345;
  }
  f.traffic_class = 0x6A;  // DSCP 26, ECT(0)
  f.hop_limit = 17;
  f.udp_src_port = 0xC123;
  f.bth.opcode = opcode;
  f.bth.dest_qp = 0x030011;
  f.bth.psn = Psn(0xABCDE);
  f.bth.ack_request = true;
  f.deth.qkey = 0x11111111;
  f.deth.src_qp = 0x070002;
  f.payload_length = payload_length;
  return f;
}

std::vector<uint8_t> Build(const PacketFields& f) {
  std::vector<uint8_t> payload(f.payload_length);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> frame(FrameLength(f));
  size_t length = 0;
  EXPECT_EQ(BuildPacket(f, payload.data(), frame.data(), frame.size(), &length), BuildError::kOk);
  frame.resize(length);
  return frame;
}

TEST(LinkFrameTest, AConnectedPacketCrossesWithoutEthernetIpUdpOrIcrcAndParsesTheSame) {
  for (IpVersion version : {IpVersion::kIpv4, IpVersion::kIpv6}) {
    // 61 bytes: a pad of 3.
    const std::vector<uint8_t> wire = Build(SendFields(version, uint8_t(Opcode::kRcSendOnly), 61));
    PacketView from_wire;
    ASSERT_EQ(ParsePacket(wire.data(), wire.size(), ParseOptions{}, &from_wire), ParseError::kOk);
    std::vector<uint8_t> link(wire.size());
    const size_t length = WriteLinkFrame(wire.data(), wire.size(), link.data(), link.size());
    const size_t transport = from_wire.packet_end - kIcrcBytes - from_wire.bth_offset;
    ASSERT_EQ(length, kLinkHeaderBytes + transport);
    EXPECT_LT(length, wire.size());
    EXPECT_EQ(std::memcmp(link.data() + kLinkHeaderBytes, wire.data() + from_wire.bth_offset, transport), 0);
    uint32_t qpn = 0;
    ASSERT_TRUE(LinkFrameDestQp(link.data(), length, &qpn));
    EXPECT_EQ(qpn, 0x030011u);

    PacketView from_link;
    ASSERT_EQ(ParseLinkFrame(link.data(), length, &from_link), ParseError::kOk);
    const PacketFields& a = from_wire.fields;
    const PacketFields& b = from_link.fields;
    EXPECT_EQ(b.ip_version, version);
    EXPECT_EQ(b.src_gid, a.src_gid);
    EXPECT_EQ(b.dst_gid, a.dst_gid);
    EXPECT_EQ(b.traffic_class, 0x6A);
    EXPECT_EQ(b.hop_limit, 17);
    EXPECT_EQ(b.udp_src_port, 0xC123);
    EXPECT_EQ(b.bth.opcode, a.bth.opcode);
    EXPECT_EQ(b.bth.dest_qp, a.bth.dest_qp);
    EXPECT_EQ(b.bth.psn.value(), a.bth.psn.value());
    EXPECT_TRUE(b.bth.ack_request);
    EXPECT_EQ(b.bth.pad_count, 3);
    EXPECT_EQ(b.payload_length, 61u);
    EXPECT_EQ(std::memcmp(from_link.payload, from_wire.payload, 61), 0);
    EXPECT_FALSE(from_link.icrc_checked);
    EXPECT_EQ(from_link.bth_offset, kLinkHeaderBytes);
    EXPECT_EQ(from_link.packet_end, length);
  }
}

TEST(LinkFrameTest, ShapesWithoutALinkFormAreLeftAlone) {
  std::vector<uint8_t> out(2048);
  // UD: its receive completion carries the IP header (the GRH).
  const std::vector<uint8_t> ud = Build(SendFields(IpVersion::kIpv4, uint8_t(Opcode::kUdSendOnly), 8));
  EXPECT_EQ(WriteLinkFrame(ud.data(), ud.size(), out.data(), out.size()), 0u);
  // Tagged, and with IPv4 options: what the fixed offsets do not read.
  PacketFields tagged = SendFields(IpVersion::kIpv4, uint8_t(Opcode::kRcSendOnly), 8);
  tagged.has_vlan = true;
  tagged.vlan_tci = 5;
  const std::vector<uint8_t> vlan = Build(tagged);
  EXPECT_EQ(WriteLinkFrame(vlan.data(), vlan.size(), out.data(), out.size()), 0u);
  std::vector<uint8_t> rc = Build(SendFields(IpVersion::kIpv4, uint8_t(Opcode::kRcSendOnly), 8));
  std::vector<uint8_t> options = rc;
  options[14] = 0x46;
  EXPECT_EQ(WriteLinkFrame(options.data(), options.size(), out.data(), out.size()), 0u);
  // Lengths that disagree, a frame cut short, no room.
  std::vector<uint8_t> longer = rc;
  longer[17] += 4;  // the IP total length past the frame
  EXPECT_EQ(WriteLinkFrame(longer.data(), longer.size(), out.data(), out.size()), 0u);
  EXPECT_EQ(WriteLinkFrame(rc.data(), 40, out.data(), out.size()), 0u);
  EXPECT_EQ(WriteLinkFrame(rc.data(), rc.size(), out.data(), kLinkHeaderBytes + 8), 0u);
  EXPECT_GT(WriteLinkFrame(rc.data(), rc.size(), out.data(), out.size()), 0u);
}

TEST(LinkFrameTest, TheLinkParserRefusesWhatIsNotALinkFrame) {
  const std::vector<uint8_t> wire = Build(SendFields(IpVersion::kIpv4, uint8_t(Opcode::kRcSendOnly), 8));
  std::vector<uint8_t> link(wire.size());
  const size_t length = WriteLinkFrame(wire.data(), wire.size(), link.data(), link.size());
  ASSERT_GT(length, 0u);
  PacketView view;
  auto parse = [&](std::vector<uint8_t> bytes, size_t n) { return ParseLinkFrame(bytes.data(), n, &view); };
  EXPECT_EQ(parse(link, kLinkHeaderBytes + 11), ParseError::kTruncated);
  EXPECT_EQ(ParseLinkFrame(nullptr, 0, &view), ParseError::kTruncated);
  std::vector<uint8_t> bad = link;
  bad[0] = 5;  // no such IP version
  EXPECT_EQ(parse(bad, length), ParseError::kNotRoce);
  bad = link;
  bad[7] = 1;  // a reserved byte
  EXPECT_EQ(parse(bad, length), ParseError::kNotRoce);
  bad = link;
  bad[kLinkSrcGidOffset] = 0xfd;  // "IPv4" from an address that is not ::ffff:a.b.c.d
  EXPECT_EQ(parse(bad, length), ParseError::kNotRoce);
  bad = link;
  bad[kLinkHeaderBytes] = uint8_t(Opcode::kUdSendOnly);  // UD never goes in link form
  EXPECT_EQ(parse(bad, length), ParseError::kUnknownOpcode);
  // The transport is checked as on the wire: a payload not a whole number
  // of words.
  EXPECT_EQ(parse(link, length - 1), ParseError::kBadLengthForOpcode);
  EXPECT_EQ(parse(link, length), ParseError::kOk);
}

TEST(LinkFrameTest, WriteIcrcGivesAFrameBuiltWithoutOneItsIcrc) {
  for (IpVersion version : {IpVersion::kIpv4, IpVersion::kIpv6}) {
    const std::vector<uint8_t> whole = Build(SendFields(version, uint8_t(Opcode::kRcSendOnly), 100));
    std::vector<uint8_t> left_out = whole;
    std::memset(left_out.data() + left_out.size() - kIcrcBytes, 0, kIcrcBytes);
    PacketView view;
    EXPECT_EQ(ParsePacket(left_out.data(), left_out.size(), ParseOptions{}, &view), ParseError::kBadIcrc);
    ASSERT_TRUE(WriteIcrc(left_out.data(), left_out.size()));
    EXPECT_EQ(left_out, whole);
  }
  // Not RoCE (ARP): untouched.
  std::vector<uint8_t> arp(60, 0xEE);
  arp[12] = 0x08;
  arp[13] = 0x06;
  const std::vector<uint8_t> before = arp;
  EXPECT_FALSE(WriteIcrc(arp.data(), arp.size()));
  EXPECT_EQ(arp, before);
}

}  // namespace
}  // namespace uroce::transport
