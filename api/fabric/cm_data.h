// Connection data with its own length (fi_cm(3) "fi_connect / fi_accept /
// fi_reject ... param, paramlen"; fi_eq(3) "the data will be available ...
// and the size of the event returned by fi_eq_read will be the size of the
// fi_eq_cm_entry plus the connection data"): the application's bytes must
// reach the peer's FI_CONNREQ, FI_CONNECTED or FI_REJECT error entry exactly,
// not padded. IB CM private data has a fixed size per message (REQ 92 B, of
// which the IP CM header takes 36; REP 196 B; REJ 148 B, IBTA 12.6), so the
// length travels in it: one byte of length, then the data. libfabric's own
// verbs provider frames its CM data the same way (struct vrb_cm_data_hdr: a
// uint8_t size and the data), so the two read each other's data.
//
// A peer that sends no header (zeros: a REJ the connection manager sent by
// itself, "no resources", "invalid service ID") reads as no data.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cm/connection_manager.h"

namespace uroce::fabric {

inline constexpr size_t kCmDataHeaderSize = 1;
// What each call may carry once the header is in (FI_OPT_CM_DATA_SIZE
// reports the smallest, fi_connect's: fi_endpoint(3) "FI_OPT_CM_DATA_SIZE -
// ... the maximum size of connection data that may be passed").
inline constexpr size_t kCmConnectDataSize = cm::kCmReqUserDataSize - kCmDataHeaderSize;     // 55
inline constexpr size_t kCmAcceptDataSize = cm::kCmRepPrivateDataSize - kCmDataHeaderSize;   // 195
inline constexpr size_t kCmRejectDataSize = cm::kCmRejPrivateDataSize - kCmDataHeaderSize;   // 147
static_assert(cm::kCmRepPrivateDataSize - kCmDataHeaderSize <= 255, "the length must fit its byte");

// The private data to send for `len` bytes at `data` (len <= the call's
// limit above, checked by the caller).
inline std::vector<uint8_t> PackCmData(const void* data, size_t len) {
  std::vector<uint8_t> out(kCmDataHeaderSize + len);
  out[0] = static_cast<uint8_t>(len);
  if (len != 0) std::memcpy(out.data() + kCmDataHeaderSize, data, len);
  return out;
}

// The application's bytes in received private data: as many as the header
// says, never more than arrived (a peer's header is not trusted).
inline std::vector<uint8_t> UnpackCmData(const std::vector<uint8_t>& wire) {
  if (wire.size() < kCmDataHeaderSize) return {};
  const size_t len = std::min<size_t>(wire[0], wire.size() - kCmDataHeaderSize);
  return std::vector<uint8_t>(wire.begin() + kCmDataHeaderSize, wire.begin() + kCmDataHeaderSize + len);
}

}  // namespace uroce::fabric
