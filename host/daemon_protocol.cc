#include "host/daemon_protocol.h"

#include <algorithm>
#include <cctype>

#include "host/host_config.h"
#include "transport/address_text.h"

namespace uroce::host {

using transport::GidToString;
using transport::MacToString;
using transport::ParseIpAddress;
using transport::ParseMacAddress;

namespace {

constexpr size_t kMaxProgramName = 64;
constexpr std::string_view kAttach = "ATTACH";
constexpr std::string_view kOk = "OK";
constexpr std::string_view kError = "ERROR";
constexpr std::string_view kPeer = "PEER";
constexpr std::string_view kUnpeer = "UNPEER";
constexpr std::string_view kPeerGone = "PEER_GONE";
constexpr std::string_view kLink = "LINK";
constexpr std::string_view kUnlink = "UNLINK";
// An IPv6 address in text is at most 45 characters (INET6_ADDRSTRLEN - 1).
constexpr size_t kMaxAddressText = 45;
// PEER qpn=16777215 dest=<45> dest_qpn=16777215, with room to spare.
constexpr size_t kMaxPeerMessage = 128;

bool SafeNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

bool ParseDecimal(std::string_view text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (digit > max || v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

// "KEY=VALUE" with this key: the value; false otherwise.
bool TakeValue(std::string_view word, std::string_view key, std::string_view* value) {
  if (word.size() <= key.size() || word.substr(0, key.size()) != key || word[key.size()] != '=') return false;
  *value = word.substr(key.size() + 1);
  return true;
}

// A QPN a connected QP may have: 24 bits, not QP0 or QP1 (IBTA 3.5.2).
bool ParseConnectedQpn(std::string_view text, uint32_t* qpn) {
  uint64_t v = 0;
  if (!ParseDecimal(text, kMaxQpn, &v) || v < 2) return false;
  *qpn = static_cast<uint32_t>(v);
  return true;
}

bool HasControlCharacters(std::string_view message) {
  return std::any_of(message.begin(), message.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace

std::string TameProgramName(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, kMaxProgramName)) out.push_back(SafeNameChar(c) ? c : '_');
  return out;
}

std::string FormatAttachRequest(const AttachRequest& request) {
  return std::string(kAttach) + " pid=" + std::to_string(request.pid) + " program=" + TameProgramName(request.program);
}

StatusOr<AttachRequest> ParseAttachRequest(std::string_view message) {
  if (message.size() > kMaxControlMessage) return InvalidArgument("message too long");
  if (message.find_first_of(std::string_view("\0\n\r\t", 4)) != std::string_view::npos) {
    return InvalidArgument("control characters in the message");
  }
  const std::vector<std::string_view> words = Words(message);
  if (words.empty() || words[0] != kAttach) return InvalidArgument("expected ATTACH pid=PID program=NAME");
  AttachRequest request;
  bool have_pid = false, have_program = false;
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string_view::npos) return InvalidArgument("expected KEY=VALUE");
    const std::string_view key = words[i].substr(0, eq), value = words[i].substr(eq + 1);
    if (key == "pid" && !have_pid) {
      uint64_t pid = 0;
      if (!ParseDecimal(value, INT32_MAX, &pid) || pid == 0) return InvalidArgument("pid: not a process id");
      request.pid = static_cast<int64_t>(pid);
      have_pid = true;
    } else if (key == "program" && !have_program) {
      if (value.empty() || value.size() > kMaxProgramName ||
          !std::all_of(value.begin(), value.end(), SafeNameChar)) {
        return InvalidArgument("program: 1 to 64 letters, digits or ._-");
      }
      request.program = std::string(value);
      have_program = true;
    } else {
      return InvalidArgument("unknown or repeated key");
    }
  }
  if (!have_pid || !have_program) return InvalidArgument("ATTACH needs pid= and program=");
  return request;
}

std::string FormatPortClaim(const PortClaim& claim) {
  return std::string(claim.listen ? "LISTEN " : "UNLISTEN ") + std::to_string(claim.port);
}

StatusOr<PortClaim> ParsePortClaim(std::string_view message) {
  const std::vector<std::string_view> words = Words(message);
  uint64_t port = 0;
  if (message.size() > 64 || words.size() != 2 || (words[0] != "LISTEN" && words[0] != "UNLISTEN") ||
      !ParseDecimal(words[1], 65535, &port) || port == 0) {
    return InvalidArgument("expected LISTEN PORT or UNLISTEN PORT (1..65535)");
  }
  return PortClaim{static_cast<uint16_t>(port), words[0] == "LISTEN"};
}

std::string FormatPeer(const PeerRecord& record) {
  return std::string(kPeer) + " qpn=" + std::to_string(record.qpn) + " dest=" + GidToString(record.dest) +
         " dest_qpn=" + std::to_string(record.dest_qpn);
}

StatusOr<PeerRecord> ParsePeer(std::string_view message) {
  if (message.size() > kMaxPeerMessage || HasControlCharacters(message)) {
    return InvalidArgument("PEER: too long, or control characters");
  }
  const std::vector<std::string_view> words = Words(message);
  std::string_view qpn, dest, dest_qpn;
  if (words.size() != 4 || words[0] != kPeer || !TakeValue(words[1], "qpn", &qpn) ||
      !TakeValue(words[2], "dest", &dest) || !TakeValue(words[3], "dest_qpn", &dest_qpn)) {
    return InvalidArgument("expected PEER qpn=QPN dest=IP dest_qpn=QPN");
  }
  PeerRecord record;
  if (!ParseConnectedQpn(qpn, &record.qpn) || !ParseConnectedQpn(dest_qpn, &record.dest_qpn)) {
    return InvalidArgument("PEER: a QPN is 2..16777215");
  }
  const bool address_chars = std::all_of(dest.begin(), dest.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  });
  if (dest.empty() || dest.size() > kMaxAddressText || !address_chars ||
      !ParseIpAddress(std::string(dest), &record.dest)) {
    return InvalidArgument("PEER: dest is not an IPv4 or IPv6 address");
  }
  return record;
}

std::string FormatUnpeer(uint32_t qpn) { return std::string(kUnpeer) + " qpn=" + std::to_string(qpn); }

StatusOr<uint32_t> ParseUnpeer(std::string_view message) {
  const std::vector<std::string_view> words = Words(message);
  std::string_view value;
  uint32_t qpn = 0;
  if (message.size() > 64 || HasControlCharacters(message) || words.size() != 2 || words[0] != kUnpeer ||
      !TakeValue(words[1], "qpn", &value) || !ParseConnectedQpn(value, &qpn)) {
    return InvalidArgument("expected UNPEER qpn=QPN (2..16777215)");
  }
  return qpn;
}

std::vector<std::string> FormatPeersGone(const std::vector<PeerGone>& gone) {
  std::vector<std::string> out;
  for (size_t i = 0; i < gone.size(); ++i) {
    if (i % kMaxPeersGonePerMessage == 0) out.emplace_back(kPeerGone);
    out.back() += " " + std::to_string(gone[i].qpn) + ":" + std::to_string(gone[i].dest_qpn);
  }
  return out;
}

StatusOr<std::vector<PeerGone>> ParsePeersGone(std::string_view message) {
  if (message.size() > kMaxControlMessage || HasControlCharacters(message)) {
    return InvalidArgument("PEER_GONE: too long, or control characters");
  }
  // Exactly as IsNotification sees it: a reader tells the two apart by it.
  const std::vector<std::string_view> words = Words(message);
  if (!IsNotification(message) || words.size() < 2 || words.size() > kMaxPeersGonePerMessage + 1) {
    return InvalidArgument("expected PEER_GONE QPN:QPN ... (1 to 512)");
  }
  std::vector<PeerGone> gone;
  gone.reserve(words.size() - 1);
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t colon = words[i].find(':');
    PeerGone g;
    if (colon == std::string_view::npos || !ParseConnectedQpn(words[i].substr(0, colon), &g.qpn) ||
        !ParseConnectedQpn(words[i].substr(colon + 1), &g.dest_qpn)) {
      return InvalidArgument("PEER_GONE: expected QPN:QPN (2..16777215)");
    }
    gone.push_back(g);
  }
  return gone;
}

std::string FormatLinkChange(const LinkChange& change) {
  std::string text = std::string(change.add ? kLink : kUnlink) + " " + std::to_string(change.uplink) + " " +
                     std::to_string(change.slot);
  if (change.add && change.pid > 0) text += " pid=" + std::to_string(change.pid) + " uid=" + std::to_string(change.uid);
  return text;
}

StatusOr<LinkChange> ParseLinkChange(std::string_view message) {
  const std::vector<std::string_view> words = Words(message);
  LinkChange change;
  uint64_t uplink = 0, slot = 0, pid = 0, uid = 0;
  // Strictly "LINK U S[ pid=P uid=N]" or "UNLINK U S": single spaces,
  // nothing else (a peer's message is never half-understood).
  const bool with_peer = words.size() == 5;
  std::string expected;
  for (const std::string_view w : words) expected += (expected.empty() ? "" : " ") + std::string(w);
  if (message.size() > 64 || (words.size() != 3 && !with_peer) || (words[0] != kLink && words[0] != kUnlink) ||
      message != expected || !ParseDecimal(words[1], kMaxUplinks - 1, &uplink) ||
      !ParseDecimal(words[2], kDaemonMaxProcesses, &slot) || slot == 0 ||
      (with_peer && (words[0] != kLink || words[3].substr(0, 4) != "pid=" || words[4].substr(0, 4) != "uid=" ||
                     !ParseDecimal(words[3].substr(4), INT32_MAX, &pid) || pid == 0 ||
                     !ParseDecimal(words[4].substr(4), UINT32_MAX, &uid)))) {
    return InvalidArgument("expected LINK UPLINK SLOT[ pid=PID uid=UID] or UNLINK UPLINK SLOT (uplink 0.." +
                           std::to_string(kMaxUplinks - 1) + ", slot 1.." + std::to_string(kDaemonMaxProcesses) + ")");
  }
  change.uplink = static_cast<uint32_t>(uplink);
  change.slot = static_cast<uint32_t>(slot);
  change.add = words[0] == kLink;
  change.pid = static_cast<int64_t>(pid);
  change.uid = static_cast<uint32_t>(uid);
  // Numbers as the daemon writes them (no leading zeros): one text per change.
  if (FormatLinkChange(change) != message) return InvalidArgument("LINK/UNLINK: not in its canonical form");
  return change;
}

namespace {
bool StartsWithWord(std::string_view message, std::string_view word) {
  return message.size() > word.size() && message.substr(0, word.size()) == word && message[word.size()] == ' ';
}
}  // namespace

bool IsLinkChange(std::string_view message) {
  return StartsWithWord(message, kLink) || StartsWithWord(message, kUnlink);
}

bool IsNotification(std::string_view message) { return StartsWithWord(message, kPeerGone) || IsLinkChange(message); }

std::string FormatGrantConfig(const AttachGrant& grant) {
  std::string text = "; handed out by uroce daemon: slot " + std::to_string(grant.slot) + "\n";
  text += "[eal]\nhugepages = no\nlog_level = *:error\ntelemetry = no\n";
  text += "[engine]\nprogress = inline\n";
  for (size_t k = 0; k < grant.endpoints.size(); ++k) {
    const GrantEndpoint& e = grant.endpoints[k];
    std::string gids, neighbors;
    for (const transport::Gid& gid : e.gids) {
      if (!gids.empty()) gids += ',';
      gids += GidToString(gid);
    }
    // Loopback is the daemon's (other processes' QPs share these
    // addresses): the host's addresses, this uplink's and every other's,
    // are reached through this uplink's switch (it hands frames to another
    // uplink's address to that uplink's switch), at this uplink's MAC.
    for (const GrantEndpoint& any : grant.endpoints) {
      for (const transport::Gid& gid : any.gids) {
        if (!neighbors.empty()) neighbors += ',';
        neighbors += GidToString(gid) + "=" + MacToString(e.mac);
      }
    }
    text += "[endpoint." + e.name + "]\n";
    // The port is the K-th file that comes with this reply (shm_fd, set by
    // the process from the ancillary data): the text names only K.
    text += "port = shm:daemon:" + std::to_string(k) + "\n";
    text += "gids = " + gids + "\n";
    text += "mac = " + MacToString(e.mac) + "\n";
    text += "mtu = " + std::to_string(e.mtu) + "\n";
    text += "loopback = no\n";
    text += "qpn_range = " + std::to_string(grant.slot << 16) + "+65536\n";
    text += "neighbors = " + neighbors + "\n";
    text += "link_timeout_ms = 10000\n";
  }
  return text;
}

std::string FormatAttachReply(const AttachGrant& grant) {
  return std::string(kOk) + " slot=" + std::to_string(grant.slot) + "\n" + FormatGrantConfig(grant);
}

namespace {

// Text from the other side, fit to quote in a message: printable ASCII, at
// most 80 bytes.
std::string Quotable(std::string_view text) {
  std::string out(text.substr(0, 80));
  for (char& c : out) {
    if (c < ' ' || c > '~') c = '?';
  }
  return out;
}

bool ValidEndpointName(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// "KEY = VALUE" with this key: the value.
bool TakeSetting(std::string_view line, std::string_view key, std::string* value) {
  if (line.size() < key.size() + 3 || line.substr(0, key.size()) != key || line.substr(key.size(), 3) != " = ") {
    return false;
  }
  *value = std::string(line.substr(key.size() + 3));
  return true;
}

}  // namespace

StatusOr<AttachGrant> ParseAttachGrant(std::string_view config_text, uint32_t slot) {
  if (config_text.size() > kMaxControlMessage) return InvalidArgument("the configuration is too long");
  if (slot == 0 || slot > kDaemonMaxProcesses) {
    return InvalidArgument("slot " + std::to_string(slot) + " is not a slot");
  }
  // Read what varies (each uplink's name, addresses, MAC and MTU), then
  // write the grant back and demand the very same text: every other line,
  // key and value is then the daemon's fixed one.
  AttachGrant grant;
  grant.slot = slot;
  size_t start = 0;
  while (start < config_text.size()) {
    const size_t end = std::min(config_text.find('\n', start), config_text.size());
    const std::string_view line = config_text.substr(start, end - start);
    start = end + 1;
    std::string value;
    if (line.substr(0, 10) == "[endpoint." && line.size() > 11 && line.back() == ']') {
      if (grant.endpoints.size() == kMaxUplinks) {
        return InvalidArgument("more than " + std::to_string(kMaxUplinks) + " uplinks");
      }
      GrantEndpoint e;
      e.name = std::string(line.substr(10, line.size() - 11));
      if (!ValidEndpointName(e.name)) return InvalidArgument("not an endpoint name: " + std::string(line));
      grant.endpoints.push_back(std::move(e));
    } else if (grant.endpoints.empty()) {
      continue;
    } else if (TakeSetting(line, "gids", &value)) {
      GrantEndpoint& e = grant.endpoints.back();
      if (!e.gids.empty()) return InvalidArgument("a second gids line: " + std::string(line));
      for (size_t from = 0; from <= value.size();) {
        const size_t comma = std::min(value.find(',', from), value.size());
        transport::Gid gid{};
        if (e.gids.size() == kMaxGrantGids || !ParseIpAddress(value.substr(from, comma - from), &gid)) {
          return InvalidArgument("not the uplink's addresses: " + std::string(line));
        }
        e.gids.push_back(gid);
        from = comma + 1;
      }
    } else if (TakeSetting(line, "mac", &value)) {
      if (!ParseMacAddress(value, &grant.endpoints.back().mac) || (grant.endpoints.back().mac[0] & 1) != 0) {
        return InvalidArgument("not a unicast MAC: " + std::string(line));
      }
    } else if (TakeSetting(line, "mtu", &value)) {
      uint64_t mtu = 0;
      if (!ParseDecimal(value, 9216, &mtu) || mtu < 68) return InvalidArgument("not an MTU: " + std::string(line));
      grant.endpoints.back().mtu = static_cast<uint32_t>(mtu);
    }
  }
  if (grant.endpoints.empty()) return InvalidArgument("the configuration grants no uplink");
  for (const GrantEndpoint& e : grant.endpoints) {
    if (e.gids.empty()) return InvalidArgument("[endpoint." + e.name + "] has no addresses");
  }
  const std::string expected = FormatGrantConfig(grant);
  if (expected != config_text) {
    size_t a = 0, line_number = 1;
    while (a < expected.size() && a < config_text.size() && expected[a] == config_text[a]) {
      if (expected[a] == '\n') ++line_number;
      ++a;
    }
    const size_t from = config_text.rfind('\n', a == 0 ? 0 : a - 1);
    const size_t begin = from == std::string_view::npos || a == 0 ? 0 : from + 1;
    const std::string_view bad = config_text.substr(begin, config_text.find('\n', begin) - begin);
    return InvalidArgument("line " + std::to_string(line_number) + " is not what uroce daemon writes: '" +
                           Quotable(bad) + "'");
  }
  return grant;
}

bool ValidInterfaceName(std::string_view name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f && c != '/' && c != ':'; });
}

StatusOr<std::vector<DeviceLine>> ParseDevicesReply(std::string_view text) {
  if (text.size() > kMaxControlMessage) return InvalidArgument("the DEVICES answer is too long");
  std::vector<DeviceLine> devices;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const std::vector<std::string_view> words = Words(line);
    std::string_view netdev, gids;
    DeviceLine d;
    d.index = static_cast<unsigned>(devices.size());
    if (words.size() != 4 || words[0] != "device" || words[1] != "uroce" + std::to_string(d.index) ||
        !TakeValue(words[2], "netdev", &netdev) || !TakeValue(words[3], "gids", &gids)) {
      return InvalidArgument("the DEVICES answer has a line that is not the next device: '" + Quotable(line) + "'");
    }
    if (devices.size() == kMaxUplinks) {
      return InvalidArgument("the DEVICES answer has more than " + std::to_string(kMaxUplinks) + " devices");
    }
    if (netdev != "-") {
      if (!ValidInterfaceName(netdev)) {
        return InvalidArgument("the DEVICES answer names no interface: netdev='" + Quotable(netdev) + "'");
      }
      d.netdev = std::string(netdev);
    }
    for (size_t from = 0; from <= gids.size();) {
      const size_t comma = std::min(gids.find(',', from), gids.size());
      const std::string_view hex = gids.substr(from, comma - from);
      if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos ||
          d.gids.size() == kMaxGrantGids) {
        return InvalidArgument("the DEVICES answer has a GID that is not 32 hex digits: '" + Quotable(hex) + "'");
      }
      transport::Gid gid{};
      for (size_t b = 0; b < 16; ++b) {
        auto nibble = [](char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); };
        gid[b] = static_cast<uint8_t>(nibble(hex[2 * b]) << 4 | nibble(hex[2 * b + 1]));
      }
      d.gids.push_back(gid);
      from = comma + 1;
    }
    devices.push_back(std::move(d));
  }
  return devices;
}

StatusOr<AttachReply> ParseAttachReply(std::string_view message) {
  if (message.size() > kMaxControlMessage) return InvalidArgument("reply too long");
  const size_t nl = message.find('\n');
  const std::string_view first = message.substr(0, nl);
  if (first.substr(0, kError.size()) == kError) {
    return FailedPrecondition(std::string(first.substr(std::min(first.size(), kError.size() + 1))));
  }
  const std::vector<std::string_view> words = Words(first);
  uint64_t slot = 0;
  if (nl == std::string_view::npos || words.size() != 2 || words[0] != kOk || words[1].substr(0, 5) != "slot=" ||
      !ParseDecimal(words[1].substr(5), kDaemonMaxProcesses, &slot) || slot == 0) {
    return InvalidArgument("not a reply of uroce daemon");
  }
  AttachReply reply;
  reply.slot = static_cast<uint32_t>(slot);
  reply.config_text = std::string(message.substr(nl + 1));
  return reply;
}

}  // namespace uroce::host
