// IB CM MADs (IBTA vol. 1): the common MAD header (13.4.2) and the
// communication management messages (12.6: REQ, MRA, REJ, REP, RTU, DREQ,
// DREP), plus the IP CM header of the RDMA IP CM Service (Annex A11) that
// opens a REQ's private data. Encoding is exact: decode then encode gives the
// same 256 bytes for every message the Linux kernel's CM sends (reserved
// fields are zero there and here), see cm_mad_test.
//
// Wire input is never trusted: Decode* check the length and the fields the
// CM relies on and refuse anything else with a CmMadError, never reading past
// `length`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "transport/headers.h"

namespace uroce::cm {

inline constexpr size_t kMadBytes = 256;          // IBTA 13.4.1: every MAD on QP1
inline constexpr size_t kMadHeaderBytes = 24;     // IBTA 13.4.2
inline constexpr size_t kCmMessageBytes = kMadBytes - kMadHeaderBytes;  // 232
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kCmManagementClass = 0x07;  // IBTA table 137
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMadMethodSend = 0x03;      // every CM message is a Send (12.6.1)
inline constexpr size_t kIpCmHeaderBytes = 36;       // Annex A11.4

// Attribute IDs of the CM class (IBTA table 185).
enum class CmAttribute : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
};

// "Message REJected" / "Message MRAed" (IBTA 12.6.6, 12.6.7).
enum class CmMessageKind : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// The RDMA IP CM service's IDs (IBTA Annex A11.2.1; rdma_cm's port space
// RDMA_PS_TCP): 0x0000000001060000 | port.
inline constexpr uint64_t kRdmaIpServiceIdBase = 0x0000000001060000ull;
inline constexpr uint64_t IpServiceId(uint16_t port) { return kRdmaIpServiceIdBase | port; }

// Reject reasons used here (IBTA table 112).
inline constexpr uint16_t kRejTimeout = 4;
inline constexpr uint16_t kRejInvalidCommId = 6;
inline constexpr uint16_t kRejInvalidServiceId = 8;
inline constexpr uint16_t kRejStaleConnection = 10;
inline constexpr uint16_t kRejInvalidPathMtu = 26;
inline constexpr uint16_t kRejConsumer = 28;

struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t management_class = kCmManagementClass;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;  // 7 bits; the R bit (response) is the top bit
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;
};

// One path of a REQ (IBTA 12.6.5, "Primary ..." / "Alternate ..."). On RoCE
// the LIDs are 0xFFFF (permissive) and the GIDs are IP addresses.
struct CmPath {
  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  transport::Gid local_gid{};
  transport::Gid remote_gid{};
  uint32_t flow_label = 0;     // 20 bits
  uint8_t packet_rate = 0;     // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;              // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits
};

struct CmReq {  // IBTA 12.6.5
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;            // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;           // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;          // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits: 4.096 us * 2^x
  uint8_t transport_service_type = 0;      // 2 bits: 0 RC, 1 UC, 3 XRC (via extended)
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;         // 24 bits
  uint8_t local_cm_response_timeout = 0;   // 5 bits
  uint8_t retry_count = 0;           // 3 bits
  uint16_t partition_key = 0xFFFF;
  uint8_t path_mtu = 0;              // 4 bits, the ibv_mtu enum
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;       // 3 bits
  uint8_t max_cm_retries = 0;        // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits
  CmPath primary, alternate;
  std::array<uint8_t, 92> private_data{};
};

struct CmMra {  // IBTA 12.6.6
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMessageKind message_mraed = CmMessageKind::kReq;
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, 222> private_data{};
};

struct CmRej {  // IBTA 12.6.7
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMessageKind message_rejected = CmMessageKind::kReq;
  uint8_t reject_info_length = 0;  // 7 bits, bytes of `additional_info` used
  uint16_t reason = 0;
  std::array<uint8_t, 72> additional_info{};
  std::array<uint8_t, 148> private_data{};
};

struct CmRep {  // IBTA 12.6.8
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;    // 24 bits
  uint32_t local_eecn = 0;   // 24 bits
  uint32_t starting_psn = 0; // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;    // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, 196> private_data{};
};

struct CmRtu {  // IBTA 12.6.9
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
};

struct CmDreq {  // IBTA 12.6.10
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;  // 24 bits: the QPN of the DREQ's recipient
  std::array<uint8_t, 220> private_data{};
};

struct CmDrep {  // IBTA 12.6.11
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
};

using CmMessage = std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep>;

struct CmMad {
  MadHeader header;
  CmMessage message;
};

enum class CmMadError {
  kOk = 0,
  kTooShort,             // fewer than 256 bytes
  kBadBaseVersion,
  kNotCmClass,
  kBadClassVersion,
  kBadMethod,            // not Send (the CM uses nothing else, 12.6.1)
  kUnknownAttribute,     // LAP, APR, SIDR, ClassPortInfo: not handled here
  kBadField,             // a field with a value the spec forbids
};

const char* CmMadErrorName(CmMadError error);

CmMadError DecodeMadHeader(const uint8_t* data, size_t length, MadHeader* out);
void EncodeMadHeader(const MadHeader& header, uint8_t* out /* kMadHeaderBytes */);

// Decodes a whole CM MAD (the UD payload: exactly 256 bytes, or more, of
// which the first 256 count).
CmMadError DecodeCmMad(const uint8_t* data, size_t length, CmMad* out);
// Writes 256 bytes. The attribute ID comes from the message's type, whatever
// header.attribute_id says.
void EncodeCmMad(const CmMad& mad, uint8_t* out /* kMadBytes */);
CmAttribute AttributeOf(const CmMessage& message);

// The IP CM header (Annex A11.4) at the start of a REQ's private data:
// version, IP version, source port, source and destination addresses. IPv4
// addresses travel as 12 zero bytes and the address; here they are
// IPv4-mapped GIDs (::ffff:a.b.c.d) either way.
struct IpCmHeader {
  uint8_t major_version = 0;  // 4 bits
  uint8_t minor_version = 0;  // 4 bits
  uint8_t ip_version = 4;     // 4 or 6
  uint16_t source_port = 0;
  transport::Gid source_ip{};
  transport::Gid destination_ip{};
};

// Refuses a short buffer and an IP version other than 4 or 6. The CM checks
// the version (A11.4: major version 0). An IPv4 address is read from the last
// 4 bytes of its field whatever the 12 before it hold (the kernel writes
// zeros there, as we do).
CmMadError DecodeIpCmHeader(const uint8_t* data, size_t length, IpCmHeader* out);
// Writes kIpCmHeaderBytes; false if the addresses do not fit the IP version.
bool EncodeIpCmHeader(const IpCmHeader& header, uint8_t* out);

}  // namespace uroce::cm
