#include "runtime/config.h"

#include <arpa/inet.h>
#include <rte_cfgfile.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "common/private_dir.h"
#include "congestion/algorithms.h"
#include "pmd/threads.h"
#include "transport/address_text.h"

namespace uroce::runtime {
namespace {

using pmd::FindDriverLoadArgument;
using pmd::ParseCpuList;
using pmd::ParseLcoreList;
using transport::Gid;
using transport::MacAddress;
using transport::ParseIpAddress;
using transport::ParseMacAddress;

struct CfgfileCloser {
  void operator()(rte_cfgfile* cfg) const { rte_cfgfile_close(cfg); }
};
using CfgfilePtr = std::unique_ptr<rte_cfgfile, CfgfileCloser>;

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    item = Trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// rte_cfgfile skips a line that is neither "[section]" nor "key = value"
// without a word, and keeps both copies of a repeated key. A typo must not
// pass silently, so the text is checked first, line by line.
Status PreScan(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  std::string section;
  std::set<std::string> sections;
  std::set<std::string> keys;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = origin + ":" + std::to_string(lineno) + ": ";
    // rte_cfgfile reads lines into a buffer of CFG_NAME_LEN + CFG_VALUE_LEN + 4.
    if (line.size() + 1 >= CFG_NAME_LEN + CFG_VALUE_LEN + 3) return InvalidArgument(where + "line too long");
    const size_t comment = line.find(';');
    if (comment != std::string::npos) line.resize(comment);
    line = Trim(line);
    if (line.empty()) continue;
    if (line[0] == '[') {
      if (line.back() != ']') return InvalidArgument(where + "a section header needs a closing ']'");
      section = Trim(line.substr(1, line.size() - 2));
      if (section.empty()) return InvalidArgument(where + "empty section name");
      if (section.size() >= CFG_NAME_LEN) return InvalidArgument(where + "section name too long");
      if (!sections.insert(section).second) return InvalidArgument(where + "section [" + section + "] appears twice");
      keys.clear();
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument(where + "'" + line + "' is neither a [section] nor key = value");
    }
    if (section.empty()) return InvalidArgument(where + "'" + line + "' comes before any [section]");
    const std::string key = Trim(line.substr(0, eq));
    const std::string value = Trim(line.substr(eq + 1));
    if (key.empty()) return InvalidArgument(where + "empty key in [" + section + "]");
    if (key.size() >= CFG_NAME_LEN) return InvalidArgument(where + "key '" + key + "' too long");
    if (value.size() >= CFG_VALUE_LEN) return InvalidArgument(where + "value of '" + key + "' too long");
    if (!keys.insert(key).second) return InvalidArgument(where + "[" + section + "] " + key + " is set twice");
  }
  return Status::Ok();
}

// rte_cfgfile reads files only; the built-in configurations are handed to it
// through an anonymous memory file.
StatusOr<CfgfilePtr> LoadWithCfgfile(const std::string& path_or_empty, const std::string& text,
                                     const std::string& origin) {
  std::string path = path_or_empty;
  int fd = -1;
  if (path.empty()) {
    fd = memfd_create("uroce-config", MFD_CLOEXEC);
    if (fd < 0) return IoError("memfd_create for " + origin + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = write(fd, text.data() + done, text.size() - done);
      if (n <= 0) {
        close(fd);
        return IoError("writing " + origin + " to a memory file failed");
      }
      done += static_cast<size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  rte_cfgfile* cfg = rte_cfgfile_load(path.c_str(), CFG_FLAG_EMPTY_VALUES);
  if (fd >= 0) close(fd);
  if (cfg == nullptr) return InvalidArgument("rte_cfgfile_load could not parse " + origin);
  return CfgfilePtr(cfg);
}

bool ParseUnsigned(const std::string& text, uint64_t min, uint64_t max, uint64_t* out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

// A probability: a decimal number in [0, 1] ("0.01", "1e-4"), nothing else.
bool ParseProbability(const std::string& text, double* out) {
  if (text.empty() || text.find_first_not_of("0123456789.eE-+") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}

bool ParseBool(const std::string& text, bool* out) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "yes" || t == "true" || t == "on" || t == "1") return *out = true, true;
  if (t == "no" || t == "false" || t == "off" || t == "0") return *out = false, true;
  return false;
}

bool LooksLikePciAddress(const std::string& s) {
  // DDDD:BB:DD.F or BB:DD.F (hex digits), as EAL's -a takes it.
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  size_t i = 0;
  auto digits = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (i >= s.size() || !hex(s[i])) return false;
    }
    return true;
  };
  auto lit = [&](char c) { return i < s.size() && s[i++] == c; };
  const bool full = s.size() == 12;
  if (full && !(digits(4) && lit(':'))) return false;
  if (!full && s.size() != 7) return false;
  return digits(2) && lit(':') && digits(2) && lit('.') && digits(1) && i == s.size();
}

class Builder {
 public:
  explicit Builder(UroceConfig* config) : c_(*config) {}

  Status Section(const std::string& section, const std::vector<rte_cfgfile_entry>& entries) {
    if (section == "eal") return Each(section, entries, [this](auto& k, auto& v, auto& e) { return Eal(k, v, e); });
    if (section == "engine") return Each(section, entries, [this](auto& k, auto& v, auto& e) { return Engine(k, v, e); });
    if (section == "daemon") return Each(section, entries, [this](auto& k, auto& v, auto& e) { return Daemon(k, v, e); });
    if (section == "impair") return Each(section, entries, [this](auto& k, auto& v, auto& e) { return Impair(k, v, e); });
    if (section == "congestion") {
      return Each(section, entries, [this](auto& k, auto& v, auto& e) { return Congestion(k, v, e); });
    }
    if (section.rfind("endpoint.", 0) == 0) {
      EndpointConfig ep;
      ep.name = section.substr(std::strlen("endpoint."));
      // Telemetry keys allow letters, digits and '_' only.
      if (ep.name.empty() || !std::all_of(ep.name.begin(), ep.name.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
          })) {
        return InvalidArgument("[" + section + "]: an endpoint name has letters, digits and '_' only");
      }
      std::vector<Gid> extra_gids;
      Gid ipv4{}, ipv6{};
      Status s = Each(section, entries, [&](auto& k, auto& v, auto& e) { return Endpoint(k, v, e, ep, ipv4, ipv6, extra_gids); });
      if (!s.ok()) return s;
      if (ep.port.empty()) return InvalidArgument("[" + section + "] needs a port");
      if (ep.has_ipv4) ep.gids.push_back(ipv4);
      if (ep.has_ipv6) ep.gids.push_back(ipv6);
      ep.gids.insert(ep.gids.end(), extra_gids.begin(), extra_gids.end());
      // A kernel port with no address of its own takes the interface's
      // (the daemon reads them when it opens the port).
      if (ep.gids.empty() && ep.kind != PortKind::kKernel) {
        return InvalidArgument("[" + section + "] needs an address: ipv4, ipv6 or gids");
      }
      c_.endpoints.push_back(std::move(ep));
      return Status::Ok();
    }
    return InvalidArgument("unknown section [" + section + "] (known: [eal], [engine], [daemon], [impair], [congestion], [endpoint.NAME])");
  }

 private:
  using Handler = std::function<Status(const std::string&, const std::string&, const std::string&)>;

  static Status Each(const std::string& section, const std::vector<rte_cfgfile_entry>& entries, const Handler& h) {
    for (const rte_cfgfile_entry& e : entries) {
      const std::string where = "[" + section + "] " + e.name + " = '" + e.value + "'";
      UROCE_RETURN_IF_ERROR(h(e.name, e.value, where));
    }
    return Status::Ok();
  }

  static Status Bad(const std::string& where, const std::string& why) { return InvalidArgument(where + ": " + why); }
  static Status Unknown(const std::string& section, const std::string& key, const char* known) {
    return InvalidArgument("unknown key '" + key + "' in [" + section + "] (known: " + known + ")");
  }

  Status Eal(const std::string& k, const std::string& v, const std::string& where) {
    uint64_t n = 0;
    bool b = false;
    if (k == "lcores") {
      if (ParseLcoreList(v).empty()) return Bad(where, "not an lcore list (e.g. 0-1, 0,2 or 1@(0-1))");
      c_.eal.lcores = v;
    } else if (k == "hugepages") {
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      c_.eal.hugepages = b;
    } else if (k == "memory") {
      if (!ParseUnsigned(v, 16, 1 << 20, &n)) return Bad(where, "expected megabytes, 16 or more");
      c_.eal.memory_mb = static_cast<unsigned>(n);
    } else if (k == "file_prefix") {
      if (v.find_first_of(" /\t") != std::string::npos) return Bad(where, "no blanks or '/' in a file prefix");
      c_.eal.file_prefix = v;
    } else if (k == "log_level") {
      c_.eal.log_level = v;
    } else if (k == "telemetry") {
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      c_.telemetry = b;
    } else if (k == "args") {
      for (const std::string& a : Split(v, ' ')) c_.eal.extra_args.push_back(a);
    } else if (k == "allow_driver_load") {
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      c_.eal.allow_driver_load = b;
    } else {
      return Unknown("eal", k, "lcores, hugepages, memory, file_prefix, log_level, telemetry, args, allow_driver_load");
    }
    return Status::Ok();
  }

  Status Engine(const std::string& k, const std::string& v, const std::string& where) {
    uint64_t n = 0;
    if (k == "progress") {
      if (v == "engine") c_.progress = ProgressMode::kEngine;
      else if (v == "inline") c_.progress = ProgressMode::kInline;
      else return Bad(where, "expected engine or inline");
    } else if (k == "rx_burst") {
      if (!ParseUnsigned(v, 1, 512, &n)) return Bad(where, "expected 1..512");
      c_.engine.rx_burst = static_cast<uint16_t>(n);
    } else if (k == "max_qps") {
      if (!ParseUnsigned(v, 1, 1 << 20, &n)) return Bad(where, "expected 1..1048576");
      c_.engine.max_qps = static_cast<uint32_t>(n);
    } else if (k == "ack_request_every") {
      if (!ParseUnsigned(v, 1, 1 << 16, &n)) return Bad(where, "expected 1..65536");
      c_.engine.ack_request_every = static_cast<uint32_t>(n);
    } else if (k == "max_unacked_packets") {
      if (!ParseUnsigned(v, 1, 1 << 22, &n)) return Bad(where, "expected 1..4194304");
      c_.engine.max_unacked_packets = static_cast<uint32_t>(n);
    } else if (k == "per_qp_packet_budget") {
      if (!ParseUnsigned(v, 1, 1 << 16, &n)) return Bad(where, "expected 1..65536");
      c_.engine.per_qp_packet_budget = static_cast<uint32_t>(n);
    } else if (k == "rto_min_us") {
      if (!ParseUnsigned(v, 1, 10000000, &n)) return Bad(where, "expected 1..10000000");
      c_.engine.rto_min_us = static_cast<uint32_t>(n);
    } else if (k == "rto_initial_us") {
      if (!ParseUnsigned(v, 1, 10000000, &n)) return Bad(where, "expected 1..10000000");
      c_.engine.rto_initial_us = static_cast<uint32_t>(n);
    } else if (k == "tail_probe_us") {
      if (!ParseUnsigned(v, 0, 10000000, &n)) return Bad(where, "expected 0..10000000 (0: no probes)");
      c_.engine.tail_probe_us = static_cast<uint32_t>(n);
    } else if (k == "selective_retransmission") {
      bool b = false;
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      c_.engine.selective_retransmission = b;
    } else if (k == "reorder_windows") {
      if (!ParseUnsigned(v, 0, 1024, &n)) return Bad(where, "expected 0..1024");
      c_.engine.reorder_windows = static_cast<uint32_t>(n);
    } else if (k == "reorder_max_held") {
      if (!ParseUnsigned(v, 0, 1 << 20, &n)) return Bad(where, "expected 0..1048576");
      c_.engine.reorder_max_held = static_cast<uint32_t>(n);
    } else if (k == "pull_min_bytes") {
      if (!ParseUnsigned(v, 0, 1u << 31, &n)) return Bad(where, "expected 0..2147483648 (0: never)");
      c_.engine.pull_min_bytes = static_cast<uint32_t>(n);
    } else if (k == "progress_idle_us") {
      if (!ParseUnsigned(v, 1, 1000000, &n)) return Bad(where, "expected 1..1000000");
      c_.engine.progress_idle_us = static_cast<uint32_t>(n);
    } else if (k == "helper_cpus") {
      if (!ParseCpuList(v, &c_.engine.helper_cpus)) return Bad(where, "expected a CPU list (e.g. 1 or 2-3,6), or empty");
    } else {
      return Unknown("engine", k,
                     "progress, rx_burst, max_qps, ack_request_every, max_unacked_packets, per_qp_packet_budget, "
                     "rto_min_us, rto_initial_us, tail_probe_us, selective_retransmission, reorder_windows, "
                     "reorder_max_held, pull_min_bytes, progress_idle_us, helper_cpus");
    }
    return Status::Ok();
  }

  Status Daemon(const std::string& k, const std::string& v, const std::string& where) {
    uint64_t n = 0;
    if (k == "socket") {
      if (v.empty() || v[0] != '/' || v.size() >= 100) return Bad(where, "expected an absolute path under 100 bytes");
      c_.daemon.socket = v;
    } else if (k == "idle_us") {
      if (!ParseUnsigned(v, 0, 100000, &n)) return Bad(where, "expected microseconds, 0..100000");
      c_.daemon.idle_us = static_cast<uint32_t>(n);
    } else if (k == "max_processes") {
      if (!ParseUnsigned(v, 1, kDaemonMaxProcesses, &n)) {
        return Bad(where, "expected 1.." + std::to_string(kDaemonMaxProcesses));
      }
      c_.daemon.max_processes = static_cast<uint32_t>(n);
    } else if (k == "max_processes_per_uid") {
      if (!ParseUnsigned(v, 1, kDaemonMaxProcesses, &n)) {
        return Bad(where, "expected 1.." + std::to_string(kDaemonMaxProcesses));
      }
      c_.daemon.max_processes_per_uid = static_cast<uint32_t>(n);
    } else if (k == "max_listens_per_uid") {
      if (!ParseUnsigned(v, 1, 65535, &n)) return Bad(where, "expected 1..65535");
      c_.daemon.max_listens_per_uid = static_cast<uint32_t>(n);
    } else if (k == "max_peers_per_uid") {
      // Every QPN of every lease (leases are slot << 16, host/daemon_protocol.h).
      constexpr uint64_t kMost = uint64_t{kDaemonMaxProcesses} << 16;
      if (!ParseUnsigned(v, 1, kMost, &n)) return Bad(where, "expected 1.." + std::to_string(kMost));
      c_.daemon.max_peers_per_uid = static_cast<uint32_t>(n);
    } else if (k == "attach_timeout_ms") {
      if (!ParseUnsigned(v, 100, 600000, &n)) return Bad(where, "expected milliseconds, 100..600000");
      c_.daemon.attach_timeout_ms = static_cast<uint32_t>(n);
    } else if (k == "slot_quarantine_ms") {
      if (!ParseUnsigned(v, 0, 3600000, &n)) return Bad(where, "expected milliseconds, 0..3600000");
      c_.daemon.slot_quarantine_ms = static_cast<uint32_t>(n);
    } else {
      return Unknown("daemon", k,
                     "socket, idle_us, max_processes, max_processes_per_uid, max_listens_per_uid, max_peers_per_uid, "
                     "attach_timeout_ms, "
                     "slot_quarantine_ms");
    }
    return Status::Ok();
  }

  Status Impair(const std::string& k, const std::string& v, const std::string& where) {
    uint64_t n = 0;
    ImpairConfig& im = c_.impair;
    if (k == "loss" || k == "dup" || k == "reorder" || k == "corrupt" || k == "rnr_storm") {
      double p = 0;
      if (!ParseProbability(v, &p)) return Bad(where, "expected a probability, 0..1 (e.g. 0.01)");
      (k == "loss" ? im.loss : k == "dup" ? im.duplicate : k == "reorder" ? im.reorder : k == "corrupt" ? im.corrupt
                                                                                                      : im.rnr_storm) = p;
    } else if (k == "delay_us" || k == "reorder_us") {
      if (!ParseUnsigned(v, 0, 10'000'000, &n)) return Bad(where, "expected microseconds, 0..10000000");
      (k == "delay_us" ? im.delay_us : im.reorder_us) = static_cast<uint32_t>(n);
    } else if (k == "seed") {
      if (!ParseUnsigned(v, 0, UINT64_MAX, &n)) return Bad(where, "expected an unsigned 64-bit integer");
      im.seed = n;
    } else if (k == "direction") {
      if (v == "both") im.tx = im.rx = true;
      else if (v == "tx") im.tx = true, im.rx = false;
      else if (v == "rx") im.tx = false, im.rx = true;
      else return Bad(where, "expected both, tx or rx");
    } else if (k == "hold_frames") {
      if (!ParseUnsigned(v, 16, 1 << 20, &n)) return Bad(where, "expected 16..1048576");
      im.hold_frames = static_cast<uint32_t>(n);
    } else if (k == "rate_mbps") {
      if (!ParseUnsigned(v, 0, 10'000'000, &n)) return Bad(where, "expected Mbit/s, 0..10000000");
      im.rate_mbps = n;
    } else if (k == "queue_frames" || k == "ecn_frames") {
      if (!ParseUnsigned(v, 0, 1 << 20, &n)) return Bad(where, "expected frames, 0..1048576");
      (k == "queue_frames" ? im.queue_frames : im.ecn_frames) = static_cast<uint32_t>(n);
    } else if (k == "spare_acks") {
      if (!ParseBool(v, &im.spare_acks)) return Bad(where, "expected yes or no");
    } else {
      return Unknown("impair", k, "loss, dup, reorder, reorder_us, delay_us, corrupt, rnr_storm, seed, direction, "
                                  "hold_frames, rate_mbps, queue_frames, ecn_frames, spare_acks");
    }
    return Status::Ok();
  }

  Status Congestion(const std::string& k, const std::string& v, const std::string& where) {
    uint64_t n = 0;
    CongestionSection& c = c_.congestion;
    if (k == "algorithm" || k.rfind("algorithm_sl", 0) == 0) {
      if (!congestion::IsKnownAlgorithm(v)) return Bad(where, "expected one of " + congestion::KnownAlgorithms());
      if (k == "algorithm") {
        c.algorithm = v;
      } else {
        if (!ParseUnsigned(k.substr(std::strlen("algorithm_sl")), 0, 15, &n)) {
          return Bad(where, "a service level is 0..15 (algorithm_sl0 .. algorithm_sl15)");
        }
        c.algorithm_by_sl[n] = v;
      }
    } else if (k == "line_rate_mbps" || k == "min_rate_mbps") {
      if (!ParseUnsigned(v, 1, 10'000'000, &n)) return Bad(where, "expected Mbit/s, 1..10000000");
      (k == "line_rate_mbps" ? c.line_rate_mbps : c.min_rate_mbps) = n;
    } else if (k == "target_delay_us") {
      if (!ParseUnsigned(v, 1, 10'000'000, &n)) return Bad(where, "expected microseconds, 1..10000000");
      c.target_delay_us = static_cast<uint32_t>(n);
    } else if (k == "cnp_dscp") {
      if (!ParseUnsigned(v, 0, 63, &n)) return Bad(where, "expected a DSCP, 0..63");
      c.cnp_dscp = static_cast<uint32_t>(n);
    } else if (k == "cnp_interval_us") {
      if (!ParseUnsigned(v, 0, 10'000'000, &n)) return Bad(where, "expected microseconds, 0..10000000 (0: no CNPs)");
      c.cnp_interval_us = static_cast<uint32_t>(n);
    } else {
      return Unknown("congestion", k,
                     "algorithm, algorithm_sl0..15, line_rate_mbps, min_rate_mbps, target_delay_us, cnp_interval_us, "
                     "cnp_dscp");
    }
    return Status::Ok();
  }

  Status Endpoint(const std::string& k, const std::string& v, const std::string& where, EndpointConfig& ep, Gid& ipv4,
                  Gid& ipv6, std::vector<Gid>& extra) {
    uint64_t n = 0;
    bool b = false;
    if (k == "port") {
      ep.port = v;
      if (v.rfind("ring:", 0) == 0) {
        // ring:PAIR:SIDE
        const std::string rest = v.substr(5);
        const size_t colon = rest.rfind(':');
        if (colon == std::string::npos || colon == 0 || rest.substr(colon + 1).size() != 1 ||
            (rest[colon + 1] != 'a' && rest[colon + 1] != 'b')) {
          return Bad(where, "a ring port is ring:PAIR:a or ring:PAIR:b");
        }
        ep.kind = PortKind::kRingPair;
        ep.ring_pair = rest.substr(0, colon);
        ep.ring_side = rest[colon + 1];
      } else if (v.rfind("shm:daemon:", 0) == 0) {
        if (!ParseUnsigned(v.substr(11), 0, 7, &n)) return Bad(where, "a daemon port is shm:daemon:K, K 0..7");
        ep.kind = PortKind::kShm;
        ep.shm_index = static_cast<unsigned>(n);
      } else if (v.rfind("kernel:", 0) == 0) {
        const std::string name = v.substr(7);
        if (name.empty() || name.size() >= 16 || name.find_first_of(" \t,/:") != std::string::npos) {
          return Bad(where, "a kernel port is kernel:IFNAME (an interface name, at most 15 characters)");
        }
        ep.kind = PortKind::kKernel;
        ep.interface = name;
      } else if (LooksLikePciAddress(v)) {
        ep.kind = PortKind::kPci;
        ep.device_name = v;
      } else {
        const std::string name = v.substr(0, v.find(','));
        if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
          return Bad(where, "expected ring:PAIR:a|b, kernel:IFNAME, a vdev string (net_memif0,...) or a PCI address");
        }
        ep.kind = PortKind::kVdev;
        ep.device_name = name;
      }
    } else if ((k == "ipv4" || k == "ipv6") && v.empty()) {
      // Empty: no address of this version (how --set removes one).
      (k == "ipv4" ? ep.has_ipv4 : ep.has_ipv6) = false;
    } else if (k == "ipv4") {
      uint8_t b4[4];
      if (inet_pton(AF_INET, v.c_str(), b4) != 1) return Bad(where, "not an IPv4 address");
      ipv4 = transport::Ipv4MappedGid(b4);
      ep.has_ipv4 = true;
    } else if (k == "ipv6") {
      if (inet_pton(AF_INET6, v.c_str(), ipv6.data()) != 1) return Bad(where, "not an IPv6 address");
      if (transport::IsIpv4MappedGid(ipv6)) return Bad(where, "an IPv4-mapped address belongs in ipv4");
      ep.has_ipv6 = true;
    } else if (k == "gids") {
      for (const std::string& g : Split(v, ',')) {
        Gid gid;
        if (!ParseIpAddress(g, &gid)) return Bad(where, "'" + g + "' is not an IPv4 or IPv6 address");
        extra.push_back(gid);
      }
    } else if (k == "mac") {
      if (v == "port") {
        ep.mac_from_port = true;
      } else {
        if (!ParseMacAddress(v, &ep.mac)) return Bad(where, "expected port or xx:xx:xx:xx:xx:xx");
        if (ep.mac[0] & 1) return Bad(where, "a multicast MAC cannot be a port's address");
        ep.mac_from_port = false;
      }
    } else if (k == "lcore") {
      if (!ParseUnsigned(v, 0, RTE_MAX_LCORE - 1, &n)) return Bad(where, "not an lcore id");
      ep.lcore = static_cast<int>(n);
    } else if (k == "mtu") {
      if (!ParseUnsigned(v, 576, 9216, &n)) return Bad(where, "expected 576..9216");
      ep.mtu = static_cast<uint32_t>(n);
    } else if (k == "rx_descriptors" || k == "tx_descriptors") {
      if (!ParseUnsigned(v, 32, 32768, &n)) return Bad(where, "expected 32..32768");
      (k == "rx_descriptors" ? ep.rx_descriptors : ep.tx_descriptors) = static_cast<uint16_t>(n);
    } else if (k == "mbufs") {
      if (!ParseUnsigned(v, 256, 1 << 22, &n)) return Bad(where, "expected 256..4194304");
      ep.mbufs = static_cast<unsigned>(n);
    } else if (k == "promiscuous") {
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      ep.promiscuous = b;
    } else if (k == "active_before_link") {
      if (v == "auto") {
        ep.active_before_link = EndpointConfig::ActiveBeforeLink::kAuto;
      } else if (ParseBool(v, &b)) {
        ep.active_before_link = b ? EndpointConfig::ActiveBeforeLink::kYes : EndpointConfig::ActiveBeforeLink::kNo;
      } else {
        return Bad(where, "expected yes, no or auto");
      }
    } else if (k == "loopback") {
      if (!ParseBool(v, &b)) return Bad(where, "expected yes or no");
      ep.loopback = b;
    } else if (k == "congestion") {
      if (!congestion::IsKnownAlgorithm(v)) return Bad(where, "expected one of " + congestion::KnownAlgorithms());
      ep.congestion = v;
    } else if (k == "kernel_io") {
      if (v == "auto") {
        ep.kernel_io = KernelIo::kAuto;
      } else if (v == "af_xdp") {
        ep.kernel_io = KernelIo::kAfXdp;
      } else if (v == "af_packet") {
        ep.kernel_io = KernelIo::kAfPacket;
      } else {
        return Bad(where, "expected auto, af_xdp or af_packet");
      }
    } else if (k == "qpn_range") {
      // BASE+COUNT, as a uroce daemon leases it: QPNs BASE..BASE+COUNT-1.
      const size_t plus = v.find('+');
      uint64_t base = 0, count = 0;
      if (plus == std::string::npos || !ParseUnsigned(v.substr(0, plus), 0, 0xFFFFFF, &base) ||
          !ParseUnsigned(v.substr(plus + 1), 1, 0x1000000, &count) || base + count > 0x1000000) {
        return Bad(where, "expected BASE+COUNT inside the 24-bit QPN space");
      }
      ep.qpn_base = static_cast<uint32_t>(base);
      ep.qpn_count = static_cast<uint32_t>(count);
    } else if (k == "link_timeout_ms" || k == "resolve_timeout_ms") {
      const uint64_t least = k == "link_timeout_ms" ? 0 : 1;  // link 0: do not wait
      if (!ParseUnsigned(v, least, 3'600'000, &n)) {
        return Bad(where, least == 0 ? "expected milliseconds, 0..3600000" : "expected milliseconds, 1..3600000");
      }
      (k == "link_timeout_ms" ? ep.link_timeout_ms : ep.resolve_timeout_ms) = static_cast<unsigned>(n);
    } else if (k == "neighbors") {
      for (const std::string& item : Split(v, ',')) {
        const size_t eq = item.find('=');
        Gid gid;
        MacAddress mac;
        if (eq == std::string::npos || !ParseIpAddress(item.substr(0, eq), &gid) ||
            !ParseMacAddress(item.substr(eq + 1), &mac)) {
          return Bad(where, "'" + item + "' is not IP=MAC");
        }
        ep.neighbors.emplace_back(gid, mac);
      }
    } else {
      return Unknown("endpoint." + ep.name, k,
                     "port, ipv4, ipv6, gids, mac, lcore, mtu, rx_descriptors, tx_descriptors, mbufs, "
                     "promiscuous, loopback, kernel_io, qpn_range, link_timeout_ms, active_before_link, "
                     "resolve_timeout_ms, neighbors");
    }
    return Status::Ok();
  }

  UroceConfig& c_;
};

// Checks what no single key can: endpoints against each other and against EAL.
// A vdev string's KEY=VALUE arguments, after its name.
bool HasVdevArg(const std::string& vdev, const std::string& key) {
  for (const std::string& item : Split(vdev, ',')) {
    if (item.rfind(key + "=", 0) == 0) return true;
  }
  return false;
}
std::string VdevArgOr(const std::string& vdev, const std::string& key, const std::string& otherwise) {
  const std::vector<std::string> items = Split(vdev, ',');
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].rfind(key + "=", 0) == 0) return items[i].substr(key.size() + 1);
  }
  return otherwise;
}

Status CrossCheck(UroceConfig& c) {
  if (c.endpoints.empty()) return InvalidArgument(c.origin + ": no [endpoint.NAME] section");
  // Once every key is read, in whatever order the file and --set gave them.
  if (c.congestion.min_rate_mbps > c.congestion.line_rate_mbps) {
    return InvalidArgument("[congestion] min_rate_mbps " + std::to_string(c.congestion.min_rate_mbps) +
                           " is above line_rate_mbps " + std::to_string(c.congestion.line_rate_mbps));
  }
  std::map<std::string, std::set<char>> ring_sides;
  std::set<std::string> devices;
  const std::vector<unsigned> lcores = ParseLcoreList(c.eal.lcores);
  const unsigned main_lcore = lcores.empty() ? 0 : *std::min_element(lcores.begin(), lcores.end());
  for (EndpointConfig& ep : c.endpoints) {
    const std::string where = "[endpoint." + ep.name + "]";
    switch (ep.kind) {
      case PortKind::kRingPair:
        if (!ring_sides[ep.ring_pair].insert(ep.ring_side).second) {
          return InvalidArgument(where + " port: ring:" + ep.ring_pair + ":" + ep.ring_side + " is used twice");
        }
        break;
      case PortKind::kVdev:
        if (!devices.insert(ep.device_name).second) {
          return InvalidArgument(where + " port: device " + ep.device_name + " is used twice");
        }
        if (ep.device_name.rfind("net_memif", 0) == 0) {
          if (!HasVdevArg(ep.port, "socket")) {
            // Both sides of a pair compute the same file (DefaultMemifSocket)
            // in the user's private directory, rather than memif's one
            // abstract default that every pair on the host would share.
            auto path = DefaultMemifSocket(VdevArgOr(ep.port, "id", "0"));
            if (!path.ok()) return Status(path.status().code(), where + " port: " + path.status().message());
            ep.port += ",socket=" + *path;
          }
          // DPDK's memif makes a socket abstract unless told otherwise: an
          // abstract name has no owner or mode, and anyone in the network
          // namespace may bind it first or connect to it (unix(7)). A file,
          // in a directory only its user may enter, is the only check a
          // memif peer gets (DPDK does not look at SCM_CREDENTIALS).
          if (!HasVdevArg(ep.port, "socket-abstract")) ep.port += ",socket-abstract=no";
        }
        c.eal.vdevs.push_back(ep.port);
        break;
      case PortKind::kPci:
        if (!devices.insert(ep.device_name).second) {
          return InvalidArgument(where + " port: device " + ep.device_name + " is used twice");
        }
        c.eal.pci = true;
        c.eal.extra_args.insert(c.eal.extra_args.end(), {"-a", ep.device_name});
        break;
      case PortKind::kShm:
        // Shared memory from the daemon: no DPDK device.
        if (!devices.insert(ep.port).second) return InvalidArgument(where + " port: " + ep.port + " is used twice");
        break;
      case PortKind::kKernel:
        // The daemon opens it after EAL (host/kernel_uplink.h); nothing for EAL.
        if (!devices.insert("kernel:" + ep.interface).second) {
          return InvalidArgument(where + " port: kernel:" + ep.interface + " is used twice");
        }
        break;
    }
    if (c.progress == ProgressMode::kEngine) {
      if (ep.lcore < 0) return InvalidArgument(where + " needs an lcore: [engine] progress = engine");
      if (std::find(lcores.begin(), lcores.end(), static_cast<unsigned>(ep.lcore)) == lcores.end()) {
        return InvalidArgument(where + " lcore = " + std::to_string(ep.lcore) + " is not in [eal] lcores = " +
                               c.eal.lcores);
      }
      if (static_cast<unsigned>(ep.lcore) == main_lcore) {
        return InvalidArgument(where + " lcore = " + std::to_string(ep.lcore) +
                               " is the main lcore, which runs the application; give the engine another one");
      }
    }
  }
  for (const auto& [pair, sides] : ring_sides) {
    if (sides.size() != 2) {
      return InvalidArgument("ring pair '" + pair + "' needs both sides: ring:" + pair + ":a and ring:" + pair + ":b");
    }
  }
  // EAL's -d / --driver-path dlopen()s a file: code from wherever the
  // configuration (UROCE_CONFIG, --set) points would run in this process,
  // e.g. in any verbs program. Only when the configuration says so by name.
  // After every key is read: allow_driver_load may follow args.
  if (const std::string d = FindDriverLoadArgument(c.eal.extra_args); !d.empty() && !c.eal.allow_driver_load) {
    return InvalidArgument("[eal] args: '" + d +
                           "' makes EAL load a shared object (DPDK's -d / --driver-path), which runs its code in "
                           "this process; refused unless the configuration sets [eal] allow_driver_load = yes");
  }
  if (!c.telemetry) c.eal.extra_args.push_back("--no-telemetry");
  return Status::Ok();
}

StatusOr<UroceConfig> Load(const std::string& path, const std::string& text, const std::string& origin,
                           const std::vector<ConfigOverride>& overrides) {
  UROCE_RETURN_IF_ERROR(PreScan(text, origin));
  auto cfg = LoadWithCfgfile(path, text, origin);
  if (!cfg.ok()) return cfg.status();
  rte_cfgfile* f = cfg->get();
  for (const ConfigOverride& o : overrides) {
    const std::string where = "--set " + o.section + "." + o.key + "=" + o.value;
    if (o.section.size() >= CFG_NAME_LEN || o.key.size() >= CFG_NAME_LEN || o.value.size() >= CFG_VALUE_LEN) {
      return InvalidArgument(where + ": too long");
    }
    if (!rte_cfgfile_has_section(f, o.section.c_str()) && rte_cfgfile_add_section(f, o.section.c_str()) != 0) {
      return Internal(where + ": rte_cfgfile_add_section failed");
    }
    const int ret = rte_cfgfile_has_entry(f, o.section.c_str(), o.key.c_str())
                        ? rte_cfgfile_set_entry(f, o.section.c_str(), o.key.c_str(), o.value.c_str())
                        : rte_cfgfile_add_entry(f, o.section.c_str(), o.key.c_str(), o.value.c_str());
    if (ret != 0) return Internal(where + ": rte_cfgfile refused it");
  }

  UroceConfig config;
  config.origin = origin;
  config.eal.log_level = "*:warning";
  Builder builder(&config);
  const int sections = rte_cfgfile_num_sections(f, nullptr, 0);
  for (int i = 0; i < sections; ++i) {
    char name[CFG_NAME_LEN];
    const int n = rte_cfgfile_section_num_entries_by_index(f, name, i);
    if (n < 0) return Internal("rte_cfgfile lost section " + std::to_string(i));
    std::vector<rte_cfgfile_entry> entries(static_cast<size_t>(n));
    if (n > 0 && rte_cfgfile_section_entries_by_index(f, i, name, entries.data(), n) != n) {
      return Internal(std::string("rte_cfgfile lost the entries of [") + name + "]");
    }
    Status s = builder.Section(name, entries);
    if (!s.ok()) return Status(s.code(), origin + ": " + s.message());
  }
  Status s = CrossCheck(config);
  if (!s.ok()) return Status(s.code(), s.message().rfind(origin, 0) == 0 ? s.message() : origin + ": " + s.message());
  return config;
}

}  // namespace

StatusOr<std::string> DefaultMemifSocket(const std::string& memif_id) {
  // Which pair: $UROCE_PAIR, else Bazel's per-test TEST_TMPDIR (tests run in
  // parallel), else none (one pair per user and memif id). A hash keeps the
  // path short (sockaddr_un holds 108 bytes; TEST_TMPDIR is long). FNV-1a,
  // 64 bits.
  auto dir = PrivateRuntimeDir();
  if (!dir.ok()) return dir.status();
  const char* pair = std::getenv("UROCE_PAIR");
  if (pair == nullptr || *pair == '\0') pair = std::getenv("TEST_TMPDIR");
  std::string path = *dir + "/memif";
  if (pair != nullptr && *pair != '\0') {
    uint64_t hash = 14695981039346656037ull;
    for (const char* p = pair; *p != '\0'; ++p) hash = (hash ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
    char hex[20];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
    path += std::string("-") + hex;
  }
  path += "-" + memif_id + ".sock";
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return InvalidArgument("the memif socket " + path + " is longer than a socket path may be (" +
                           std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                           " bytes): set UROCE_RUNTIME_DIR to a shorter directory, or give socket=");
  }
  return path;
}

bool EndpointConfig::PortActiveBeforeLink() const {
  switch (active_before_link) {
    case ActiveBeforeLink::kYes:
      return true;
    case ActiveBeforeLink::kNo:
      return false;
    case ActiveBeforeLink::kAuto:
      break;
  }
  // A link to another uroce process (a memif peer, the other side of a ring
  // pair, the daemon's switch) is up only while that process runs, unlike a
  // NIC's cable: a server whose client has not started yet is still a
  // working port (perftest and UCX refuse a port that is not ACTIVE), and
  // its frames wait in the engine until the link is up.
  return kind == PortKind::kRingPair || kind == PortKind::kShm ||
         (kind == PortKind::kVdev && port.rfind("net_memif", 0) == 0);
}

const EndpointConfig* UroceConfig::Find(const std::string& name) const {
  for (const EndpointConfig& ep : endpoints) {
    if (ep.name == name) return &ep;
  }
  return nullptr;
}

StatusOr<ConfigOverride> ParseOverride(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return InvalidArgument("--set " + text + ": expected section.key=value");
  const std::string lhs = Trim(text.substr(0, eq));
  const size_t dot = lhs.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == lhs.size()) {
    return InvalidArgument("--set " + text + ": expected section.key=value (e.g. endpoint.a.ipv4=10.0.0.1)");
  }
  return ConfigOverride{lhs.substr(0, dot), lhs.substr(dot + 1), Trim(text.substr(eq + 1))};
}

StatusOr<std::vector<ConfigOverride>> ParseImpairSpec(const std::string& text) {
  std::vector<ConfigOverride> out;
  std::set<std::string> keys;
  for (const std::string& item : Split(text, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--impair " + text + ": '" + item + "' is not key=value (e.g. loss=0.01,seed=7)");
    }
    const std::string key = Trim(item.substr(0, eq));
    if (!keys.insert(key).second) return InvalidArgument("--impair " + text + ": " + key + " is given twice");
    out.push_back(ConfigOverride{"impair", key, Trim(item.substr(eq + 1))});
  }
  if (out.empty()) return InvalidArgument("--impair needs key=value items (e.g. loss=0.01,seed=7)");
  // Checked as the section's keys are, so that a typo fails where it is
  // written (uroce exec) rather than later in the program.
  std::vector<rte_cfgfile_entry> entries(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].key.size() >= CFG_NAME_LEN || out[i].value.size() >= CFG_VALUE_LEN) {
      return InvalidArgument("--impair " + out[i].key + "=" + out[i].value + ": too long");
    }
    std::snprintf(entries[i].name, sizeof(entries[i].name), "%s", out[i].key.c_str());
    std::snprintf(entries[i].value, sizeof(entries[i].value), "%s", out[i].value.c_str());
  }
  UroceConfig scratch;
  Status s = Builder(&scratch).Section("impair", entries);
  if (!s.ok()) return Status(s.code(), "--impair: " + s.message());
  return out;
}

StatusOr<UroceConfig> LoadConfigFile(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read configuration file " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return Load(path, text.str(), path, overrides);
}

StatusOr<UroceConfig> LoadConfigText(const std::string& text, const std::string& origin,
                                     const std::vector<ConfigOverride>& overrides) {
  return Load("", text, origin, overrides);
}


namespace {

// An attached process's EAL main lcore may run on any CPU this process may
// use: the daemon's configuration pins nothing (its engines are the
// processes' own, driven by their threads), and EAL's default lcore 0 would
// pin every attached process to CPU 0.
std::vector<ConfigOverride> UnpinnedMainLcore() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::string cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    if (!cpus.empty()) cpus += ',';
    cpus += std::to_string(cpu);
  }
  if (cpus.empty()) return {};
  return {ConfigOverride{"eal", "lcores", "0@(" + cpus + ")"}};
}

}  // namespace

StatusOr<UroceConfig> LoadConfigFromDaemon(const host::DaemonSession& session,
                                           const std::vector<ConfigOverride>& overrides) {
  const std::string origin = "uroce daemon at " + session.socket_path();
  std::vector<ConfigOverride> all = UnpinnedMainLcore();  // first: the caller's may pin
  all.insert(all.end(), overrides.begin(), overrides.end());
  auto config = LoadConfigText(session.config_text(), origin, all);
  if (!config.ok()) return config;
  const std::vector<int>& files = session.shm_fds();
  for (EndpointConfig& ep : config->endpoints) {
    if (ep.kind != PortKind::kShm) continue;
    if (ep.shm_index >= files.size()) {
      return InvalidArgument(origin + ": [endpoint." + ep.name + "] names port " + std::to_string(ep.shm_index) +
                             " of " + std::to_string(files.size()));
    }
    ep.shm_fd = files[ep.shm_index];
  }
  return config;
}

}  // namespace uroce::runtime
