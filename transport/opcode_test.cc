#include "transport/opcode.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "transport/headers.h"

namespace uroce::transport {
namespace {

TEST(OpcodeTest, EveryListedOpcodeIsValidAndNoOtherIs) {
  std::set<uint8_t> listed;
  for (Opcode op : kAllOpcodes) listed.insert(static_cast<uint8_t>(op));
  EXPECT_EQ(listed.size(), kAllOpcodes.size());
  for (unsigned v = 0; v < 256; ++v) {
    const OpcodeInfo& info = LookupOpcode(static_cast<uint8_t>(v));
    EXPECT_EQ(info.valid, listed.count(static_cast<uint8_t>(v)) == 1) << "opcode " << v;
    EXPECT_EQ(info.opcode, v);
  }
}

// IBTA table 38 values spelled out independently of the enum.
TEST(OpcodeTest, ValuesMatchIbtaTable38) {
  EXPECT_STREQ(LookupOpcode(uint8_t{0x00}).name, "RC SEND_FIRST");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x04}).name, "RC SEND_ONLY");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x0A}).name, "RC RDMA_WRITE_ONLY");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x0C}).name, "RC RDMA_READ_REQUEST");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x10}).name, "RC RDMA_READ_RESPONSE_ONLY");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x11}).name, "RC ACKNOWLEDGE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x12}).name, "RC ATOMIC_ACKNOWLEDGE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x13}).name, "RC COMPARE_SWAP");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x14}).name, "RC FETCH_ADD");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x16}).name, "RC SEND_LAST_WITH_INVALIDATE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x17}).name, "RC SEND_ONLY_WITH_INVALIDATE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x20}).name, "UC SEND_FIRST");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x2B}).name, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x64}).name, "UD SEND_ONLY");
  EXPECT_STREQ(LookupOpcode(uint8_t{0x65}).name, "UD SEND_ONLY_WITH_IMMEDIATE");
  EXPECT_FALSE(LookupOpcode(uint8_t{0x15}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0x18}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0x2C}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0x60}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0x66}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0xFF}).valid);
}

TEST(OpcodeTest, NamesAgreeWithServiceAndPosition) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = LookupOpcode(op);
    const std::string name = info.name;
    const std::string service = std::string(TransportServiceName(info.service)) + " ";
    EXPECT_EQ(name.substr(0, service.size()), service) << name;
    const bool first = name.find("_FIRST") != std::string::npos;
    const bool middle = name.find("_MIDDLE") != std::string::npos;
    const bool last = name.find("_LAST") != std::string::npos;
    EXPECT_EQ(info.position == MessagePosition::kFirst, first) << name;
    EXPECT_EQ(info.position == MessagePosition::kMiddle, middle) << name;
    EXPECT_EQ(info.position == MessagePosition::kLast, last) << name;
    EXPECT_EQ(info.has(kImmDt), name.find("IMMEDIATE") != std::string::npos) << name;
    EXPECT_EQ(info.has(kIeth), name.find("INVALIDATE") != std::string::npos) << name;
    EXPECT_EQ(info.has(kDeth), info.service == TransportService::kUd) << name;
    // RETH on the first packet of a WRITE, on READ requests (IBTA 9.3.3)
    // and on ATOMIC WRITEs (IBTA 1.5, 9.4.7).
    const bool write_start = info.operation == Operation::kRdmaWrite && info.starts_message();
    EXPECT_EQ(info.has(kReth), write_start || info.operation == Operation::kRdmaReadRequest ||
                                   info.operation == Operation::kAtomicWrite)
        << name;
    EXPECT_EQ(info.has(kAtomicEth),
              info.operation == Operation::kCompareSwap || info.operation == Operation::kFetchAdd)
        << name;
    EXPECT_EQ(info.has(kAtomicAckEth), info.operation == Operation::kAtomicAcknowledge) << name;
    // Payload allowed exactly where data moves from requester or READ
    // responder, and the CNP's 16 reserved bytes (annex A17.9.3).
    const bool data = info.operation == Operation::kSend || info.operation == Operation::kRdmaWrite ||
                      info.operation == Operation::kRdmaReadResponse || info.operation == Operation::kAtomicWrite ||
                      info.operation == Operation::kCongestionNotification;
    EXPECT_EQ(info.payload == PayloadRule::kExactlySixteen, info.operation == Operation::kCongestionNotification)
        << name;
    EXPECT_EQ(info.has_payload(), data) << name;
    // An ATOMIC WRITE carries its 8 bytes, nothing else.
    EXPECT_EQ(info.payload == PayloadRule::kExactlyEight, info.operation == Operation::kAtomicWrite) << name;
    // XRCETH on every XRC request and nowhere else (IBTA annex A14).
    EXPECT_EQ(info.has(kXrcEth), info.service == TransportService::kXrc && info.role == PacketRole::kRequest)
        << name;
    // Only RC and XRC have responders that send packets back (IBTA 9.7, 9.8).
    // A CNP is its own kind.
    if (info.service != TransportService::kRc && info.service != TransportService::kXrc) {
      EXPECT_EQ(info.role, info.service == TransportService::kCnp ? PacketRole::kCongestionNotification
                                                                  : PacketRole::kRequest)
          << name;
    }
  }
}

TEST(OpcodeTest, OffsetsFollowIbtaHeaderOrder) {
  for (Opcode op : kAllOpcodes) {
    const OpcodeInfo& info = LookupOpcode(op);
    size_t at = sizeof(BthHeader);
    auto expect_at = [&](ExtensionHeader h, uint8_t offset, size_t bytes, const char* what) {
      if (info.has(h)) {
        EXPECT_EQ(offset, at) << info.name << " " << what;
        at += bytes;
      } else {
        EXPECT_EQ(offset, 0) << info.name << " " << what;
      }
    };
    expect_at(kDeth, info.deth_offset, sizeof(DethHeader), "DETH");
    expect_at(kXrcEth, info.xrceth_offset, sizeof(XrcEthHeader), "XRCETH");
    expect_at(kReth, info.reth_offset, sizeof(RethHeader), "RETH");
    expect_at(kAtomicEth, info.atomic_eth_offset, sizeof(AtomicEthHeader), "AtomicETH");
    expect_at(kAeth, info.aeth_offset, sizeof(AethHeader), "AETH");
    expect_at(kAtomicAckEth, info.atomic_ack_eth_offset, sizeof(AtomicAckEthHeader), "AtomicAckETH");
    expect_at(kImmDt, info.immdt_offset, sizeof(ImmDtHeader), "ImmDt");
    expect_at(kIeth, info.ieth_offset, sizeof(IethHeader), "IETH");
    EXPECT_EQ(info.header_bytes, at) << info.name;
  }
  // Spot checks against IBTA's header lists.
  EXPECT_EQ(LookupOpcode(Opcode::kRcRdmaWriteOnlyWithImmediate).header_bytes, 12 + 16 + 4);
  EXPECT_EQ(LookupOpcode(Opcode::kRcAtomicAcknowledge).header_bytes, 12 + 4 + 8);
  EXPECT_EQ(LookupOpcode(Opcode::kUdSendOnlyWithImmediate).header_bytes, 12 + 8 + 4);
  EXPECT_EQ(LookupOpcode(Opcode::kRcFetchAdd).header_bytes, 12 + 28);
  EXPECT_EQ(LookupOpcode(Opcode::kRcRdmaReadResponseMiddle).header_bytes, 12);
}

// XRC (IBTA table 38, service 101): RC's operations at 0xA0 + RC's code, the
// same layout with the 4-byte XRCETH first after the BTH on requests.
TEST(OpcodeTest, XrcOpcodesAreRcsPlusAnXrceth) {
  EXPECT_STREQ(LookupOpcode(uint8_t{0xA0}).name, "XRC SEND_FIRST");
  EXPECT_STREQ(LookupOpcode(uint8_t{0xA4}).name, "XRC SEND_ONLY");
  EXPECT_STREQ(LookupOpcode(uint8_t{0xAC}).name, "XRC RDMA_READ_REQUEST");
  EXPECT_STREQ(LookupOpcode(uint8_t{0xB1}).name, "XRC ACKNOWLEDGE");
  EXPECT_STREQ(LookupOpcode(uint8_t{0xB4}).name, "XRC FETCH_ADD");
  EXPECT_STREQ(LookupOpcode(uint8_t{0xB7}).name, "XRC SEND_ONLY_WITH_INVALIDATE");
  EXPECT_FALSE(LookupOpcode(uint8_t{0xB5}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0xB8}).valid);
  EXPECT_FALSE(LookupOpcode(uint8_t{0x9F}).valid);
  int xrc = 0;
  for (unsigned v = 0; v < 0x18; ++v) {
    const OpcodeInfo& rc = LookupOpcode(static_cast<uint8_t>(v));
    const OpcodeInfo& x = LookupOpcode(static_cast<uint8_t>(0xA0 + v));
    ASSERT_EQ(rc.valid, x.valid) << v;
    if (!rc.valid) continue;
    ++xrc;
    EXPECT_EQ(x.service, TransportService::kXrc);
    EXPECT_EQ(x.operation, rc.operation);
    EXPECT_EQ(x.role, rc.role);
    EXPECT_EQ(x.position, rc.position);
    EXPECT_EQ(x.payload, rc.payload);
    const bool request = rc.role == PacketRole::kRequest;
    EXPECT_EQ(x.headers, rc.headers | (request ? kXrcEth : 0)) << x.name;
    EXPECT_EQ(x.header_bytes, rc.header_bytes + (request ? 4 : 0)) << x.name;
    EXPECT_EQ(x.xrceth_offset, request ? 12 : 0) << x.name;
    EXPECT_EQ(x.reth_offset, rc.reth_offset ? rc.reth_offset + (request ? 4 : 0) : 0) << x.name;
    EXPECT_EQ(x.aeth_offset, rc.aeth_offset) << x.name;
  }
  EXPECT_EQ(xrc, 23);
}

}  // namespace
}  // namespace uroce::transport
