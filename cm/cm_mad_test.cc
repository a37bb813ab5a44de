// The CM MAD codec against the outside oracle: the IB CM MADs the Linux
// kernel's rdma_cm sent over rxe (testdata/captures/rping_rdma_cm.pcap),
// field by field as tshark 4.0 decodes them (`tshark -r rping_rdma_cm.pcap
// -V`), and encoded again byte for byte. Malformed input is refused.
//
// The capture files come as arguments ($(rootpaths //testdata/captures:pcaps)).
#include "cm/cm_mad.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/pcap_file.h"
#include "transport/packet_parser.h"

namespace uroce::cm {

using transport::Gid;
using transport::Ipv4MappedGid;
using transport::PacketView;
using transport::ParseError;
using transport::ParseOptions;
using transport::ParsePacket;

namespace {

std::vector<std::string>& CapturePaths() {
  static std::vector<std::string> paths;
  return paths;
}

struct CapturedMad {
  size_t frame = 0;  // 1-based, as Wireshark counts
  std::vector<uint8_t> bytes;  // the UD payload
  uint32_t src_qp = 0, dest_qp = 0, qkey = 0;
};

// Every UD datagram to QP 1 in the rping capture.
const std::vector<CapturedMad>& RpingMads() {
  static std::vector<CapturedMad> mads;
  if (!mads.empty()) return mads;
  std::string path;
  for (const auto& p : CapturePaths()) {
    if (p.size() >= 18 && p.compare(p.size() - 18, 18, "rping_rdma_cm.pcap") == 0) path = p;
  }
  EXPECT_FALSE(path.empty()) << "rping_rdma_cm.pcap not among the arguments";
  auto reader = PcapReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return mads;
  PcapRecord record;
  for (size_t number = 1;; ++number) {
    auto more = reader->Next(&record);
    if (!more.ok() || !*more) break;
    PacketView view;
    if (ParsePacket(record.data, record.captured_length, ParseOptions{}, &view) != ParseError::kOk) continue;
    if (view.fields.bth.dest_qp != 1) continue;
    mads.push_back({number, std::vector<uint8_t>(view.payload, view.payload + view.fields.payload_length),
                    view.fields.deth.src_qp, view.fields.bth.dest_qp, view.fields.deth.qkey});
  }
  return mads;
}

Gid Ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const uint8_t ip[4] = {a, b, c, d};
  return Ipv4MappedGid(ip);
}

TEST(CmMadTest, CaptureHoldsTheFiveMadsOfOneConnection) {
  const auto& mads = RpingMads();
  ASSERT_EQ(mads.size(), 5u);
  // tshark: frames 1, 2, 3, 64, 65 are ConnectRequest, ConnectReply,
  // ReadyToUse, DisconnectRequest, DisconnectReply.
  const size_t frames[] = {1, 2, 3, 64, 65};
  const CmAttribute attributes[] = {CmAttribute::kReq, CmAttribute::kRep, CmAttribute::kRtu, CmAttribute::kDreq,
                                    CmAttribute::kDrep};
  for (size_t i = 0; i < mads.size(); ++i) {
    EXPECT_EQ(mads[i].frame, frames[i]);
    EXPECT_EQ(mads[i].bytes.size(), kMadBytes);
    EXPECT_EQ(mads[i].src_qp, 1u);
    EXPECT_EQ(mads[i].qkey, 0x80010000u);
    CmMad mad;
    ASSERT_EQ(DecodeCmMad(mads[i].bytes.data(), mads[i].bytes.size(), &mad), CmMadError::kOk) << i;
    EXPECT_EQ(AttributeOf(mad.message), attributes[i]);
    // tshark's MAD header: base version 1, class 0x07, version 2, Send(),
    // status 0, class specific 0, TID 0x00000002ebdb864d on every message
    // (the passive side reuses the REQ's), attribute modifier 0.
    EXPECT_EQ(mad.header.base_version, 1);
    EXPECT_EQ(mad.header.management_class, 0x07);
    EXPECT_EQ(mad.header.class_version, 2);
    EXPECT_EQ(mad.header.method, 0x03);
    EXPECT_EQ(mad.header.status, 0);
    EXPECT_EQ(mad.header.class_specific, 0);
    EXPECT_EQ(mad.header.transaction_id, 0x00000002ebdb864dull);
    EXPECT_EQ(mad.header.attribute_id, static_cast<uint16_t>(attributes[i]));
    EXPECT_EQ(mad.header.attribute_modifier, 0u);
  }
}

TEST(CmMadTest, ReqFieldsMatchTshark) {
  const auto& mads = RpingMads();
  ASSERT_GE(mads.size(), 1u);
  CmMad mad;
  ASSERT_EQ(DecodeCmMad(mads[0].bytes.data(), mads[0].bytes.size(), &mad), CmMadError::kOk);
  const CmReq* req = std::get_if<CmReq>(&mad.message);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->local_comm_id, 0x4d86dbebu);
  EXPECT_EQ(req->service_id, 0x0000000001061c06ull);  // RDMA_PS_TCP, port 0x1c06 = 7174 (rping)
  EXPECT_EQ(req->local_ca_guid, 0x505400fffe770002ull);
  EXPECT_EQ(req->local_qkey, 0u);
  EXPECT_EQ(req->local_qpn, 0x11u);
  EXPECT_EQ(req->responder_resources, 1);
  EXPECT_EQ(req->local_eecn, 0u);
  EXPECT_EQ(req->initiator_depth, 1);
  EXPECT_EQ(req->remote_eecn, 0u);
  EXPECT_EQ(req->remote_cm_response_timeout, 0x14);
  EXPECT_EQ(req->transport_service_type, 0);
  EXPECT_FALSE(req->end_to_end_flow_control);
  EXPECT_EQ(req->starting_psn, 0x2928dau);
  EXPECT_EQ(req->local_cm_response_timeout, 0x14);
  EXPECT_EQ(req->retry_count, 7);
  EXPECT_EQ(req->partition_key, 0xffff);
  EXPECT_EQ(req->path_mtu, 3);  // IBV_MTU_1024
  EXPECT_FALSE(req->rdc_exists);
  EXPECT_EQ(req->rnr_retry_count, 7);
  EXPECT_EQ(req->max_cm_retries, 15);
  EXPECT_FALSE(req->srq);
  EXPECT_EQ(req->extended_transport_type, 0);
  EXPECT_EQ(req->primary.local_lid, 0xffff);
  EXPECT_EQ(req->primary.remote_lid, 0xffff);
  EXPECT_EQ(req->primary.local_gid, Ip4(10, 77, 0, 2));
  EXPECT_EQ(req->primary.remote_gid, Ip4(10, 77, 0, 3));
  // tshark 4.0 shows "Primary Flow Label: 0x00590", "Reserved: 0x01" and
  // "Primary Packet Rate: 0x19": it reads the 32-bit word at byte 88 from 3
  // bytes (size="3" in its PDML) and the rate from byte 88 instead of 91. The
  // bytes are 59 05 a0 00: flow label 0x5905a, reserved 0, rate 0 (IBTA
  // 12.6.5 bit layout), which is what we check.
  EXPECT_EQ(req->primary.flow_label, 0x5905au);
  EXPECT_EQ(req->primary.packet_rate, 0);
  EXPECT_EQ(req->primary.traffic_class, 0);
  EXPECT_EQ(req->primary.hop_limit, 0x40);
  EXPECT_EQ(req->primary.sl, 0);
  EXPECT_FALSE(req->primary.subnet_local);
  EXPECT_EQ(req->primary.local_ack_timeout, 0x13);
  EXPECT_EQ(req->alternate.local_lid, 0);
  EXPECT_EQ(req->alternate.remote_lid, 0);
  EXPECT_EQ(req->alternate.local_gid, Gid{});
  EXPECT_EQ(req->alternate.remote_gid, Gid{});
  EXPECT_EQ(req->alternate.flow_label, 0u);
  EXPECT_EQ(req->alternate.hop_limit, 0);
  EXPECT_EQ(req->alternate.local_ack_timeout, 0);

  // IP CM private data: version 0.0, IP version 4, source port 0xb12c,
  // 10.77.0.2 -> 10.77.0.3, then 56 bytes of (zero) consumer data.
  IpCmHeader ip;
  ASSERT_EQ(DecodeIpCmHeader(req->private_data.data(), req->private_data.size(), &ip), CmMadError::kOk);
  EXPECT_EQ(ip.major_version, 0);
  EXPECT_EQ(ip.minor_version, 0);
  EXPECT_EQ(ip.ip_version, 4);
  EXPECT_EQ(ip.source_port, 0xb12c);
  EXPECT_EQ(ip.source_ip, Ip4(10, 77, 0, 2));
  EXPECT_EQ(ip.destination_ip, Ip4(10, 77, 0, 3));
  for (size_t i = kIpCmHeaderBytes; i < req->private_data.size(); ++i) EXPECT_EQ(req->private_data[i], 0) << i;
  uint8_t header[kIpCmHeaderBytes];
  ASSERT_TRUE(EncodeIpCmHeader(ip, header));
  EXPECT_EQ(0, std::memcmp(header, req->private_data.data(), kIpCmHeaderBytes));
}

TEST(CmMadTest, RepRtuDreqDrepFieldsMatchTshark) {
  const auto& mads = RpingMads();
  ASSERT_EQ(mads.size(), 5u);
  CmMad mad;
  ASSERT_EQ(DecodeCmMad(mads[1].bytes.data(), kMadBytes, &mad), CmMadError::kOk);
  const CmRep* rep = std::get_if<CmRep>(&mad.message);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->local_comm_id, 0x4e86dbebu);
  EXPECT_EQ(rep->remote_comm_id, 0x4d86dbebu);
  EXPECT_EQ(rep->local_qkey, 0u);
  EXPECT_EQ(rep->local_qpn, 0x11u);
  EXPECT_EQ(rep->local_eecn, 0u);
  EXPECT_EQ(rep->starting_psn, 0xba8fe8u);
  EXPECT_EQ(rep->responder_resources, 1);
  EXPECT_EQ(rep->initiator_depth, 1);
  EXPECT_EQ(rep->target_ack_delay, 0x0f);
  EXPECT_EQ(rep->failover_accepted, 0);
  EXPECT_FALSE(rep->end_to_end_flow_control);
  EXPECT_EQ(rep->rnr_retry_count, 7);
  EXPECT_FALSE(rep->srq);
  EXPECT_EQ(rep->local_ca_guid, 0x505400fffe770003ull);

  ASSERT_EQ(DecodeCmMad(mads[2].bytes.data(), kMadBytes, &mad), CmMadError::kOk);
  const CmRtu* rtu = std::get_if<CmRtu>(&mad.message);
  ASSERT_NE(rtu, nullptr);
  EXPECT_EQ(rtu->local_comm_id, 0x4d86dbebu);
  EXPECT_EQ(rtu->remote_comm_id, 0x4e86dbebu);

  ASSERT_EQ(DecodeCmMad(mads[3].bytes.data(), kMadBytes, &mad), CmMadError::kOk);
  const CmDreq* dreq = std::get_if<CmDreq>(&mad.message);
  ASSERT_NE(dreq, nullptr);
  EXPECT_EQ(dreq->local_comm_id, 0x4d86dbebu);
  EXPECT_EQ(dreq->remote_comm_id, 0x4e86dbebu);
  EXPECT_EQ(dreq->remote_qpn, 0x11u);

  ASSERT_EQ(DecodeCmMad(mads[4].bytes.data(), kMadBytes, &mad), CmMadError::kOk);
  const CmDrep* drep = std::get_if<CmDrep>(&mad.message);
  ASSERT_NE(drep, nullptr);
  EXPECT_EQ(drep->local_comm_id, 0x4e86dbebu);
  EXPECT_EQ(drep->remote_comm_id, 0x4d86dbebu);
}

TEST(CmMadTest, EveryCapturedMadEncodesAgainByteForByte) {
  const auto& mads = RpingMads();
  ASSERT_EQ(mads.size(), 5u);
  for (const auto& captured : mads) {
    CmMad mad;
    ASSERT_EQ(DecodeCmMad(captured.bytes.data(), captured.bytes.size(), &mad), CmMadError::kOk);
    uint8_t encoded[kMadBytes];
    EncodeCmMad(mad, encoded);
    for (size_t i = 0; i < kMadBytes; ++i) {
      ASSERT_EQ(encoded[i], captured.bytes[i]) << "frame " << captured.frame << " byte " << i;
    }
  }
}

TEST(CmMadTest, RejAndMraRoundTripWithEveryField) {
  CmMad mad;
  mad.header.transaction_id = 0x0123456789abcdefull;
  CmRej rej;
  rej.local_comm_id = 0x11223344;
  rej.remote_comm_id = 0x55667788;
  rej.message_rejected = CmMessageKind::kRep;
  rej.reject_info_length = 72;
  rej.reason = kRejConsumer;
  for (size_t i = 0; i < rej.additional_info.size(); ++i) rej.additional_info[i] = uint8_t(i + 1);
  for (size_t i = 0; i < rej.private_data.size(); ++i) rej.private_data[i] = uint8_t(0xA0 ^ i);
  mad.message = rej;
  uint8_t bytes[kMadBytes];
  EncodeCmMad(mad, bytes);
  EXPECT_EQ(bytes[17], 0x12);  // attribute ID
  EXPECT_EQ(bytes[24 + 8], 0x40);   // message REJected = 1, top two bits
  EXPECT_EQ(bytes[24 + 9], 72 << 1);
  EXPECT_EQ(bytes[24 + 10], 0);
  EXPECT_EQ(bytes[24 + 11], 28);
  CmMad back;
  ASSERT_EQ(DecodeCmMad(bytes, sizeof bytes, &back), CmMadError::kOk);
  const CmRej* r = std::get_if<CmRej>(&back.message);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(back.header.transaction_id, mad.header.transaction_id);
  EXPECT_EQ(r->local_comm_id, rej.local_comm_id);
  EXPECT_EQ(r->remote_comm_id, rej.remote_comm_id);
  EXPECT_EQ(r->message_rejected, CmMessageKind::kRep);
  EXPECT_EQ(r->reject_info_length, 72);
  EXPECT_EQ(r->reason, kRejConsumer);
  EXPECT_EQ(r->additional_info, rej.additional_info);
  EXPECT_EQ(r->private_data, rej.private_data);

  CmMra mra;
  mra.local_comm_id = 7;
  mra.remote_comm_id = 9;
  mra.message_mraed = CmMessageKind::kOther;
  mra.service_timeout = 0x1F;
  mra.private_data[0] = 0x5A;
  mra.private_data[221] = 0xA5;
  mad.message = mra;
  EncodeCmMad(mad, bytes);
  EXPECT_EQ(bytes[17], 0x11);
  EXPECT_EQ(bytes[24 + 8], 0x80);
  EXPECT_EQ(bytes[24 + 9], 0xF8);
  ASSERT_EQ(DecodeCmMad(bytes, sizeof bytes, &back), CmMadError::kOk);
  const CmMra* m = std::get_if<CmMra>(&back.message);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->message_mraed, CmMessageKind::kOther);
  EXPECT_EQ(m->service_timeout, 0x1F);
  EXPECT_EQ(m->private_data, mra.private_data);
}

TEST(CmMadTest, IpCmHeaderIpv6RoundTrips) {
  IpCmHeader h;
  h.ip_version = 6;
  h.source_port = 0xBEEF;
  for (int i = 0; i < 16; ++i) {
    h.source_ip[i] = uint8_t(0xfd + i);
    h.destination_ip[i] = uint8_t(0x20 + i);
  }
  uint8_t bytes[kIpCmHeaderBytes];
  ASSERT_TRUE(EncodeIpCmHeader(h, bytes));
  EXPECT_EQ(bytes[1], 0x60);
  IpCmHeader back;
  ASSERT_EQ(DecodeIpCmHeader(bytes, sizeof bytes, &back), CmMadError::kOk);
  EXPECT_EQ(back.ip_version, 6);
  EXPECT_EQ(back.source_port, 0xBEEF);
  EXPECT_EQ(back.source_ip, h.source_ip);
  EXPECT_EQ(back.destination_ip, h.destination_ip);
  // IPv4 with an IPv6 address does not encode; IP version 5 does not decode.
  h.ip_version = 4;
  EXPECT_FALSE(EncodeIpCmHeader(h, bytes));
  bytes[1] = 0x50;
  EXPECT_EQ(DecodeIpCmHeader(bytes, sizeof bytes, &back), CmMadError::kBadField);
  EXPECT_EQ(DecodeIpCmHeader(bytes, kIpCmHeaderBytes - 1, &back), CmMadError::kTooShort);
  EXPECT_EQ(DecodeIpCmHeader(nullptr, 0, &back), CmMadError::kTooShort);
}

TEST(CmMadTest, MalformedMadsAreRefused) {
  const auto& mads = RpingMads();
  ASSERT_EQ(mads.size(), 5u);
  const std::vector<uint8_t>& req = mads[0].bytes;
  CmMad mad;
  // Every truncation, each in a buffer of exactly that size (ASan catches a
  // read past it).
  for (size_t length = 0; length < kMadBytes; ++length) {
    std::vector<uint8_t> cut(req.begin(), req.begin() + length);
    EXPECT_EQ(DecodeCmMad(length ? cut.data() : nullptr, length, &mad), CmMadError::kTooShort) << length;
  }
  auto with = [&](size_t offset, uint8_t value) {
    std::vector<uint8_t> b = req;
    b[offset] = value;
    return DecodeCmMad(b.data(), b.size(), &mad);
  };
  EXPECT_EQ(with(0, 2), CmMadError::kBadBaseVersion);
  EXPECT_EQ(with(1, 0x81), CmMadError::kNotCmClass);
  EXPECT_EQ(with(2, 1), CmMadError::kBadClassVersion);
  EXPECT_EQ(with(3, 0x83), CmMadError::kBadMethod);  // a response bit on Send
  EXPECT_EQ(with(3, 0x01), CmMadError::kBadMethod);  // Get
  EXPECT_EQ(with(17, 0x19), CmMadError::kUnknownAttribute);  // LAP
  EXPECT_EQ(with(17, 0x17), CmMadError::kUnknownAttribute);  // SIDR_REQ
  // REJ with the reserved "message rejected" value 3, or more ARI than fits.
  CmMad rej;
  rej.message = CmRej{};
  uint8_t bytes[kMadBytes];
  EncodeCmMad(rej, bytes);
  bytes[24 + 8] = 0xC0;
  EXPECT_EQ(DecodeCmMad(bytes, sizeof bytes, &mad), CmMadError::kBadField);
  bytes[24 + 8] = 0;
  bytes[24 + 9] = 73 << 1;
  EXPECT_EQ(DecodeCmMad(bytes, sizeof bytes, &mad), CmMadError::kBadField);
  bytes[24 + 9] = 72 << 1;
  EXPECT_EQ(DecodeCmMad(bytes, sizeof bytes, &mad), CmMadError::kOk);
}

TEST(CmMadTest, RandomMutationsDecodeOrAreRefusedAndEncodingIsAFixedPoint) {
  const auto& mads = RpingMads();
  ASSERT_EQ(mads.size(), 5u);
  std::mt19937 random(42);
  size_t decoded = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> b = mads[round % mads.size()].bytes;
    const int flips = 1 + random() % 8;
    for (int i = 0; i < flips; ++i) b[random() % b.size()] ^= uint8_t(1u << (random() % 8));
    CmMad mad;
    if (DecodeCmMad(b.data(), b.size(), &mad) != CmMadError::kOk) continue;
    ++decoded;
    uint8_t once[kMadBytes], twice[kMadBytes];
    EncodeCmMad(mad, once);
    CmMad again;
    ASSERT_EQ(DecodeCmMad(once, sizeof once, &again), CmMadError::kOk);
    EncodeCmMad(again, twice);
    ASSERT_EQ(0, std::memcmp(once, twice, kMadBytes));
  }
  EXPECT_GT(decoded, 1000u);
}

}  // namespace
}  // namespace uroce::cm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) uroce::cm::CapturePaths().push_back(argv[i]);
  return RUN_ALL_TESTS();
}
