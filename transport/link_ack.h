// An RC acknowledgement between two processes of one host joined by a
// local link, as a word in the link's shared file instead of an ACK packet.
//
// Why: an ACK packet is built, copied into the link's ring and out, parsed
// and handled, and on the responder it is built before the poll that
// executed the request returns, so before the application sees what came.
// A word is one store: the requester reads it while it waits.
//
// The word (64 bits, in the responder's acknowledgement area at the index
// of the requester's QPN, host/shm_channel.h):
//   bits 0-23   the PSN acknowledged: every request up to it was executed
//               (an AETH ACK's BTH PSN, IBTA 9.7.5.1.1)
//   bit  24     the responder holds packets after a gap (an ACK's
//               kBthSelectiveRetransmission)
//   bit  25     valid (an entry never written is 0)
//   bits 32-47  the requester's QPN, low 16 bits
//   bits 48-63  the responder's QPN, low 16 bits
// The two processes' slots are the link's own, so the low bits name the two
// QPs. Only plain ACKs go this way: NAKs, RNR NAKs and duplicates' ACKs
// stay packets (a requester takes a word only when it changed, and it sends
// a duplicate when it did not see one).
//
// Order: a word must not overtake a READ or atomic response sent before it
// (it says "executed through", and would declare the response lost). The
// responder stores one only while its transmit stage is empty (what it sent
// before is in the link's ring), and the requester reads each word before
// the ring, with the ring's producer index then, and takes the word once it
// has received up to that index.
//
// Trust: the word is the other process's; the requester takes it as it
// takes an AETH (a PSN in its window, else ignored), and only a word whose
// two QPNs are its own QP's pair.
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <cstdint>

#include "transport/wire_types.h"

namespace uroce::transport {

inline constexpr uint64_t kLinkAckSelective = uint64_t{1} << 24;
inline constexpr uint64_t kLinkAckValid = uint64_t{1} << 25;

inline uint64_t LinkAckWord(uint32_t requester_qpn, uint32_t responder_qpn, Psn psn, bool selective) {
  return uint64_t{psn.value()} | (selective ? kLinkAckSelective : 0) | kLinkAckValid |
         uint64_t{requester_qpn & 0xFFFF} << 32 | uint64_t{responder_qpn & 0xFFFF} << 48;
}

// The pair of QPs a word is for (its bits 32-63), to compare with another
// word's or a pair's.
inline uint32_t LinkAckPair(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
inline uint32_t LinkAckPair(uint32_t requester_qpn, uint32_t responder_qpn) {
  return (requester_qpn & 0xFFFF) | (responder_qpn & 0xFFFF) << 16;
}
inline bool LinkAckValid(uint64_t word) { return (word & kLinkAckValid) != 0; }
inline Psn LinkAckPsn(uint64_t word) { return Psn(static_cast<uint32_t>(word)); }
inline bool LinkAckSelective(uint64_t word) { return (word & kLinkAckSelective) != 0; }

}  // namespace uroce::transport
