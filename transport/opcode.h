// The one table of RoCEv2 transport opcodes (IBTA Vol. 1 9.2.1, table 38):
// every RC, UC, UD and XRC opcode, with the extension headers it carries and where
// they sit, its place in a message, and what payload it may carry. The packet
// builder and the packet parser both read it, so they cannot disagree.
//
// Thread-safety: a constant table; any thread.
#pragma once

#include <array>
#include <cstdint>

namespace uroce::transport {

// Opcode values: the top three bits select the transport service, the low
// five the operation (IBTA table 38; also Linux's ib_pack.h and rxe_opcode.c).
enum class Opcode : uint8_t {
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastWithImmediate = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyWithImmediate = 0x05,
  kRcRdmaWriteFirst = 0x06,
  kRcRdmaWriteMiddle = 0x07,
  kRcRdmaWriteLast = 0x08,
  kRcRdmaWriteLastWithImmediate = 0x09,
  kRcRdmaWriteOnly = 0x0A,
  kRcRdmaWriteOnlyWithImmediate = 0x0B,
  kRcRdmaReadRequest = 0x0C,
  kRcRdmaReadResponseFirst = 0x0D,
  kRcRdmaReadResponseMiddle = 0x0E,
  kRcRdmaReadResponseLast = 0x0F,
  kRcRdmaReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  // 0x15 is reserved (RESYNC belongs to the RD service).
  kRcSendLastWithInvalidate = 0x16,
  kRcSendOnlyWithInvalidate = 0x17,
  // 0x18-0x1C: reserved here (0x1C is IBTA 1.5's RDMA FLUSH, not offered).
  // ATOMIC WRITE (IBTA 1.5, 9.4.7): RC only, as in Linux rxe and Wireshark.
  kRcAtomicWrite = 0x1D,

  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastWithImmediate = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyWithImmediate = 0x25,
  kUcRdmaWriteFirst = 0x26,
  kUcRdmaWriteMiddle = 0x27,
  kUcRdmaWriteLast = 0x28,
  kUcRdmaWriteLastWithImmediate = 0x29,
  kUcRdmaWriteOnly = 0x2A,
  kUcRdmaWriteOnlyWithImmediate = 0x2B,

  kUdSendOnly = 0x64,
  kUdSendOnlyWithImmediate = 0x65,

  // XRC (IBTA table 38, service 101): the RC operations at base 0xA0, the
  // same low five bits. Requests carry an XRCETH right after the BTH; the
  // responses (READ response, ACK, atomic ACK) do not.
  kXrcSendFirst = 0xA0,
  kXrcSendMiddle = 0xA1,
  kXrcSendLast = 0xA2,
  kXrcSendLastWithImmediate = 0xA3,
  kXrcSendOnly = 0xA4,
  kXrcSendOnlyWithImmediate = 0xA5,
  kXrcRdmaWriteFirst = 0xA6,
  kXrcRdmaWriteMiddle = 0xA7,
  kXrcRdmaWriteLast = 0xA8,
  kXrcRdmaWriteLastWithImmediate = 0xA9,
  kXrcRdmaWriteOnly = 0xAA,
  kXrcRdmaWriteOnlyWithImmediate = 0xAB,
  kXrcRdmaReadRequest = 0xAC,
  kXrcRdmaReadResponseFirst = 0xAD,
  kXrcRdmaReadResponseMiddle = 0xAE,
  kXrcRdmaReadResponseLast = 0xAF,
  kXrcRdmaReadResponseOnly = 0xB0,
  kXrcAcknowledge = 0xB1,
  kXrcAtomicAcknowledge = 0xB2,
  kXrcCompareSwap = 0xB3,
  kXrcFetchAdd = 0xB4,
  kXrcSendLastWithInvalidate = 0xB6,
  kXrcSendOnlyWithInvalidate = 0xB7,

  // RoCEv2's Congestion Notification Packet (IBTA vol. 1 annex A17.9.3):
  // a receiver that got packets marked CE tells their sender's QP, which
  // slows down (congestion/dcqcn.h). BTH with BECN set, 16 reserved bytes.
  kCnp = 0x81,
};

// The opcode base of each service (IBTA table 38: bits 7-5).
constexpr uint8_t kRcOpcodeBase = 0x00;
constexpr uint8_t kXrcOpcodeBase = 0xA0;

// kCnp: the CNP's own opcode group (0x80), of no transport service.
enum class TransportService : uint8_t { kRc, kUc, kUd, kXrc, kCnp };

enum class Operation : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaReadRequest,
  kRdmaReadResponse,
  kAcknowledge,
  kAtomicAcknowledge,
  kCompareSwap,
  kFetchAdd,
  // IBTA 1.5 ATOMIC WRITE: 8 bytes stored as one naturally aligned write,
  // acknowledged like an RDMA WRITE (a plain ACK).
  kAtomicWrite,
  kCongestionNotification,  // a CNP
};

// Who sends the packet: a requester, or a responder answering with READ
// response data or with an acknowledgement (ACK/NAK, atomic ACK).
// A CNP is none of these: it comes from a receiver but answers no request.
enum class PacketRole : uint8_t { kRequest, kReadResponse, kAcknowledge, kCongestionNotification };

// Where the packet sits in its message (IBTA 9.5: First, Middle, Last, Only).
// Packets that are whole by nature (ACK, READ request, atomics) are kOnly.
enum class MessagePosition : uint8_t { kFirst, kMiddle, kLast, kOnly };

// How much payload the opcode may carry (IBTA 9.7.3.1.2 / 9.7.3.1.3 for
// requests, 9.7.5.1.3 for READ responses): First and Middle packets carry
// exactly one path MTU (so never zero bytes and never padding), a Last packet
// one byte up to a path MTU, an Only packet zero up to a path MTU; READ
// requests, atomics and acknowledgements carry none; an ATOMIC WRITE carries
// exactly its 8 bytes (IBTA 1.5, 9.4.7), so never padding. The parser does
// not know the path MTU, so the MTU bound is the responder's check.
// A CNP carries exactly its 16 reserved bytes (annex A17.9.3), no pad.
enum class PayloadRule : uint8_t { kNone, kFullMtu, kOneToMtu, kZeroToMtu, kExactlyEight, kExactlySixteen };

// Extension headers, as bits of OpcodeInfo::headers. When several are
// present they follow the BTH in this order (IBTA 9.2, figure 88).
enum ExtensionHeader : uint8_t {
  kDeth = 1 << 0,
  kReth = 1 << 1,
  kAtomicEth = 1 << 2,
  kAeth = 1 << 3,
  kAtomicAckEth = 1 << 4,
  kImmDt = 1 << 5,
  kIeth = 1 << 6,
  // XRC Extended Transport Header (IBTA annex A14, XRC): the XRC SRQ
  // number of the receiver. It comes first after the BTH.
  kXrcEth = 1 << 7,
};

struct OpcodeInfo {
  bool valid = false;  // false: reserved or unsupported (RD, ...)
  uint8_t opcode = 0;
  const char* name = "UNKNOWN";  // "RC SEND_ONLY": service, then IBTA's operation name
  TransportService service = TransportService::kRc;
  Operation operation = Operation::kSend;
  PacketRole role = PacketRole::kRequest;
  MessagePosition position = MessagePosition::kOnly;
  PayloadRule payload = PayloadRule::kNone;
  uint8_t headers = 0;       // ExtensionHeader bits
  uint8_t header_bytes = 0;  // BTH plus every extension header
  // Offsets from the first byte of the BTH; 0 when the header is absent (the
  // BTH itself is at 0, so no extension header can be).
  uint8_t deth_offset = 0;
  uint8_t reth_offset = 0;
  uint8_t atomic_eth_offset = 0;
  uint8_t aeth_offset = 0;
  uint8_t atomic_ack_eth_offset = 0;
  uint8_t immdt_offset = 0;
  uint8_t ieth_offset = 0;
  uint8_t xrceth_offset = 0;

  constexpr bool has(ExtensionHeader h) const { return (headers & h) != 0; }
  bool has_payload() const { return payload != PayloadRule::kNone; }
  // Starts a message (First or Only) / ends one (Last or Only).
  bool starts_message() const { return position == MessagePosition::kFirst || position == MessagePosition::kOnly; }
  bool ends_message() const { return position == MessagePosition::kLast || position == MessagePosition::kOnly; }
  // Padding is allowed only where the payload may end a message.
  bool may_pad() const { return payload == PayloadRule::kOneToMtu || payload == PayloadRule::kZeroToMtu; }
};

// All 256 opcode values; unknown ones have valid == false.
extern const std::array<OpcodeInfo, 256> kOpcodeTable;

inline const OpcodeInfo& LookupOpcode(uint8_t opcode) { return kOpcodeTable[opcode]; }
inline const OpcodeInfo& LookupOpcode(Opcode opcode) { return kOpcodeTable[static_cast<uint8_t>(opcode)]; }

// Every valid opcode, in increasing order (for tests and tools).
extern const std::array<Opcode, 62> kAllOpcodes;

const char* TransportServiceName(TransportService service);  // "RC", "UC", "UD", "XRC", "CNP"
const char* MessagePositionName(MessagePosition position);   // "first", ...

}  // namespace uroce::transport
