#include "pmd/daemon_protocol.h"

#include <algorithm>
#include <cctype>

#include "pmd/config.h"

namespace uroce::pmd {
namespace {

constexpr size_t kMaxProgramName = 64;
constexpr std::string_view kAttach = "ATTACH";
constexpr std::string_view kOk = "OK";
constexpr std::string_view kError = "ERROR";

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
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
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

std::string FormatAttachReply(const AttachGrant& grant) {
  std::string gids, neighbors;
  for (const transport::Gid& gid : grant.gids) {
    if (!gids.empty()) {
      gids += ',';
      neighbors += ',';
    }
    gids += GidToString(gid);
    // Loopback is the daemon's (other processes' QPs share these addresses):
    // our own addresses are reached through the switch, at the uplink's MAC.
    neighbors += GidToString(gid) + "=" + MacToString(grant.mac);
  }
  std::string text = std::string(kOk) + " slot=" + std::to_string(grant.slot) + "\n";
  text += "; handed out by uroce daemon: slot " + std::to_string(grant.slot) + "\n";
  text += "[eal]\nhugepages = no\nlog_level = *:error\ntelemetry = no\n";
  text += "[engine]\nprogress = inline\n";
  text += "[endpoint." + grant.endpoint_name + "]\n";
  text += "port = net_memif0,role=client,id=0,socket=" + grant.memif_socket + ",secret=" + grant.memif_secret + "\n";
  text += "gids = " + gids + "\n";
  text += "mac = " + MacToString(grant.mac) + "\n";
  text += "mtu = " + std::to_string(grant.mtu) + "\n";
  text += "loopback = no\n";
  text += "qpn_range = " + std::to_string(grant.slot << 16) + "+65536\n";
  text += "neighbors = " + neighbors + "\n";
  text += "link_timeout_ms = 10000\n";
  return text;
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

}  // namespace uroce::pmd
