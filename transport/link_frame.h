// The form a RoCEv2 packet takes between two processes of one host joined
// by a local link (host/local_links.h): the transport headers and payload
// as on the wire, behind a 40-byte link header instead of Ethernet, IP and
// UDP, and no ICRC.
//
// Why: between two processes both sides are uroce and nothing crosses a
// wire. Ethernet, IP and UDP carry nothing the receiver needs beyond the
// two addresses (both the host's) and the IP traffic class, and the ICRC
// guards against corruption on a medium, which shared memory is not; the
// other process could compute a right one for any lie anyway. So a frame
// over a link is 2 cache lines shorter to check: no ICRC to compute on
// either side, no Ethernet/IP/UDP to build or parse. Every check the
// receiver makes of the transport (QPN lease, PSN, keys, bounds) stays.
//
// Only connected services (RC, UC, XRC) go in this form: a UD packet's
// receive completion carries its IP header as the GRH (IBTA 11.4.1.2), so
// UD keeps the wire form. Frames to anywhere else, the daemon's switch
// included, keep the wire form; nothing captures a link.
//
// Link header (all multi-byte fields big-endian):
//   byte 0      IP version the wire form would have: 4 or 6
//   byte 1      IP traffic class (IPv4 TOS): DSCP and ECN
//   byte 2      IP hop limit (IPv4 TTL)
//   byte 3      0
//   bytes 4-5   the UDP source port (the QP's entropy, IBTA A17.3.3)
//   bytes 6-7   0
//   bytes 8-23  source GID (::ffff:a.b.c.d for IPv4)
//   bytes 24-39 destination GID
// then the BTH and what follows it, pad included, up to where the ICRC
// would be.
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::transport {

inline constexpr size_t kLinkHeaderBytes = 40;
inline constexpr size_t kLinkSrcGidOffset = 8;
inline constexpr size_t kLinkDstGidOffset = 24;

// Writes the link form of the wire frame [wire, wire + length) at `out`
// (room for `capacity` bytes); returns its length, or 0 when the frame
// is not of a shape that has one (not RoCEv2 over untagged IPv4 without
// options or IPv6 without extension headers, a UD opcode, lengths that do
// not agree) or does not fit. Checks only what it needs to convert: the
// receiver checks the rest. Reads only within the frame.
size_t WriteLinkFrame(const uint8_t* wire, size_t length, uint8_t* out, size_t capacity);

// Computes the ICRC of the wire frame [wire, wire + length) and writes it
// into its last four bytes of the IP packet (IBTA A17.3.3): for a frame
// built without one (kIcrcLeftOut) that leaves in wire form after all.
// False, frame untouched, when it is not of a shape WriteLinkFrame takes
// (UD aside).
bool WriteIcrc(uint8_t* wire, size_t length);

// A frame the engine built without its ICRC, because it goes to another
// process over a local link in link form (PeerMemory::LinkFrameTo): its
// mbuf's hash.usr, set by the transmitter (0 on every other frame it
// builds). A port that sends such a frame in wire form after all (the link
// closed meanwhile) writes the ICRC first (WriteIcrc). The value is never
// a received frame's tag (host/local_links.h), and writing a right ICRC
// again changes nothing.
inline constexpr uint32_t kIcrcLeftOut = 0xFFFFFFFF;

// The 24-bit destination QPN of a link frame, whose `length` bytes are at
// `frame`; false when it is too short to hold a link header and a BTH.
bool LinkFrameDestQp(const uint8_t* frame, size_t length, uint32_t* dest_qpn);

}  // namespace uroce::transport
