#include "host/udp_port_holders.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace uroce::host {
namespace {

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool ParseUnsigned(const std::string& word, int base, uint64_t* value) {
  if (word.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *value = std::strtoull(word.c_str(), &end, base);
  return errno == 0 && end != nullptr && *end == '\0';
}

}  // namespace

std::vector<UdpPortHolder> ParseProcNetUdp(std::string_view text, bool ipv6, uint16_t port) {
  // proc(5), /proc/net/udp: "sl local_address rem_address st tx_queue:rx_queue
  // tr:tm->when retrnsmt uid timeout inode ...", the local address as hex
  // ADDRESS:PORT.
  std::vector<UdpPortHolder> holders;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<std::string> words;
    for (std::string w; fields >> w && words.size() < 10;) words.push_back(w);
    if (words.size() < 10 || words[0].empty() || words[0].back() != ':') continue;  // the header, or junk
    const std::string& local = words[1];
    const size_t colon = local.find(':');
    uint64_t local_port = 0, uid = 0, inode = 0;
    if (colon == std::string::npos || !ParseUnsigned(local.substr(colon + 1), 16, &local_port) ||
        !ParseUnsigned(words[7], 10, &uid) || !ParseUnsigned(words[9], 10, &inode)) {
      continue;
    }
    if (local_port != port) continue;
    UdpPortHolder h;
    h.ipv6 = ipv6;
    h.local_address = local.substr(0, colon);
    h.uid = static_cast<uid_t>(uid);
    h.inode = inode;
    holders.push_back(std::move(h));
  }
  return holders;
}

std::vector<UdpPortHolder> UdpPortHolders(uint16_t port) {
  std::vector<UdpPortHolder> holders = ParseProcNetUdp(ReadWhole("/proc/net/udp"), false, port);
  for (UdpPortHolder& h : ParseProcNetUdp(ReadWhole("/proc/net/udp6"), true, port)) holders.push_back(std::move(h));
  bool any_inode = false;
  for (const UdpPortHolder& h : holders) any_inode |= h.inode != 0;
  if (!any_inode) return holders;
  // Which processes have the sockets open: "socket:[INODE]" among their
  // file descriptors (proc(5), /proc/PID/fd). Processes we may not look
  // into are skipped; the uid above is the kernel's word either way.
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return holders;
  while (dirent* e = readdir(proc)) {
    uint64_t pid = 0;
    if (!ParseUnsigned(e->d_name, 10, &pid)) continue;
    const std::string fd_dir = std::string("/proc/") + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      char target[64];
      const std::string link = fd_dir + "/" + f->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      for (UdpPortHolder& h : holders) {
        if (h.inode == 0 || std::string(target) != "socket:[" + std::to_string(h.inode) + "]") continue;
        bool known = false;
        for (pid_t p : h.pids) known |= p == static_cast<pid_t>(pid);
        if (known) continue;
        std::string comm = ReadWhole(std::string("/proc/") + e->d_name + "/comm");
        while (!comm.empty() && comm.back() == '\n') comm.pop_back();
        h.pids.push_back(static_cast<pid_t>(pid));
        h.programs.push_back(comm.empty() ? "?" : comm);
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return holders;
}

std::string DescribeHolder(const UdpPortHolder& holder) {
  if (holder.inode == 0) return "the kernel (a socket of its own: rdma_rxe?)";
  std::string text = "uid " + std::to_string(holder.uid);
  if (holder.pids.empty()) return text + " (inode " + std::to_string(holder.inode) + ", no process visible)";
  for (size_t i = 0; i < holder.pids.size(); ++i) {
    text += (i == 0 ? " (pid " : ", pid ") + std::to_string(holder.pids[i]) + " " + holder.programs[i];
  }
  return text + ")";
}

}  // namespace uroce::host
