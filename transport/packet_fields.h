// What the engine's pipeline stages exchange with the frame layer: the fields
// of a packet to build (PacketFields) and of a packet received (RxPacket).
// Host-order values; the wire layout lives in headers.h.
#pragma once

#include <cstdint>

#include "transport/headers.h"
#include "transport/opcode.h"

namespace uroce::transport {

struct PacketFields {
  BthFields bth;
  RethFields reth;
  AethFields aeth;
  AtomicEthFields atomic_eth;
  AtomicAckEthFields atomic_ack_eth;
  DethFields deth;
  uint32_t immediate_be = 0;  // ImmDt as ibv_wc/ibv_send_wr keep it (network order)
  uint32_t ieth_rkey = 0;
  bool has_reth = false, has_aeth = false, has_atomic_eth = false, has_atomic_ack_eth = false;
  bool has_deth = false, has_immediate = false, has_ieth = false;
};

// A received, checked RoCEv2 packet. Pointers point into the frame, which
// stays owned by the engine while the stages look at it.
struct RxPacket {
  const OpcodeInfo* info = nullptr;
  BthFields bth;
  RethFields reth;
  AethFields aeth;
  AtomicEthFields atomic_eth;
  AtomicAckEthFields atomic_ack_eth;
  DethFields deth;
  uint32_t immediate_be = 0;
  uint32_t ieth_rkey = 0;
  const uint8_t* ip_header = nullptr;  // for the UD GRH
  bool ipv6 = false;
  Gid src_gid{};
  MacAddress src_mac{};
  const uint8_t* payload = nullptr;
  uint32_t payload_length = 0;
};

}  // namespace uroce::transport
