#include "transport/opcode.h"

#include "transport/headers.h"

namespace uroce::transport {
namespace {

// One row of IBTA table 38, as this file writes it down.
struct OpcodeRow {
  Opcode opcode;
  const char* name;
  Operation operation;
  PacketRole role;
  MessagePosition position;
  PayloadRule payload;
  uint8_t headers;
};

using Op = Operation;
using Pos = MessagePosition;
using Pay = PayloadRule;
using Role = PacketRole;

// The requester's SEND and RDMA WRITE opcodes are the same in RC and UC, at
// base 0x00 and 0x20 (IBTA table 38), so they are listed once per service.
constexpr OpcodeRow kRows[] = {
    // RC (0x00-0x17, 0x1D)
    {Opcode::kRcSendFirst, "RC SEND_FIRST", Op::kSend, Role::kRequest, Pos::kFirst, Pay::kFullMtu, 0},
    {Opcode::kRcSendMiddle, "RC SEND_MIDDLE", Op::kSend, Role::kRequest, Pos::kMiddle, Pay::kFullMtu, 0},
    {Opcode::kRcSendLast, "RC SEND_LAST", Op::kSend, Role::kRequest, Pos::kLast, Pay::kOneToMtu, 0},
    {Opcode::kRcSendLastWithImmediate, "RC SEND_LAST_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kLast,
     Pay::kOneToMtu, kImmDt},
    {Opcode::kRcSendOnly, "RC SEND_ONLY", Op::kSend, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu, 0},
    {Opcode::kRcSendOnlyWithImmediate, "RC SEND_ONLY_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kImmDt},
    {Opcode::kRcRdmaWriteFirst, "RC RDMA_WRITE_FIRST", Op::kRdmaWrite, Role::kRequest, Pos::kFirst, Pay::kFullMtu,
     kReth},
    {Opcode::kRcRdmaWriteMiddle, "RC RDMA_WRITE_MIDDLE", Op::kRdmaWrite, Role::kRequest, Pos::kMiddle,
     Pay::kFullMtu, 0},
    {Opcode::kRcRdmaWriteLast, "RC RDMA_WRITE_LAST", Op::kRdmaWrite, Role::kRequest, Pos::kLast, Pay::kOneToMtu, 0},
    {Opcode::kRcRdmaWriteLastWithImmediate, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kLast, Pay::kOneToMtu, kImmDt},
    {Opcode::kRcRdmaWriteOnly, "RC RDMA_WRITE_ONLY", Op::kRdmaWrite, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu,
     kReth},
    {Opcode::kRcRdmaWriteOnlyWithImmediate, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kOnly, Pay::kZeroToMtu, kReth | kImmDt},
    {Opcode::kRcRdmaReadRequest, "RC RDMA_READ_REQUEST", Op::kRdmaReadRequest, Role::kRequest, Pos::kOnly,
     Pay::kNone, kReth},
    {Opcode::kRcRdmaReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kFirst, Pay::kFullMtu, kAeth},
    // IBTA 9.3.5: Middle READ responses carry no AETH.
    {Opcode::kRcRdmaReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kMiddle, Pay::kFullMtu, 0},
    {Opcode::kRcRdmaReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kLast, Pay::kOneToMtu, kAeth},
    {Opcode::kRcRdmaReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kOnly, Pay::kZeroToMtu, kAeth},
    {Opcode::kRcAcknowledge, "RC ACKNOWLEDGE", Op::kAcknowledge, Role::kAcknowledge, Pos::kOnly, Pay::kNone, kAeth},
    {Opcode::kRcAtomicAcknowledge, "RC ATOMIC_ACKNOWLEDGE", Op::kAtomicAcknowledge, Role::kAcknowledge, Pos::kOnly,
     Pay::kNone, kAeth | kAtomicAckEth},
    {Opcode::kRcCompareSwap, "RC COMPARE_SWAP", Op::kCompareSwap, Role::kRequest, Pos::kOnly, Pay::kNone,
     kAtomicEth},
    {Opcode::kRcFetchAdd, "RC FETCH_ADD", Op::kFetchAdd, Role::kRequest, Pos::kOnly, Pay::kNone, kAtomicEth},
    {Opcode::kRcSendLastWithInvalidate, "RC SEND_LAST_WITH_INVALIDATE", Op::kSend, Role::kRequest, Pos::kLast,
     Pay::kOneToMtu, kIeth},
    {Opcode::kRcSendOnlyWithInvalidate, "RC SEND_ONLY_WITH_INVALIDATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kIeth},
    // IBTA 1.5 ATOMIC WRITE: a RETH (its DMA length 8) then the 8 bytes.
    {Opcode::kRcAtomicWrite, "RC ATOMIC_WRITE", Op::kAtomicWrite, Role::kRequest, Pos::kOnly, Pay::kExactlyEight,
     kReth},

    // UC (0x20-0x2B): SEND and RDMA WRITE only, no responses of any kind.
    {Opcode::kUcSendFirst, "UC SEND_FIRST", Op::kSend, Role::kRequest, Pos::kFirst, Pay::kFullMtu, 0},
    {Opcode::kUcSendMiddle, "UC SEND_MIDDLE", Op::kSend, Role::kRequest, Pos::kMiddle, Pay::kFullMtu, 0},
    {Opcode::kUcSendLast, "UC SEND_LAST", Op::kSend, Role::kRequest, Pos::kLast, Pay::kOneToMtu, 0},
    {Opcode::kUcSendLastWithImmediate, "UC SEND_LAST_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kLast,
     Pay::kOneToMtu, kImmDt},
    {Opcode::kUcSendOnly, "UC SEND_ONLY", Op::kSend, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu, 0},
    {Opcode::kUcSendOnlyWithImmediate, "UC SEND_ONLY_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kImmDt},
    {Opcode::kUcRdmaWriteFirst, "UC RDMA_WRITE_FIRST", Op::kRdmaWrite, Role::kRequest, Pos::kFirst, Pay::kFullMtu,
     kReth},
    {Opcode::kUcRdmaWriteMiddle, "UC RDMA_WRITE_MIDDLE", Op::kRdmaWrite, Role::kRequest, Pos::kMiddle,
     Pay::kFullMtu, 0},
    {Opcode::kUcRdmaWriteLast, "UC RDMA_WRITE_LAST", Op::kRdmaWrite, Role::kRequest, Pos::kLast, Pay::kOneToMtu, 0},
    {Opcode::kUcRdmaWriteLastWithImmediate, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kLast, Pay::kOneToMtu, kImmDt},
    {Opcode::kUcRdmaWriteOnly, "UC RDMA_WRITE_ONLY", Op::kRdmaWrite, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu,
     kReth},
    {Opcode::kUcRdmaWriteOnlyWithImmediate, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kOnly, Pay::kZeroToMtu, kReth | kImmDt},

    // UD (0x60 base): only SEND Only exists; every packet is a whole message
    // with a DETH (IBTA 9.2.1, 9.3.2).
    {Opcode::kUdSendOnly, "UD SEND_ONLY", Op::kSend, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu, kDeth},
    {Opcode::kUdSendOnlyWithImmediate, "UD SEND_ONLY_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kDeth | kImmDt},

    // XRC (0xA0-0xB7): RC's operations; every request carries an XRCETH
    // naming the receiver's XRC SRQ, no response does (IBTA annex A14).
    {Opcode::kXrcSendFirst, "XRC SEND_FIRST", Op::kSend, Role::kRequest, Pos::kFirst, Pay::kFullMtu, kXrcEth},
    {Opcode::kXrcSendMiddle, "XRC SEND_MIDDLE", Op::kSend, Role::kRequest, Pos::kMiddle, Pay::kFullMtu, kXrcEth},
    {Opcode::kXrcSendLast, "XRC SEND_LAST", Op::kSend, Role::kRequest, Pos::kLast, Pay::kOneToMtu, kXrcEth},
    {Opcode::kXrcSendLastWithImmediate, "XRC SEND_LAST_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kLast,
     Pay::kOneToMtu, kXrcEth | kImmDt},
    {Opcode::kXrcSendOnly, "XRC SEND_ONLY", Op::kSend, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu, kXrcEth},
    {Opcode::kXrcSendOnlyWithImmediate, "XRC SEND_ONLY_WITH_IMMEDIATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kXrcEth | kImmDt},
    {Opcode::kXrcRdmaWriteFirst, "XRC RDMA_WRITE_FIRST", Op::kRdmaWrite, Role::kRequest, Pos::kFirst, Pay::kFullMtu,
     kXrcEth | kReth},
    {Opcode::kXrcRdmaWriteMiddle, "XRC RDMA_WRITE_MIDDLE", Op::kRdmaWrite, Role::kRequest, Pos::kMiddle,
     Pay::kFullMtu, kXrcEth},
    {Opcode::kXrcRdmaWriteLast, "XRC RDMA_WRITE_LAST", Op::kRdmaWrite, Role::kRequest, Pos::kLast, Pay::kOneToMtu,
     kXrcEth},
    {Opcode::kXrcRdmaWriteLastWithImmediate, "XRC RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kLast, Pay::kOneToMtu, kXrcEth | kImmDt},
    {Opcode::kXrcRdmaWriteOnly, "XRC RDMA_WRITE_ONLY", Op::kRdmaWrite, Role::kRequest, Pos::kOnly, Pay::kZeroToMtu,
     kXrcEth | kReth},
    {Opcode::kXrcRdmaWriteOnlyWithImmediate, "XRC RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kRdmaWrite, Role::kRequest,
     Pos::kOnly, Pay::kZeroToMtu, kXrcEth | kReth | kImmDt},
    {Opcode::kXrcRdmaReadRequest, "XRC RDMA_READ_REQUEST", Op::kRdmaReadRequest, Role::kRequest, Pos::kOnly,
     Pay::kNone, kXrcEth | kReth},
    {Opcode::kXrcRdmaReadResponseFirst, "XRC RDMA_READ_RESPONSE_FIRST", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kFirst, Pay::kFullMtu, kAeth},
    {Opcode::kXrcRdmaReadResponseMiddle, "XRC RDMA_READ_RESPONSE_MIDDLE", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kMiddle, Pay::kFullMtu, 0},
    {Opcode::kXrcRdmaReadResponseLast, "XRC RDMA_READ_RESPONSE_LAST", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kLast, Pay::kOneToMtu, kAeth},
    {Opcode::kXrcRdmaReadResponseOnly, "XRC RDMA_READ_RESPONSE_ONLY", Op::kRdmaReadResponse, Role::kReadResponse,
     Pos::kOnly, Pay::kZeroToMtu, kAeth},
    {Opcode::kXrcAcknowledge, "XRC ACKNOWLEDGE", Op::kAcknowledge, Role::kAcknowledge, Pos::kOnly, Pay::kNone, kAeth},
    {Opcode::kXrcAtomicAcknowledge, "XRC ATOMIC_ACKNOWLEDGE", Op::kAtomicAcknowledge, Role::kAcknowledge, Pos::kOnly,
     Pay::kNone, kAeth | kAtomicAckEth},
    {Opcode::kXrcCompareSwap, "XRC COMPARE_SWAP", Op::kCompareSwap, Role::kRequest, Pos::kOnly, Pay::kNone,
     kXrcEth | kAtomicEth},
    {Opcode::kXrcFetchAdd, "XRC FETCH_ADD", Op::kFetchAdd, Role::kRequest, Pos::kOnly, Pay::kNone,
     kXrcEth | kAtomicEth},
    {Opcode::kXrcSendLastWithInvalidate, "XRC SEND_LAST_WITH_INVALIDATE", Op::kSend, Role::kRequest, Pos::kLast,
     Pay::kOneToMtu, kXrcEth | kIeth},
    {Opcode::kXrcSendOnlyWithInvalidate, "XRC SEND_ONLY_WITH_INVALIDATE", Op::kSend, Role::kRequest, Pos::kOnly,
     Pay::kZeroToMtu, kXrcEth | kIeth},
    {Opcode::kCnp, "CNP CONGESTION_NOTIFICATION", Op::kCongestionNotification, Role::kCongestionNotification, Pos::kOnly, Pay::kExactlySixteen,
     0},
};

constexpr TransportService ServiceOf(Opcode op) {
  const uint8_t base = static_cast<uint8_t>(op) & 0xE0;  // IBTA table 38: bits 7-5
  return base == 0x00   ? TransportService::kRc
         : base == 0x20 ? TransportService::kUc
         : base == 0xA0 ? TransportService::kXrc
         : base == 0x80 ? TransportService::kCnp
                        : TransportService::kUd;
}

constexpr OpcodeInfo MakeInfo(const OpcodeRow& row) {
  OpcodeInfo info;
  info.valid = true;
  info.opcode = static_cast<uint8_t>(row.opcode);
  info.name = row.name;
  info.service = ServiceOf(row.opcode);
  info.operation = row.operation;
  info.role = row.role;
  info.position = row.position;
  info.payload = row.payload;
  info.headers = row.headers;
  // Lay the extension headers out in IBTA order after the 12-byte BTH.
  uint8_t offset = sizeof(BthHeader);
  auto place = [&](ExtensionHeader h, size_t bytes) -> uint8_t {
    if (!(row.headers & h)) return 0;
    const uint8_t at = offset;
    offset = static_cast<uint8_t>(offset + bytes);
    return at;
  };
  info.deth_offset = place(kDeth, sizeof(DethHeader));
  info.xrceth_offset = place(kXrcEth, sizeof(XrcEthHeader));
  info.reth_offset = place(kReth, sizeof(RethHeader));
  info.atomic_eth_offset = place(kAtomicEth, sizeof(AtomicEthHeader));
  info.aeth_offset = place(kAeth, sizeof(AethHeader));
  info.atomic_ack_eth_offset = place(kAtomicAckEth, sizeof(AtomicAckEthHeader));
  info.immdt_offset = place(kImmDt, sizeof(ImmDtHeader));
  info.ieth_offset = place(kIeth, sizeof(IethHeader));
  info.header_bytes = offset;
  return info;
}

constexpr std::array<OpcodeInfo, 256> BuildTable() {
  std::array<OpcodeInfo, 256> table{};
  for (size_t i = 0; i < table.size(); ++i) table[i].opcode = static_cast<uint8_t>(i);
  for (const OpcodeRow& row : kRows) table[static_cast<uint8_t>(row.opcode)] = MakeInfo(row);
  return table;
}

constexpr std::array<Opcode, std::size(kRows)> BuildList() {
  std::array<Opcode, std::size(kRows)> list{};
  for (size_t i = 0; i < std::size(kRows); ++i) list[i] = kRows[i].opcode;
  return list;
}

}  // namespace

constexpr std::array<OpcodeInfo, 256> kOpcodeTable = BuildTable();
constexpr std::array<Opcode, 62> kAllOpcodes = BuildList();

// Facts of IBTA table 38 and section 9.3, checked when this file compiles.
static_assert(kOpcodeTable[0x04].header_bytes == 12);                         // RC SEND Only: BTH
static_assert(kOpcodeTable[0x0B].reth_offset == 12 && kOpcodeTable[0x0B].immdt_offset == 28);
static_assert(kOpcodeTable[0x0C].header_bytes == 28);                         // READ request: BTH + RETH
static_assert(kOpcodeTable[0x12].aeth_offset == 12 && kOpcodeTable[0x12].atomic_ack_eth_offset == 16);
static_assert(kOpcodeTable[0x13].header_bytes == 40);                         // CmpSwap: BTH + AtomicETH
static_assert(kOpcodeTable[0x65].deth_offset == 12 && kOpcodeTable[0x65].immdt_offset == 20);
static_assert(kOpcodeTable[0xA4].xrceth_offset == 12 && kOpcodeTable[0xA4].header_bytes == 16);  // XRC SEND Only
static_assert(kOpcodeTable[0xAB].reth_offset == 16 && kOpcodeTable[0xAB].immdt_offset == 32);
static_assert(kOpcodeTable[0xB3].atomic_eth_offset == 16 && kOpcodeTable[0xB3].header_bytes == 44);
static_assert(kOpcodeTable[0xB1].header_bytes == 16 && !kOpcodeTable[0xB1].has(kXrcEth));  // XRC ACK: no XRCETH
static_assert(!kOpcodeTable[0xB5].valid && !kOpcodeTable[0xB8].valid);
static_assert(kOpcodeTable[0x1D].reth_offset == 12 && kOpcodeTable[0x1D].header_bytes == 28);  // ATOMIC WRITE
static_assert(!kOpcodeTable[0x1C].valid && !kOpcodeTable[0xBD].valid);  // FLUSH; no XRC ATOMIC WRITE here
static_assert(kOpcodeTable[0x81].header_bytes == 12 && !kOpcodeTable[0x80].valid);  // CNP: BTH only
static_assert(!kOpcodeTable[0x15].valid && !kOpcodeTable[0x2C].valid && !kOpcodeTable[0x63].valid);

const char* TransportServiceName(TransportService service) {
  switch (service) {
    case TransportService::kRc: return "RC";
    case TransportService::kUc: return "UC";
    case TransportService::kUd: return "UD";
    case TransportService::kXrc: return "XRC";
    case TransportService::kCnp: return "CNP";
  }
  return "?";
}

const char* MessagePositionName(MessagePosition position) {
  switch (position) {
    case MessagePosition::kFirst: return "first";
    case MessagePosition::kMiddle: return "middle";
    case MessagePosition::kLast: return "last";
    case MessagePosition::kOnly: return "only";
  }
  return "?";
}

}  // namespace uroce::transport
