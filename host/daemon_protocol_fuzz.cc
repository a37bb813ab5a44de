// libFuzzer target for the daemon's control messages (host/daemon_protocol.h),
// which come from local processes the daemon does not trust and from a
// daemon a process reaches by path: any bytes, to every parser. What a
// parser accepts must survive formatting and parsing again unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/daemon_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::host;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto request = ParseAttachRequest(text); request.ok()) {
    auto again = ParseAttachRequest(FormatAttachRequest(*request));
    if (!again.ok() || again->pid != request->pid || again->program != request->program) abort();
  }
  if (auto claim = ParsePortClaim(text); claim.ok()) {
    auto again = ParsePortClaim(FormatPortClaim(*claim));
    if (!again.ok() || again->port != claim->port || again->listen != claim->listen) abort();
  }
  if (auto peer = ParsePeer(text); peer.ok()) {
    auto again = ParsePeer(FormatPeer(*peer));
    if (!again.ok() || again->qpn != peer->qpn || again->dest != peer->dest || again->dest_qpn != peer->dest_qpn ||
        peer->qpn > kMaxQpn || peer->dest_qpn > kMaxQpn) {
      abort();
    }
  }
  if (auto qpn = ParseUnpeer(text); qpn.ok()) {
    auto again = ParseUnpeer(FormatUnpeer(*qpn));
    if (!again.ok() || *again != *qpn) abort();
  }
  if (auto gone = ParsePeersGone(text); gone.ok()) {
    // A notification is never taken for a reply, and the other way round.
    if (!IsNotification(text) || gone->empty() || gone->size() > kMaxPeersGonePerMessage) abort();
    const auto messages = FormatPeersGone(*gone);
    if (messages.size() != 1 || messages[0].size() > kMaxControlMessage) abort();
    auto again = ParsePeersGone(messages[0]);
    if (!again.ok() || *again != *gone) abort();
  }
  if (auto change = ParseLinkChange(text); change.ok()) {
    if (!IsNotification(text) || !IsLinkChange(text) || FormatLinkChange(*change) != text) abort();
  }
  if (IsNotification(text) && (ParseAttachReply(text).ok() || ParsePortClaim(text).ok())) abort();
  return 0;
}
