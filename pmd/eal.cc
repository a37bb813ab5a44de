#include "pmd/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memory.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace uroce::pmd {
namespace {

enum class EalState { kNotStarted, kRunning, kStopped };
EalState g_state = EalState::kNotStarted;
std::string g_file_prefix;
pid_t g_eal_pid = 0;  // the process that started EAL

}  // namespace

std::string UniqueFilePrefix() {
  static std::atomic<unsigned> counter{0};
  // The pid alone is not unique: Bazel's linux-sandbox gives each test its
  // own PID namespace, so concurrent tests all run as the same small pid and
  // would share (and delete) one /var/run/dpdk/<prefix>. A random tag per
  // process tells them apart.
  static const unsigned tag = std::random_device{}() & 0xFFFFFF;
  char tag_hex[8];
  std::snprintf(tag_hex, sizeof(tag_hex), "%06x", tag);
  return "uroce-" + std::to_string(getpid()) + "-" + tag_hex + "-" + std::to_string(counter++);
}

std::string FindDriverLoadArgument(const std::vector<std::string>& args) {
  static const std::string kLong = "driver-path";
  // DPDK 22.11's EAL short options (lib/eal/common/eal_common_options.c,
  // eal_short_options): these take an argument, so what follows them in the
  // same word is that argument, not more options. Any other letter is
  // treated as a flag, so that a 'd' after it is still found.
  static const std::string kWithArgument = "abcdlLmnrsS";
  for (const std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      // getopt_long(3): "Long option names may be abbreviated if the
      // abbreviation is unique".
      if (!name.empty() && kLong.rfind(name, 0) == 0) return a;
    } else if (a.size() >= 2 && a[0] == '-') {
      // getopt(3): several options in one word ("-vd lib.so").
      for (size_t i = 1; i < a.size(); ++i) {
        if (a[i] == 'd') return a;
        if (kWithArgument.find(a[i]) != std::string::npos) break;
      }
    }
  }
  return "";
}

std::vector<std::string> EalArguments(const EalConfig& config) {
  // --lcores takes both "0-1" (as -l does) and EAL's lcore@cpu mappings.
  std::vector<std::string> args = {config.program_name, "--lcores", config.lcores};
  if (!config.hugepages) {
    // --no-shconf: no shared config file, so no secondary processes; EAL
    // refuses --in-memory together with --no-huge, this is the combination
    // that works without hugepages.
    args.insert(args.end(), {"--no-huge", "--no-shconf"});
  }
  if (!config.pci) args.push_back("--no-pci");
  args.insert(args.end(), {"-m", std::to_string(config.memory_mb)});
  args.insert(args.end(), {"--file-prefix", config.file_prefix});
  for (const std::string& vdev : config.vdevs) {
    args.insert(args.end(), {"--vdev", vdev});
  }
  if (!config.log_level.empty()) {
    args.insert(args.end(), {"--log-level", config.log_level});
  }
  args.insert(args.end(), config.extra_args.begin(), config.extra_args.end());
  return args;
}

Status StartEal(const EalConfig& config) {
  if (g_state == EalState::kRunning) {
    return FailedPrecondition("DPDK EAL is already running in this process");
  }
  if (g_state == EalState::kStopped) {
    return FailedPrecondition("DPDK EAL cannot be started twice in one process");
  }
  // Checked again here (the configuration checks it first, naming the key),
  // for whoever builds an EalConfig by hand.
  if (const std::string d = FindDriverLoadArgument(config.extra_args); !d.empty() && !config.allow_driver_load) {
    return InvalidArgument("EAL argument '" + d +
                           "' loads a shared object into this process (DPDK's -d / --driver-path); refused unless "
                           "[eal] allow_driver_load = yes");
  }
  EalConfig resolved = config;
  if (resolved.file_prefix.empty()) resolved.file_prefix = UniqueFilePrefix();
  std::vector<std::string> args = EalArguments(resolved);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // rte_eal_init may permute argv; the strings live in `args` meanwhile.
  int ret = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  if (ret < 0) {
    int err = rte_errno;
    std::string line;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      line += (i ? " " : "");
      line += args[i];
    }
    return Status(err == EALREADY ? StatusCode::kFailedPrecondition : StatusCode::kIoError,
                  std::string("rte_eal_init failed: ") + rte_strerror(err) + " (args: " + line + ")");
  }
  g_state = EalState::kRunning;
  g_file_prefix = resolved.file_prefix;
  g_eal_pid = getpid();
  return Status::Ok();
}

Status MakeEalMemoryPrivate() {
  if (g_state != EalState::kRunning) return FailedPrecondition("DPDK EAL is not running");
  std::ifstream maps("/proc/self/maps");
  if (!maps) return IoError("cannot read /proc/self/maps");
  struct Mapping {
    uintptr_t start = 0, end = 0;
    off_t offset = 0;
  };
  std::vector<Mapping> shared;
  for (std::string line; std::getline(maps, line);) {
    // proc(5): "start-end perms offset dev inode pathname".
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    if (!(in >> range >> perms >> offset >> dev >> inode >> path)) continue;
    if (perms.size() < 4 || perms[3] != 's' || path.rfind("/memfd:nohuge", 0) != 0) continue;
    const size_t dash = range.find('-');
    if (dash == std::string::npos) continue;
    shared.push_back({std::stoull(range.substr(0, dash), nullptr, 16), std::stoull(range.substr(dash + 1), nullptr, 16),
                      static_cast<off_t>(std::stoll(offset, nullptr, 16))});
  }
  for (const Mapping& m : shared) {
    const size_t len = m.end - m.start;
    char* const from = reinterpret_cast<char*>(m.start);
    void* copy = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (copy == MAP_FAILED) return IoError(std::string("mmap for EAL's memory: ") + std::strerror(errno));
    // Copy only what the file holds (lseek(2) SEEK_DATA / SEEK_HOLE): a
    // read of a hole in a memfd would allocate it.
    const rte_memseg* ms = rte_mem_virt2memseg(from, nullptr);
    const int fd = ms != nullptr ? rte_memseg_get_fd_thread_unsafe(ms) : -1;
    const off_t first = m.offset, last = m.offset + static_cast<off_t>(len);
    // ENXIO: no data from `first` on. Any other failure (a file system
    // without SEEK_DATA): copy all of it rather than lose any.
    const bool seekable = fd >= 0 && (lseek(fd, first, SEEK_DATA) >= 0 || errno == ENXIO);
    if (!seekable) {
      std::memcpy(copy, from, len);
    } else {
      for (off_t data = lseek(fd, first, SEEK_DATA); data >= first && data < last;
           data = lseek(fd, data, SEEK_DATA)) {
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || hole > last) hole = last;
        std::memcpy(static_cast<char*>(copy) + (data - first), from + (data - first), static_cast<size_t>(hole - data));
        data = hole;
        if (data >= last) break;
      }
    }
    if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, from) == MAP_FAILED) {
      const int err = errno;
      munmap(copy, len);
      return IoError(std::string("mremap over EAL's memory: ") + std::strerror(err));
    }
    // The file's pages are nobody's now: give them back (fallocate(2)).
    if (fd >= 0) (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, first, static_cast<off_t>(len));
  }
  return Status::Ok();
}

bool EalRunning() { return g_state == EalState::kRunning; }

const std::string& EalFilePrefix() { return g_file_prefix; }

Status StopEal() {
  if (g_state != EalState::kRunning) return FailedPrecondition("DPDK EAL is not running");
  int ret = rte_eal_cleanup();
  g_state = EalState::kStopped;
  RemoveEalRuntimeDir();
  if (ret < 0) return IoError(std::string("rte_eal_cleanup failed: ") + rte_strerror(-ret));
  return Status::Ok();
}

void RemoveEalRuntimeDir() {
  // EAL (22.11) leaves /var/run/dpdk/<prefix> (or
  // $XDG_RUNTIME_DIR/dpdk/<prefix>) behind, one per process, for ever.
  // Only the process that started EAL: a forked child inherits the prefix,
  // and its exit must not take its parent's telemetry socket.
  if (getpid() != g_eal_pid) return;
  // A prefix is one path component (a configured one could say otherwise).
  if (g_file_prefix.empty() || g_file_prefix == "." || g_file_prefix == ".." ||
      g_file_prefix.find('/') != std::string::npos) {
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::path("/var/run/dpdk") / g_file_prefix, ignored);
  // secure_getenv(3): a set-user-ID program ignores the caller's
  // environment, which would otherwise choose what remove_all deletes.
  if (const char* xdg = secure_getenv("XDG_RUNTIME_DIR"); xdg != nullptr && getuid() != 0) {
    std::filesystem::remove_all(std::filesystem::path(xdg) / "dpdk" / g_file_prefix, ignored);
  }
}

std::vector<unsigned> ParseLcoreList(const std::string& text) {
  // EAL's --lcores grammar, as far as uroce needs it: items separated by
  // commas at the top level; an item is N, N-M or (list), optionally
  // followed by @cpu or @(cpus). Only the lcore ids are returned.
  std::vector<unsigned> out;
  size_t i = 0;
  size_t begin = 0, end = text.size();  // without the blanks around it (isspace)
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string s = text.substr(begin, end - begin);
  auto number = [&](unsigned* v) {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    unsigned n = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      n = n * 10 + unsigned(s[i++] - '0');
      if (n >= RTE_MAX_LCORE) return false;
    }
    *v = n;
    return true;
  };
  auto range = [&](std::vector<unsigned>* into) {
    unsigned a = 0, b = 0;
    if (!number(&a)) return false;
    b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (!number(&b) || b < a) return false;
    }
    for (unsigned v = a; v <= b; ++v) into->push_back(v);
    return true;
  };
  auto skip_cpus = [&]() {
    if (i < s.size() && s[i] == '@') {
      ++i;
      if (i < s.size() && s[i] == '(') {
        const size_t close = s.find(')', i);
        if (close == std::string::npos) return false;
        i = close + 1;
      } else {
        std::vector<unsigned> ignored;
        if (!range(&ignored)) return false;
      }
    }
    return true;
  };
  while (i < s.size()) {
    if (s[i] == '(') {
      ++i;
      while (true) {
        if (!range(&out)) return {};
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ')') {
          ++i;
          break;
        }
        return {};
      }
    } else if (!range(&out)) {
      return {};
    }
    if (!skip_cpus()) return {};
    if (i < s.size()) {
      if (s[i] != ',') return {};
      ++i;
      if (i == s.size()) return {};
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace uroce::pmd
