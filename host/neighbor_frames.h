// ARP (RFC 826) and IPv6 neighbour discovery (RFC 4861) frames: the wire
// layouts, a parser that recognises the four messages uroce cares about, and
// builders for them. Pure functions over byte buffers: no mbufs, no state, so
// they are tested on their own. NeighborResolver (neighbor_resolver.h) speaks
// the protocols with them.
//
// Thread-safety: plain functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/headers.h"
#include "transport/wire_types.h"

namespace uroce::host {

constexpr uint16_t kEtherTypeArp = 0x0806;
constexpr uint8_t kIpProtocolIcmpv6 = 58;

// RFC 826 for Ethernet (hardware type 1) and IPv4 (protocol type 0x0800).
struct ArpPacket {
  transport::Be16 hardware_type;
  transport::Be16 protocol_type;
  uint8_t hardware_length;  // 6
  uint8_t protocol_length;  // 4
  transport::Be16 opcode;   // 1 request, 2 reply
  uint8_t sender_mac[6];
  uint8_t sender_ip[4];
  uint8_t target_mac[6];
  uint8_t target_ip[4];
};
static_assert(sizeof(ArpPacket) == 28 && alignof(ArpPacket) == 1);

// RFC 4861 4.3 and 4.4: the fixed part of a neighbour solicitation or
// advertisement (ICMPv6 type 135 or 136).
struct NdMessage {
  uint8_t type;
  uint8_t code;  // 0
  transport::Be16 checksum;
  transport::Be32 flags;  // NA: R 0x80000000, S 0x40000000, O 0x20000000; NS: reserved
  uint8_t target[16];
};
static_assert(sizeof(NdMessage) == 24 && alignof(NdMessage) == 1);

// RFC 4861 4.6.1: source (1) or target (2) link-layer address option.
struct NdLinkLayerOption {
  uint8_t type;
  uint8_t length;  // in units of 8 bytes: 1 for Ethernet
  uint8_t mac[6];
};
static_assert(sizeof(NdLinkLayerOption) == 8);

constexpr uint8_t kIcmpv6NeighborSolicitation = 135;
constexpr uint8_t kIcmpv6NeighborAdvertisement = 136;
constexpr uint8_t kNdOptionSourceLinkLayer = 1;
constexpr uint8_t kNdOptionTargetLinkLayer = 2;
constexpr uint32_t kNaFlagSolicited = 0x40000000;
constexpr uint32_t kNaFlagOverride = 0x20000000;
// RFC 4861 7.1: ND messages travel with hop limit 255, so a receiver knows
// they were not forwarded by a router.
constexpr uint8_t kNdHopLimit = 255;

// Ethernet's shortest frame without the FCS (IEEE 802.3): shorter frames are
// padded with zeros.
constexpr size_t kMinEthernetFrame = 60;
// The longest frame the builders write.
constexpr size_t kMaxNeighborFrame = 14 + 40 + sizeof(NdMessage) + sizeof(NdLinkLayerOption);

enum class NeighborMessageKind {
  kNone,  // not one of the four, or malformed
  kArpRequest,
  kArpReply,
  kNeighborSolicitation,
  kNeighborAdvertisement,
};

struct NeighborMessage {
  NeighborMessageKind kind = NeighborMessageKind::kNone;
  // Who speaks and its MAC: ARP sender address pair; NS: IPv6 source and its
  // source link-layer option (if any); NA: the target and its target
  // link-layer option (if any).
  transport::Gid sender_ip{};
  transport::MacAddress sender_mac{};
  bool has_sender_mac = false;
  // ARP: the target protocol address; NS/NA: the target address.
  transport::Gid target_ip{};
  // NA: the Solicited flag (RFC 4861 4.4): set only in an answer to a
  // solicitation. False for the other kinds.
  bool solicited = false;
  transport::MacAddress eth_src{};
};

// Recognises an untagged Ethernet frame as one of the four messages, after
// the checks RFC 826 and RFC 4861 7.1.1/7.1.2 ask for (lengths, hop limit
// 255, ICMPv6 checksum, code 0, no multicast target); anything else is kNone.
NeighborMessage ParseNeighborMessage(const uint8_t* frame, size_t length);

// The builders write a whole frame into `out` (kMaxNeighborFrame bytes or
// more), padded to kMinEthernetFrame, and return its length. IPv4 addresses
// are IPv4-mapped GIDs.
size_t BuildArpRequest(uint8_t* out, const transport::MacAddress& my_mac, const transport::Gid& my_ip,
                       const transport::Gid& target_ip);
size_t BuildArpReply(uint8_t* out, const transport::MacAddress& my_mac, const transport::Gid& my_ip,
                     const transport::MacAddress& to_mac, const transport::Gid& to_ip);
// To the target's solicited-node multicast address (RFC 4291 2.7.1), with our
// source link-layer address (RFC 4861 4.3).
size_t BuildNeighborSolicitation(uint8_t* out, const transport::MacAddress& my_mac, const transport::Gid& my_ip,
                                 const transport::Gid& target_ip);
// Solicited, override, with our target link-layer address (RFC 4861 7.2.4).
size_t BuildNeighborAdvertisement(uint8_t* out, const transport::MacAddress& my_mac, const transport::Gid& my_ip,
                                  const transport::MacAddress& to_mac, const transport::Gid& to_ip);

// Why BuildNeighborQuestion refused a request.
enum class NeighborRefusal {
  kNone,
  kNotARequest,     // not an ARP request or a neighbour solicitation
  kUnusableSender,  // the sender address is unspecified, loopback or multicast
  kUnusableTarget,  // the target is unspecified, loopback, multicast or broadcast
  kOtherFamily,     // an address of the other family (IPv6 in ARP, IPv4-mapped in ND)
  kGratuitous,      // the target is the sender's own address
};

// A process's ARP request or neighbour solicitation (`asked`) rebuilt as the
// uplink's own question: only the target comes from it. The Ethernet source
// and the ARP sender hardware address (RFC 826) or the source link-layer
// address option (RFC 4861 4.3) are `uplink_mac`, the sender address is
// `sender_ip` (the caller has checked it is one of the uplink's), and the
// destination is the broadcast or the target's solicited-node multicast
// address, as BuildArpRequest and BuildNeighborSolicitation write them. So a
// process can ask, but never tell a neighbour which MAC an address has.
// Refused: targets no neighbour answers for, a question about the sender's
// own address (a gratuitous request announces the address to every
// neighbour, RFC 5227 3), addresses of the other family.
// Returns the frame's length in `out` (kMaxNeighborFrame bytes or more), or
// 0 with `why` set.
size_t BuildNeighborQuestion(uint8_t* out, const NeighborMessage& asked, const transport::MacAddress& uplink_mac,
                             const transport::Gid& sender_ip, NeighborRefusal* why);

// The ICMPv6 checksum (RFC 4443 2.3) over `icmp` (`length` bytes, the
// checksum field included) and the IPv6 pseudo-header (RFC 8200 8.1). A
// received message is intact when this returns 0.
uint16_t Icmpv6Checksum(const uint8_t src[16], const uint8_t dst[16], const uint8_t* icmp, size_t length);

}  // namespace uroce::host
