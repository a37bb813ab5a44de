// The builder and the parser against each other, and the parser against
// every kind of bad frame it must name.
#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "pmd/eal_test_environment.h"
#include "pmd/mempool.h"
#include "transport/icrc.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

// Fields with a distinct value in every slot, so a field the builder forgot
// or the parser misplaced cannot go unnoticed.
PacketFields SampleFields(Opcode opcode, IpVersion version, uint32_t payload_length, bool vlan) {
  PacketFields f;
  f.dst_mac = {0x52, 0x54, 0x00, 0x77, 0x00, 0x03};
  f.src_mac = {0x52, 0x54, 0x00, 0x77, 0x00, 0x02};
  f.has_vlan = vlan;
  f.vlan_tci = vlan ? 0xA123 : 0;
  f.ip_version = version;
  if (version == IpVersion::kIpv4) {
    f.src_gid = Ipv4MappedGid(0x0A4D0002u);
    f.dst_gid = Ipv4MappedGid(0x0A4D0003u);
  } else {
    f.src_gid = {0xFD, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    f.dst_gid = {0xFD, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 3};
    f.ipv6_flow_label = 0xABCDE;
  }
  f.traffic_class = 0x68;
  f.hop_limit = 57;
  f.ipv4_identification = version == IpVersion::kIpv4 ? 0xBEEF : 0;
  f.udp_src_port = 0xC121;
  f.bth.opcode = static_cast<uint8_t>(opcode);
  f.bth.solicited_event = true;
  f.bth.migration_request = true;
  f.bth.pkey = 0x8001;
  f.bth.dest_qp = 0x123456;
  f.bth.ack_request = true;
  f.bth.psn = Psn(0xFFFFFE);
  f.reth = {0x00007F0012345678ull, 0x11223344, 8192};
  f.aeth = {AethFields::Syndrome(AethKind::kAck, kAethInvalidCredits), 0x654321};
  f.atomic_eth = {0x00007F00DEADBEE8ull, 0x55667788, 0x0102030405060708ull, 0x1112131415161718ull};
  f.atomic_ack_eth = {0xA1A2A3A4A5A6A7A8ull};
  f.immediate_data = 0xCAFEF00D;
  f.invalidate_rkey = 0x99AABBCC;
  f.deth = {0x11111111, 0, 0x000042};
  f.xrc_srqn = 0xABCDEF;
  f.payload_length = payload_length;
  return f;
}

std::vector<uint8_t> Payload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Payload lengths each rule allows, spanning pad counts 0..3.
std::vector<uint32_t> AllowedPayloads(PayloadRule rule) {
  switch (rule) {
    case PayloadRule::kNone: return {0};
    case PayloadRule::kFullMtu: return {4, 256, 1024};
    case PayloadRule::kOneToMtu: return {1, 2, 3, 4, 61, 1024};
    case PayloadRule::kZeroToMtu: return {0, 1, 2, 3, 64, 4096};
    case PayloadRule::kExactlyEight: return {8};
    case PayloadRule::kExactlySixteen: return {16};
  }
  return {};
}

std::vector<uint8_t> Build(const PacketFields& f, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> frame(FrameLength(f));
  size_t length = 0;
  const BuildError e = BuildPacket(f, payload.data(), frame.data(), frame.size(), &length);
  EXPECT_EQ(e, BuildError::kOk) << BuildErrorName(e);
  EXPECT_EQ(length, frame.size());
  return frame;
}

// Every field the opcode carries came back as it went in.
void ExpectSameFields(const PacketFields& want, const PacketFields& got, const OpcodeInfo& op) {
  EXPECT_EQ(got.dst_mac, want.dst_mac);
  EXPECT_EQ(got.src_mac, want.src_mac);
  EXPECT_EQ(got.has_vlan, want.has_vlan);
  EXPECT_EQ(got.vlan_tci, want.vlan_tci);
  EXPECT_EQ(got.ip_version, want.ip_version);
  EXPECT_EQ(got.src_gid, want.src_gid);
  EXPECT_EQ(got.dst_gid, want.dst_gid);
  EXPECT_EQ(got.traffic_class, want.traffic_class);
  EXPECT_EQ(got.hop_limit, want.hop_limit);
  EXPECT_EQ(got.ipv4_identification, want.ipv4_identification);
  if (want.ip_version == IpVersion::kIpv4) {
    EXPECT_EQ(got.ipv4_flags_fragment, want.ipv4_flags_fragment);
  }
  EXPECT_EQ(got.ipv6_flow_label, want.ipv6_flow_label);
  EXPECT_EQ(got.udp_src_port, want.udp_src_port);
  EXPECT_EQ(got.udp_dst_port, want.udp_dst_port);
  EXPECT_EQ(got.udp_checksum, want.udp_checksum);
  EXPECT_EQ(got.bth.opcode, want.bth.opcode);
  EXPECT_EQ(got.bth.solicited_event, want.bth.solicited_event);
  EXPECT_EQ(got.bth.migration_request, want.bth.migration_request);
  EXPECT_EQ(got.bth.pad_count, (4 - want.payload_length % 4) % 4);
  EXPECT_EQ(got.bth.transport_version, want.bth.transport_version);
  EXPECT_EQ(got.bth.pkey, want.bth.pkey);
  EXPECT_EQ(got.bth.reserved_byte4, want.bth.reserved_byte4);
  EXPECT_EQ(got.bth.dest_qp, want.bth.dest_qp);
  EXPECT_EQ(got.bth.ack_request, want.bth.ack_request);
  EXPECT_EQ(got.bth.reserved7, want.bth.reserved7);
  EXPECT_EQ(got.bth.psn, want.bth.psn);
  if (op.has(kReth)) {
    EXPECT_EQ(got.reth.virtual_address, want.reth.virtual_address);
    EXPECT_EQ(got.reth.rkey, want.reth.rkey);
    EXPECT_EQ(got.reth.dma_length, want.reth.dma_length);
  }
  if (op.has(kAeth)) {
    EXPECT_EQ(got.aeth.syndrome, want.aeth.syndrome);
    EXPECT_EQ(got.aeth.msn, want.aeth.msn);
  }
  if (op.has(kAtomicEth)) {
    EXPECT_EQ(got.atomic_eth.virtual_address, want.atomic_eth.virtual_address);
    EXPECT_EQ(got.atomic_eth.rkey, want.atomic_eth.rkey);
    EXPECT_EQ(got.atomic_eth.swap_or_add_data, want.atomic_eth.swap_or_add_data);
    EXPECT_EQ(got.atomic_eth.compare_data, want.atomic_eth.compare_data);
  }
  if (op.has(kAtomicAckEth)) {
    EXPECT_EQ(got.atomic_ack_eth.original_remote_data, want.atomic_ack_eth.original_remote_data);
  }
  if (op.has(kImmDt)) {
    EXPECT_EQ(got.immediate_data, want.immediate_data);
  }
  if (op.has(kIeth)) {
    EXPECT_EQ(got.invalidate_rkey, want.invalidate_rkey);
  }
  if (op.has(kDeth)) {
    EXPECT_EQ(got.deth.qkey, want.deth.qkey);
    EXPECT_EQ(got.deth.src_qp, want.deth.src_qp);
  }
  if (op.has(kXrcEth)) {
    EXPECT_EQ(got.xrc_srqn, want.xrc_srqn);
    EXPECT_EQ(got.xrceth_reserved, want.xrceth_reserved);
  }
  EXPECT_EQ(got.payload_length, want.payload_length);
}

TEST(PacketRoundTripTest, EveryOpcodeOverIpv4AndIpv6) {
  int frames = 0;
  for (Opcode opcode : kAllOpcodes) {
    const OpcodeInfo& op = LookupOpcode(opcode);
    for (IpVersion version : {IpVersion::kIpv4, IpVersion::kIpv6}) {
      for (bool vlan : {false, true}) {
        for (uint32_t length : AllowedPayloads(op.payload)) {
          SCOPED_TRACE(std::string(op.name) + (version == IpVersion::kIpv4 ? " IPv4" : " IPv6") +
                       (vlan ? " VLAN" : "") + " payload " + std::to_string(length));
          const PacketFields want = SampleFields(opcode, version, length, vlan);
          const std::vector<uint8_t> payload = Payload(length, length);
          const std::vector<uint8_t> frame = Build(want, payload);
          const size_t l3 = vlan ? 18 : 14;
          const size_t ip = version == IpVersion::kIpv4 ? 20 : 40;
          ASSERT_EQ(frame.size(), l3 + ip + 8 + op.header_bytes + length + (4 - length % 4) % 4 + 4);

          PacketView view;
          ASSERT_EQ(ParsePacket(frame.data(), frame.size(), ParseOptions{}, &view), ParseError::kOk);
          EXPECT_TRUE(view.is_roce);
          EXPECT_TRUE(view.icrc_ok());
          EXPECT_EQ(view.opcode, &op);
          EXPECT_EQ(view.packet_end, frame.size());
          ExpectSameFields(want, view.fields, op);
          ASSERT_EQ(view.payload, frame.data() + l3 + ip + 8 + op.header_bytes);
          if (length > 0) {
            EXPECT_EQ(0, std::memcmp(view.payload, payload.data(), length));
          }
          ++frames;
        }
      }
    }
  }
  EXPECT_GT(frames, 61 * 2 * 2);
}

// The split form, on an mbuf, writes what the one-call form writes.
TEST(PacketBuilderTest, SplitMbufBuildEqualsOneCallBuild) {
  ASSERT_TRUE(pmd::TestEalStarted());
  auto pool = pmd::CreatePktPool({.name = "packet_test", .mbufs = 63, .per_core_cache = 0});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  for (Opcode opcode : {Opcode::kRcSendOnly, Opcode::kRcRdmaWriteFirst, Opcode::kUdSendOnlyWithImmediate,
                        Opcode::kRcAcknowledge}) {
    const OpcodeInfo& op = LookupOpcode(opcode);
    const uint32_t length = op.payload == PayloadRule::kNone ? 0 : 1024;
    const PacketFields f = SampleFields(opcode, IpVersion::kIpv6, length, false);
    const std::vector<uint8_t> payload = Payload(length, 9);
    const std::vector<uint8_t> want = Build(f, payload);

    rte_mbuf* m = rte_pktmbuf_alloc(pool->get());
    ASSERT_NE(m, nullptr);
    PendingPacket p;
    ASSERT_EQ(BeginPacket(f, m, &p), BuildError::kOk);
    EXPECT_EQ(p.payload_length, length);
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), want.size());
    // The caller copies the payload in two pieces, as from two SGEs.
    if (length > 0) {
      std::memcpy(p.payload, payload.data(), length / 2);
      std::memcpy(p.payload + length / 2, payload.data() + length / 2, length - length / 2);
    }
    FinishPacket(p);
    ASSERT_EQ(rte_pktmbuf_pkt_len(m), want.size());
    EXPECT_EQ(0, std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*), want.data(), want.size())) << op.name;

    PacketView view;
    EXPECT_EQ(ParsePacket(m, ParseOptions{}, &view), ParseError::kOk);
    rte_pktmbuf_free(m);
  }
  EXPECT_EQ(pmd::AvailableMbufs(pool->get()), 63u);
}

// Through one header template, a stream of packets whose paths change now
// and then (MACs, addresses, IP version, VLAN, traffic class, ports) builds
// every frame byte for byte as without it.
TEST(PacketBuilderTest, AHeaderTemplateBuildsTheSameFramesAndFollowsThePath) {
  ASSERT_TRUE(pmd::TestEalStarted());
  auto pool = pmd::CreatePktPool(
      {.name = "packet_template", .mbufs = 63, .per_core_cache = 0, .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  std::mt19937 random(77);
  HeaderTemplate tmpl;
  const Opcode opcodes[] = {Opcode::kRcSendOnly, Opcode::kRcRdmaWriteFirst, Opcode::kRcRdmaWriteMiddle,
                            Opcode::kRcAcknowledge, Opcode::kUdSendOnlyWithImmediate, Opcode::kRcRdmaReadResponseOnly};
  PacketFields path = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 0, false);
  for (int i = 0; i < 3000; ++i) {
    if (random() % 8 == 0) {  // another path now and then
      path = SampleFields(Opcode::kRcSendOnly, random() % 2 ? IpVersion::kIpv4 : IpVersion::kIpv6, 0,
                          random() % 4 == 0);
      path.dst_mac[5] = static_cast<uint8_t>(random());
      path.dst_gid[15] = static_cast<uint8_t>(random());
      path.traffic_class = static_cast<uint8_t>(random() % 4 == 0 ? random() : 0);
      path.udp_src_port = static_cast<uint16_t>(0xC000 | (random() & 0x3FFF));
      path.hop_limit = static_cast<uint8_t>(64 + random() % 2);
    }
    const Opcode opcode = opcodes[random() % (sizeof(opcodes) / sizeof(opcodes[0]))];
    const OpcodeInfo& op = LookupOpcode(opcode);
    uint32_t length = 0;
    if (op.payload == PayloadRule::kFullMtu) length = 256 << (random() % 4);
    else if (op.payload != PayloadRule::kNone) length = static_cast<uint32_t>(random() % 4097);
    if (op.payload == PayloadRule::kOneToMtu && length == 0) length = 1;
    PacketFields f = SampleFields(opcode, path.ip_version, length, path.has_vlan);
    f.dst_mac = path.dst_mac;
    f.src_gid = path.src_gid;
    f.dst_gid = path.dst_gid;
    f.traffic_class = path.traffic_class;
    f.udp_src_port = path.udp_src_port;
    f.hop_limit = path.hop_limit;
    f.bth.psn = Psn(static_cast<uint32_t>(random()));
    const std::vector<uint8_t> payload = Payload(length, static_cast<uint8_t>(i));
    const std::vector<uint8_t> want = Build(f, payload);
    rte_mbuf* m = rte_pktmbuf_alloc(pool->get());
    ASSERT_NE(m, nullptr);
    PendingPacket p;
    ASSERT_EQ(BeginPacket(f, m, &p, &tmpl), BuildError::kOk);
    if (length > 0) std::memcpy(p.payload, payload.data(), length);
    FinishPacket(p);
    ASSERT_EQ(rte_pktmbuf_pkt_len(m), want.size());
    ASSERT_EQ(0, std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*), want.data(), want.size()))
        << "packet " << i << ": " << op.name << (f.ip_version == IpVersion::kIpv4 ? " IPv4" : " IPv6")
        << (f.has_vlan ? " VLAN" : "") << " payload " << length;
    rte_pktmbuf_free(m);
  }
  EXPECT_EQ(pmd::AvailableMbufs(pool->get()), 63u);
}

TEST(PacketBuilderTest, MbufWithoutRoomOrWithSegmentsIsRefused) {
  ASSERT_TRUE(pmd::TestEalStarted());
  auto pool = pmd::CreatePktPool({.name = "packet_small", .mbufs = 7, .per_core_cache = 0, .data_room = 256});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  PacketFields f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 1024, false);
  rte_mbuf* m = rte_pktmbuf_alloc(pool->get());
  ASSERT_NE(m, nullptr);
  PendingPacket p;
  EXPECT_EQ(BeginPacket(f, m, &p), BuildError::kBufferTooSmall);
  EXPECT_EQ(rte_pktmbuf_pkt_len(m), 0u);

  rte_mbuf* tail = rte_pktmbuf_alloc(pool->get());
  ASSERT_NE(tail, nullptr);
  ASSERT_NE(rte_pktmbuf_append(tail, 8), nullptr);
  ASSERT_EQ(rte_pktmbuf_chain(m, tail), 0);
  f.payload_length = 0;
  EXPECT_EQ(BeginPacket(f, m, &p), BuildError::kMultiSegmentMbuf);
  PacketView view;
  EXPECT_EQ(ParsePacket(m, ParseOptions{}, &view), ParseError::kMultiSegmentMbuf);
  rte_pktmbuf_free(m);
  EXPECT_EQ(pmd::AvailableMbufs(pool->get()), 7u);
}

TEST(PacketBuilderTest, RefusesWhatTheWireCannotCarry) {
  uint8_t buffer[9000];
  size_t length = 0;
  const std::vector<uint8_t> payload(8000, 0xAB);
  auto build = [&](const PacketFields& f) {
    return BuildPacket(f, payload.data(), buffer, sizeof(buffer), &length);
  };
  PacketFields f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 64, false);
  EXPECT_EQ(build(f), BuildError::kOk);

  f.bth.opcode = 0x15;
  EXPECT_EQ(build(f), BuildError::kUnknownOpcode);
  f = SampleFields(Opcode::kRcAcknowledge, IpVersion::kIpv4, 4, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);  // ACKs carry no payload
  f = SampleFields(Opcode::kRcRdmaReadRequest, IpVersion::kIpv4, 8, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);
  f = SampleFields(Opcode::kRcFetchAdd, IpVersion::kIpv4, 8, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);
  f = SampleFields(Opcode::kRcSendFirst, IpVersion::kIpv4, 0, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);  // First carries a full MTU
  f = SampleFields(Opcode::kUcRdmaWriteMiddle, IpVersion::kIpv4, 1022, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);  // ... which is never padded
  f = SampleFields(Opcode::kRcSendLast, IpVersion::kIpv4, 0, false);
  EXPECT_EQ(build(f), BuildError::kBadPayloadLength);

  f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 64, false);
  f.bth.dest_qp = 0x1000000;
  EXPECT_EQ(build(f), BuildError::kFieldOutOfRange);
  f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 64, false);
  f.bth.transport_version = 16;
  EXPECT_EQ(build(f), BuildError::kFieldOutOfRange);
  f = SampleFields(Opcode::kUdSendOnly, IpVersion::kIpv4, 64, false);
  f.deth.src_qp = 0x1000000;
  EXPECT_EQ(build(f), BuildError::kFieldOutOfRange);
  f = SampleFields(Opcode::kRcAcknowledge, IpVersion::kIpv4, 0, false);
  f.aeth.msn = 0x1000000;
  EXPECT_EQ(build(f), BuildError::kFieldOutOfRange);
  f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv6, 64, false);
  f.ipv6_flow_label = 0x100000;
  EXPECT_EQ(build(f), BuildError::kFieldOutOfRange);

  f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 64, false);
  f.dst_gid[0] = 0xFD;
  EXPECT_EQ(build(f), BuildError::kNotIpv4MappedGid);

  f = SampleFields(Opcode::kRcSendOnly, IpVersion::kIpv4, 64, false);
  EXPECT_EQ(BuildPacket(f, payload.data(), buffer, FrameLength(f) - 1, &length), BuildError::kBufferTooSmall);
  EXPECT_EQ(BuildPacket(f, nullptr, buffer, sizeof(buffer), &length), BuildError::kBadPayloadLength);

  f.payload_length = 0xFFFF;
  std::vector<uint8_t> big(0x10000);
  std::vector<uint8_t> big_payload(0xFFFF);
  EXPECT_EQ(BuildPacket(f, big_payload.data(), big.data(), big.size(), &length), BuildError::kPacketTooLong);
  EXPECT_EQ(FrameLength(f), 0u);
}

// --- Parser errors -------------------------------------------------------------

// A valid IPv4 frame and the offsets of its layers.
struct Sample {
  std::vector<uint8_t> frame;
  size_t l3 = 14, udp = 34, bth = 42;
};

Sample SampleFrame(Opcode opcode, uint32_t payload_length, IpVersion version = IpVersion::kIpv4) {
  Sample s;
  s.frame = Build(SampleFields(opcode, version, payload_length, false), Payload(payload_length, 3));
  s.udp = s.l3 + (version == IpVersion::kIpv4 ? 20 : 40);
  s.bth = s.udp + 8;
  return s;
}

// After a test changes a frame: the IPv4 checksum and the ICRC made right
// again, so that only the change under test is wrong.
void Reseal(Sample& s) {
  uint8_t* ip = s.frame.data() + s.l3;
  const bool v4 = (ip[0] >> 4) == 4;
  if (v4) {
    StoreBe16(ip + 10, 0);
    StoreBe16(ip + 10, Ipv4HeaderChecksum(ip, 20));
  }
  const size_t end = v4 ? s.l3 + LoadBe16(ip + 2) : s.l3 + 40 + LoadBe16(ip + 4);
  if (end > s.frame.size() || end < s.bth + 16) return;  // lengths made wrong on purpose: no ICRC to fix
  StoreLe32(s.frame.data() + end - 4,
            ComputeIcrc(ip, v4 ? 20 : 40, v4 ? IpVersion::kIpv4 : IpVersion::kIpv6, end - 4 - s.l3));
}

// Grows (or shrinks) the packet by `delta` bytes before the ICRC, keeping the
// IP and UDP lengths consistent.
void Resize(Sample& s, int delta) {
  uint8_t* ip = s.frame.data() + s.l3;
  const size_t icrc_at = s.frame.size() - 4;
  if (delta > 0) {
    s.frame.insert(s.frame.begin() + icrc_at, static_cast<size_t>(delta), 0x5A);
  } else {
    s.frame.erase(s.frame.begin() + icrc_at + delta, s.frame.begin() + icrc_at);
  }
  ip = s.frame.data() + s.l3;
  StoreBe16(ip + 2, static_cast<uint16_t>(LoadBe16(ip + 2) + delta));
  uint8_t* udp = s.frame.data() + s.udp;
  StoreBe16(udp + 4, static_cast<uint16_t>(LoadBe16(udp + 4) + delta));
  Reseal(s);
}

ParseError Parse(const Sample& s, ParseOptions options = {}) {
  PacketView view;
  return ParsePacket(s.frame.data(), s.frame.size(), options, &view);
}

TEST(PacketParserTest, SampleFramesParse) {
  EXPECT_EQ(Parse(SampleFrame(Opcode::kRcSendOnly, 64)), ParseError::kOk);
  EXPECT_EQ(Parse(SampleFrame(Opcode::kRcAcknowledge, 0)), ParseError::kOk);
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kOk);  // Reseal changes nothing in a good frame
}

TEST(PacketParserTest, EveryPrefixIsTruncated) {
  for (IpVersion version : {IpVersion::kIpv4, IpVersion::kIpv6}) {
    const Sample s = SampleFrame(Opcode::kRcRdmaWriteOnlyWithImmediate, 13, version);
    for (size_t n = 0; n < s.frame.size(); ++n) {
      // A copy of exactly n bytes, so that ASan sees any read past it.
      std::vector<uint8_t> prefix(s.frame.begin(), s.frame.begin() + n);
      PacketView view;
      EXPECT_EQ(ParsePacket(n ? prefix.data() : nullptr, n, ParseOptions{}, &view), ParseError::kTruncated)
          << "prefix " << n;
    }
  }
}

TEST(PacketParserTest, EthernetPaddingAfterThePacketIsIgnored) {
  Sample s = SampleFrame(Opcode::kRcAcknowledge, 0);
  const size_t packet = s.frame.size();
  s.frame.resize(packet + 10, 0);
  PacketView view;
  ASSERT_EQ(ParsePacket(s.frame.data(), s.frame.size(), ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.packet_end, packet);
  EXPECT_EQ(view.frame_length, packet + 10);
}

// uroce never sends IPv4 options, but a peer may: the ICRC covers them.
TEST(PacketParserTest, Ipv4OptionsAreAcceptedAndCovered) {
  Sample s = SampleFrame(Opcode::kRcRdmaWriteOnly, 64);
  const std::vector<uint8_t> nops = {1, 1, 1, 1};  // four NOP options (RFC 791)
  s.frame.insert(s.frame.begin() + s.udp, nops.begin(), nops.end());
  uint8_t* ip = s.frame.data() + s.l3;
  ip[0] = 0x46;
  StoreBe16(ip + 2, static_cast<uint16_t>(LoadBe16(ip + 2) + 4));
  StoreBe16(ip + 10, 0);
  StoreBe16(ip + 10, Ipv4HeaderChecksum(ip, 24));
  const size_t icrc_at = s.frame.size() - 4;
  StoreLe32(s.frame.data() + icrc_at, ComputeIcrc(ip, 24, IpVersion::kIpv4, icrc_at - s.l3));

  PacketView view;
  ASSERT_EQ(ParsePacket(s.frame.data(), s.frame.size(), ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.ip_header_bytes, 24);
  EXPECT_EQ(view.bth_offset, s.bth + 4);
  EXPECT_EQ(view.fields.reth.dma_length, 8192u);
  EXPECT_EQ(view.fields.payload_length, 64u);
  s.frame[s.udp + 2] ^= 0x10;  // an option byte is covered
  StoreBe16(ip + 10, 0);
  StoreBe16(ip + 10, Ipv4HeaderChecksum(ip, 24));
  EXPECT_EQ(ParsePacket(s.frame.data(), s.frame.size(), ParseOptions{}, &view), ParseError::kBadIcrc);
}

TEST(PacketParserTest, NotRoce) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[12] = 0x08, s.frame[13] = 0x06;  // ARP
  EXPECT_EQ(Parse(s), ParseError::kNotRoce);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.l3 + 9] = 6;  // TCP
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kNotRoce);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  StoreBe16(s.frame.data() + s.udp + 2, 4790);
  Reseal(s);
  PacketView view;
  EXPECT_EQ(ParsePacket(s.frame.data(), s.frame.size(), ParseOptions{}, &view), ParseError::kNotRoce);
  EXPECT_FALSE(view.is_roce);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.l3] = 0x55;  // IPv4 EtherType, version 5
  EXPECT_EQ(Parse(s), ParseError::kNotRoce);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  StoreBe16(s.frame.data() + s.l3 + 6, kIpv4MoreFragments);
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kNotRoce);

  s = SampleFrame(Opcode::kRcSendOnly, 64, IpVersion::kIpv6);
  s.frame[s.l3 + 6] = 0;  // a hop-by-hop options header before UDP
  EXPECT_EQ(Parse(s), ParseError::kNotRoce);
}

TEST(PacketParserTest, BadIpLength) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.l3] = 0x44;  // IHL 4: 16 bytes
  EXPECT_EQ(Parse(s), ParseError::kBadIpLength);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  StoreBe16(s.frame.data() + s.l3 + 2, 20 + 7);
  Reseal(s);
  EXPECT_EQ(Parse(s, {.verify_icrc = false}), ParseError::kBadIpLength);

  s = SampleFrame(Opcode::kRcSendOnly, 64, IpVersion::kIpv6);
  StoreBe16(s.frame.data() + s.l3 + 4, 0);  // a jumbogram's payload length
  EXPECT_EQ(Parse(s), ParseError::kBadIpLength);

  // Longer than the frame: the frame is the short one.
  s = SampleFrame(Opcode::kRcSendOnly, 64);
  StoreBe16(s.frame.data() + s.l3 + 2, static_cast<uint16_t>(s.frame.size()));
  Reseal(s);
  EXPECT_EQ(Parse(s, {.verify_icrc = false}), ParseError::kTruncated);
}

TEST(PacketParserTest, BadIpv4Checksum) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.l3 + 8] ^= 1;  // TTL: masked by the ICRC, covered by the IP checksum
  EXPECT_EQ(Parse(s), ParseError::kBadIpChecksum);
  EXPECT_EQ(Parse(s, {.verify_icrc = true, .verify_ipv4_checksum = false}), ParseError::kOk);
}

TEST(PacketParserTest, BadUdpLength) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  StoreBe16(s.frame.data() + s.udp + 4, static_cast<uint16_t>(LoadBe16(s.frame.data() + s.udp + 4) - 4));
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadUdpLength);

  // IP and UDP agree, but leave no room for a BTH and an ICRC.
  s = SampleFrame(Opcode::kRcAcknowledge, 0);
  Resize(s, -8);
  EXPECT_EQ(Parse(s, {.verify_icrc = false}), ParseError::kBadUdpLength);
}

TEST(PacketParserTest, BadBthVersion) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.bth + 1] |= 0x01;
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadBthVersion);
}

TEST(PacketParserTest, UnknownOpcode) {
  for (uint8_t opcode : {0x15, 0x18, 0x19, 0x2C, 0x40, 0x63, 0x66, 0x80, 0xFF}) {
    Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
    s.frame[s.bth] = opcode;
    Reseal(s);
    EXPECT_EQ(Parse(s), ParseError::kUnknownOpcode) << int{opcode};
  }
}

TEST(PacketParserTest, LengthNotValidForTheOpcode) {
  Sample s = SampleFrame(Opcode::kRcAcknowledge, 0);
  Resize(s, 4);  // payload on an ACK
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  s = SampleFrame(Opcode::kRcRdmaReadRequest, 0);
  Resize(s, 8);  // payload on a READ request
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  s = SampleFrame(Opcode::kRcCompareSwap, 0);
  Resize(s, 4);  // payload on an atomic request
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  s = SampleFrame(Opcode::kRcSendFirst, 4);
  Resize(s, -4);  // an empty First packet
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  s = SampleFrame(Opcode::kRcSendLast, 4);
  Resize(s, -4);  // an empty Last packet
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  s = SampleFrame(Opcode::kRcSendOnly, 64);
  Resize(s, 2);  // not a multiple of 4
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  // An ATOMIC WRITE carries exactly its 8 bytes (IBTA 1.5, 9.4.7).
  s = SampleFrame(Opcode::kRcAtomicWrite, 8);
  Resize(s, 4);
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);
  s = SampleFrame(Opcode::kRcAtomicWrite, 8);
  Resize(s, -4);
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);
  s = SampleFrame(Opcode::kRcAtomicWrite, 8);
  Resize(s, -8);
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);

  // An atomic's 28-byte AtomicETH in a packet with room for 16.
  s = SampleFrame(Opcode::kRcSendOnly, 16);
  s.frame[s.bth] = static_cast<uint8_t>(Opcode::kRcFetchAdd);
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);
}

TEST(PacketParserTest, BadPadCount) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 0);
  s.frame[s.bth + 1] |= 0x30;  // pad 3, but nothing after the headers
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadPadCount);

  s = SampleFrame(Opcode::kRcAtomicWrite, 8);
  s.frame[s.bth + 1] |= 0x10;  // nor may an ATOMIC WRITE's 8 bytes
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadPadCount);

  s = SampleFrame(Opcode::kRcSendFirst, 64);
  s.frame[s.bth + 1] |= 0x10;  // a First packet may not be padded
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadPadCount);

  s = SampleFrame(Opcode::kRcAcknowledge, 0);
  s.frame[s.bth + 1] |= 0x20;
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadPadCount);
}

TEST(PacketParserTest, BadIcrc) {
  Sample s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.bth + 20] ^= 0x80;  // payload
  PacketView view;
  EXPECT_EQ(ParsePacket(s.frame.data(), s.frame.size(), ParseOptions{}, &view), ParseError::kBadIcrc);
  EXPECT_TRUE(view.icrc_checked);
  EXPECT_FALSE(view.icrc_ok());
  EXPECT_NE(view.icrc_stored, view.icrc_computed);
  EXPECT_EQ(view.fields.bth.dest_qp, 0x123456u);  // still decoded, for `uroce dump`
  // Without verification the same frame parses.
  EXPECT_EQ(Parse(s, {.verify_icrc = false}), ParseError::kOk);

  // Corruption wins over the damage it did: a flipped opcode is a bad ICRC.
  s = SampleFrame(Opcode::kRcSendOnly, 64);
  s.frame[s.bth] = 0x15;
  EXPECT_EQ(Parse(s), ParseError::kBadIcrc);
}

TEST(PacketParserTest, ParseErrorNamesAreDistinct) {
  std::set<std::string> names;
  for (int e = 0; e <= static_cast<int>(ParseError::kMultiSegmentMbuf); ++e) {
    names.insert(ParseErrorName(static_cast<ParseError>(e)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ParseError::kMultiSegmentMbuf) + 1);
}

// --- XRC (IBTA annex A14) ---------------------------------------------

// An XRC request carries its XRCETH (8 reserved bits, the 24-bit XRC SRQ
// number) right after the BTH, before any other extension header; XRC
// responses carry none.
TEST(PacketXrcTest, XrcethFollowsTheBthOnRequestsOnly) {
  Sample send = SampleFrame(Opcode::kXrcSendOnlyWithImmediate, 8);
  const uint8_t* x = send.frame.data() + send.bth + 12;
  EXPECT_EQ(x[0], 0);
  EXPECT_EQ(x[1], 0xAB);
  EXPECT_EQ(x[2], 0xCD);
  EXPECT_EQ(x[3], 0xEF);
  EXPECT_EQ(LoadBe32(send.frame.data() + send.bth + 16), 0xCAFEF00Du) << "ImmDt after the XRCETH";
  PacketView view;
  ASSERT_EQ(ParsePacket(send.frame.data(), send.frame.size(), ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.opcode->service, TransportService::kXrc);
  EXPECT_EQ(view.fields.xrc_srqn, 0xABCDEFu);

  Sample write = SampleFrame(Opcode::kXrcRdmaWriteOnly, 4);
  EXPECT_EQ(LoadBe32(write.frame.data() + write.bth + 12), 0x00ABCDEFu);
  EXPECT_EQ(LoadBe32(write.frame.data() + write.bth + 24), 0x11223344u) << "the RETH's rkey after the XRCETH";

  Sample atomic = SampleFrame(Opcode::kXrcFetchAdd, 0);
  ASSERT_EQ(ParsePacket(atomic.frame.data(), atomic.frame.size(), ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.fields.xrc_srqn, 0xABCDEFu);
  EXPECT_EQ(view.fields.atomic_eth.rkey, 0x55667788u);

  // ACK: BTH + AETH, nothing else.
  Sample ack = SampleFrame(Opcode::kXrcAcknowledge, 0);
  EXPECT_EQ(ack.frame.size(), ack.bth + 12 + 4 + 4);
  ASSERT_EQ(ParsePacket(ack.frame.data(), ack.frame.size(), ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.fields.xrc_srqn, 0u);
  EXPECT_EQ(view.fields.aeth.msn, 0x654321u);
}

// What the wire may not carry is refused: an XRC request too short for its
// XRCETH, the reserved opcode between FETCH_ADD and SEND_LAST_WITH_INVALIDATE,
// and (when building) an SRQ number wider than 24 bits.
TEST(PacketXrcTest, BadXrcethIsRefused) {
  // An RC SEND Only without payload is exactly a BTH: as XRC it lacks its XRCETH.
  Sample s = SampleFrame(Opcode::kRcSendOnly, 0);
  s.frame[s.bth] = static_cast<uint8_t>(Opcode::kXrcSendOnly);
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kBadLengthForOpcode);
  s = SampleFrame(Opcode::kXrcSendOnly, 0);
  s.frame[s.bth] = 0xB5;
  Reseal(s);
  EXPECT_EQ(Parse(s), ParseError::kUnknownOpcode);

  PacketFields f = SampleFields(Opcode::kXrcSendOnly, IpVersion::kIpv4, 0, false);
  f.xrc_srqn = 0x1000000;
  uint8_t buffer[256];
  size_t length = 0;
  EXPECT_EQ(BuildPacket(f, nullptr, buffer, sizeof(buffer), &length), BuildError::kFieldOutOfRange);
  // The reserved byte is the sender's to leave 0; a receiver ignores it
  // (IBTA 9.3: reserved fields), and the parser hands it on unchanged.
  f.xrc_srqn = 0x000001;
  f.xrceth_reserved = 0x7F;
  ASSERT_EQ(BuildPacket(f, nullptr, buffer, sizeof(buffer), &length), BuildError::kOk);
  PacketView view;
  ASSERT_EQ(ParsePacket(buffer, length, ParseOptions{}, &view), ParseError::kOk);
  EXPECT_EQ(view.fields.xrc_srqn, 1u);
  EXPECT_EQ(view.fields.xrceth_reserved, 0x7F);
}

}  // namespace
}  // namespace uroce::transport
