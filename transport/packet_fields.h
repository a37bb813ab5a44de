// Every field of a RoCEv2 frame, decoded to host order: what the packet
// builder takes and what the packet parser gives back. Building the fields a
// parse returned reproduces the frame byte for byte (the payload aside, which
// the caller supplies), so the two cannot drift apart unnoticed.
//
// Thread-safety: a plain value; any thread.
#pragma once

#include <cstdint>

#include "transport/headers.h"

namespace uroce::transport {

struct PacketFields {
  // Ethernet II, with an optional IEEE 802.1Q tag.
  MacAddress dst_mac{};
  MacAddress src_mac{};
  bool has_vlan = false;
  uint16_t vlan_tci = 0;  // PCP 3 bits, DEI 1, VLAN ID 12

  // IP. A GID is the IPv6 address, or ::ffff:a.b.c.d for IPv4.
  IpVersion ip_version = IpVersion::kIpv4;
  Gid src_gid{};
  Gid dst_gid{};
  uint8_t traffic_class = 0;  // IPv4 TOS or IPv6 traffic class (DSCP + ECN)
  uint8_t hop_limit = 64;     // IPv4 TTL or IPv6 hop limit
  uint16_t ipv4_identification = 0;
  uint16_t ipv4_flags_fragment = kIpv4DontFragment;  // rxe sets DF
  uint32_t ipv6_flow_label = 0;                      // 20 bits

  // UDP. The source port is the caller's (uroce hashes the QPN into it so
  // that RSS keeps a QP on one queue); RoCEv2 senders leave the checksum 0.
  uint16_t udp_src_port = 0;
  uint16_t udp_dst_port = kRoceV2UdpPort;
  uint16_t udp_checksum = 0;

  // Transport headers. Only those the opcode carries are written or read
  // (OpcodeInfo::headers); the others keep whatever they hold.
  BthFields bth;
  RethFields reth;
  AethFields aeth;
  AtomicEthFields atomic_eth;
  AtomicAckEthFields atomic_ack_eth;
  uint32_t immediate_data = 0;  // ImmDt: the four wire bytes read big-endian
  uint32_t invalidate_rkey = 0;  // IETH
  DethFields deth;
  // XRCETH: the receiver's XRC SRQ (24 bits), and the reserved byte before
  // it (sent as 0; kept so that a parsed frame builds again unchanged).
  uint32_t xrc_srqn = 0;
  uint8_t xrceth_reserved = 0;

  // Payload bytes, pad excluded.
  uint32_t payload_length = 0;
};

}  // namespace uroce::transport
