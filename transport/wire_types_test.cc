#include "transport/wire_types.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "transport/headers.h"

namespace uroce::transport {
namespace {

TEST(BigEndianTest, StoresMostSignificantByteFirst) {
  Be16 a;
  a.store(0x1234);
  EXPECT_EQ(a.data()[0], 0x12);
  EXPECT_EQ(a.data()[1], 0x34);
  EXPECT_EQ(a.load(), 0x1234);

  Be24 b;
  b.store(0xABCDEF);
  EXPECT_EQ(0, std::memcmp(b.data(), "\xAB\xCD\xEF", 3));
  EXPECT_EQ(b.load(), 0xABCDEFu);

  Be32 c;
  c.store(0xDEADBEEF);
  EXPECT_EQ(0, std::memcmp(c.data(), "\xDE\xAD\xBE\xEF", 4));
  EXPECT_EQ(c.load(), 0xDEADBEEFu);

  Be64 d;
  d.store(0x0102030405060708ull);
  EXPECT_EQ(0, std::memcmp(d.data(), "\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(d.load(), 0x0102030405060708ull);
}

TEST(BigEndianTest, FreeFunctionsAgreeWithFieldTypes) {
  uint8_t buf[9] = {};
  StoreBe64(buf + 1, 0x1122334455667788ull);  // odd address on purpose
  EXPECT_EQ(LoadBe64(buf + 1), 0x1122334455667788ull);
  EXPECT_EQ(LoadBe32(buf + 1), 0x11223344u);
  EXPECT_EQ(LoadBe24(buf + 1), 0x112233u);
  EXPECT_EQ(LoadBe16(buf + 1), 0x1122u);
  StoreLe32(buf, 0xA1B2C3D4);
  EXPECT_EQ(buf[0], 0xD4);
  EXPECT_EQ(buf[3], 0xA1);
  EXPECT_EQ(LoadLe32(buf), 0xA1B2C3D4u);
}

TEST(PsnTest, ArithmeticWrapsAt24Bits) {
  EXPECT_EQ(Psn(0xFFFFFF) + 1, Psn(0));
  EXPECT_EQ(Psn(0) - 1, Psn(0xFFFFFF));
  EXPECT_EQ(Psn(0x1000000).value(), 0u);  // the constructor masks
  Psn p(0xFFFFFE);
  ++p;
  EXPECT_EQ(p.value(), 0xFFFFFFu);
  EXPECT_EQ((p++).value(), 0xFFFFFFu);
  EXPECT_EQ(p.value(), 0u);
  p += 0x1000005;
  EXPECT_EQ(p.value(), 5u);
}

TEST(PsnTest, ComparesByWrapAroundDistance) {
  EXPECT_LT(Psn(1), Psn(2));
  EXPECT_LT(Psn(0xFFFFFF), Psn(0));  // 0 comes right after 0xFFFFFF
  EXPECT_GT(Psn(3), Psn(0xFFFFF0));
  EXPECT_EQ(Psn(3).DistanceFrom(Psn(0xFFFFF0)), 19);
  EXPECT_EQ(Psn(0xFFFFF0).DistanceFrom(Psn(3)), -19);
  // Half the space ahead is "after", the other half "before".
  EXPECT_EQ(Psn(0x7FFFFF).DistanceFrom(Psn(0)), 0x7FFFFF);
  EXPECT_EQ(Psn(0x800000).DistanceFrom(Psn(0)), -0x800000);
  EXPECT_LT(Psn(0x800000), Psn(0));
  EXPECT_LE(Psn(7), Psn(7));
  EXPECT_GE(Psn(7), Psn(7));
  EXPECT_FALSE(Psn(7) < Psn(7));
}

TEST(HeadersTest, BthFieldsRoundTripThroughTheWireLayout) {
  BthFields f;
  f.opcode = 0x0A;
  f.solicited_event = true;
  f.migration_request = false;
  f.pad_count = 3;
  f.transport_version = 0;
  f.pkey = 0x8001;
  f.reserved_byte4 = 0x40;
  f.dest_qp = 0xABCDEF;
  f.ack_request = true;
  f.reserved7 = 0x05;
  f.psn = Psn(0x123456);
  const BthHeader h = EncodeBth(f);
  uint8_t wire[sizeof(BthHeader)];
  WriteHeader(wire, h);
  const uint8_t want[12] = {0x0A, 0xB0, 0x80, 0x01, 0x40, 0xAB, 0xCD, 0xEF, 0x85, 0x12, 0x34, 0x56};
  EXPECT_EQ(0, std::memcmp(wire, want, sizeof(want)));
  const BthFields g = DecodeBth(ReadHeader<BthHeader>(wire));
  EXPECT_EQ(g.opcode, f.opcode);
  EXPECT_EQ(g.solicited_event, f.solicited_event);
  EXPECT_EQ(g.pad_count, f.pad_count);
  EXPECT_EQ(g.pkey, f.pkey);
  EXPECT_EQ(g.reserved_byte4, f.reserved_byte4);
  EXPECT_EQ(g.dest_qp, f.dest_qp);
  EXPECT_EQ(g.ack_request, f.ack_request);
  EXPECT_EQ(g.reserved7, f.reserved7);
  EXPECT_EQ(g.psn, f.psn);
}

TEST(HeadersTest, AethSyndromeSplitsKindAndValue) {
  AethFields a;
  a.syndrome = AethFields::Syndrome(AethKind::kNak, static_cast<uint8_t>(NakCode::kRemoteAccessError));
  EXPECT_EQ(a.syndrome, 0x62);
  EXPECT_EQ(a.kind(), AethKind::kNak);
  EXPECT_EQ(a.value(), 2);
  a.syndrome = 0x1F;  // ACK, credits invalid: what rxe sends
  EXPECT_EQ(a.kind(), AethKind::kAck);
  EXPECT_EQ(a.value(), kAethInvalidCredits);
}

TEST(HeadersTest, Ipv4MappedGid) {
  const Gid g = Ipv4MappedGid(0x0A4D0002u);  // 10.77.0.2
  const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 77, 0, 2};
  EXPECT_EQ(0, std::memcmp(g.data(), want, 16));
  EXPECT_TRUE(IsIpv4MappedGid(g));
  Gid v6{};
  v6[0] = 0xFD;
  EXPECT_FALSE(IsIpv4MappedGid(v6));
}

TEST(HeadersTest, SourceGidForTakesTheFirstGidOfThePeersVersion) {
  Gid v6a{};
  v6a[0] = 0xFD;
  Gid v6b = v6a;
  v6b[15] = 2;
  const Gid v4a = Ipv4MappedGid(0x0A4D0001u);
  const Gid v4b = Ipv4MappedGid(0x0A4D0003u);
  const std::vector<Gid> gids = {v6a, v4a, v6b, v4b};
  EXPECT_EQ(SourceGidFor(gids, Ipv4MappedGid(0x0A4D0002u)), std::optional<size_t>(1));
  EXPECT_EQ(SourceGidFor(gids, v6b), std::optional<size_t>(0));
  EXPECT_EQ(SourceGidFor({v4a, v4b}, v6a), std::nullopt);
  EXPECT_EQ(SourceGidFor({}, v4a), std::nullopt);
}

}  // namespace
}  // namespace uroce::transport
