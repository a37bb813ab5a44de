#include "pmd/threads.h"
#include "pmd/log.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace uroce::pmd {
namespace {

constexpr unsigned kMaxCpu = 1023;

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

bool ParseCpuList(const std::string& text, std::vector<unsigned>* cpus) {
  cpus->clear();
  if (text.empty()) return true;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    unsigned first = 0, last = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%u-%u%c", &first, &last, &tail) == 2) {
      // a range
    } else if (std::sscanf(item.c_str(), "%u%c", &first, &tail) == 1 && item.find('-') == std::string::npos) {
      last = first;
    } else {
      return false;
    }
    if (item.empty() || item[0] < '0' || item[0] > '9' || first > last || last > kMaxCpu) return false;
    for (unsigned c = first; c <= last; ++c) cpus->push_back(c);
  }
  return !cpus->empty();
}

void PlaceHelperThread(const char* name, const std::vector<unsigned>& cpus) {
  prctl(PR_SET_NAME, name, 0, 0, 0);
  // Signals for the process (SIGTERM, SIGINT, ...) go to the application's
  // threads, never to ours: a handler that calls exit() on a helper thread
  // would run the library's exit handler there, which joins that very
  // thread. Faults (SIGSEGV, ...) are delivered whatever the mask says.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cpus) {
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  // 0: the calling thread.
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    UROCE_LOG(ERR, kPmd, "cannot place thread %s on helper_cpus: %s; it stays where it was\n", name,
                 std::strerror(errno));
  }
}

std::vector<ThreadPlacement> ReadThreadPlacements() {
  std::vector<ThreadPlacement> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string base = std::string("/proc/self/task/") + entry->d_name;
    ThreadPlacement t;
    t.tid = std::atoi(entry->d_name);
    t.name = ReadFirstLine(base + "/comm");
    // stat: "TID (comm) S ..." with comm possibly holding blanks or ')':
    // the fields after the last ')' are numbered from 3; processor is 39.
    const std::string stat = ReadFirstLine(base + "/stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      std::stringstream fields(stat.substr(close + 1));
      std::string field;
      for (int n = 3; fields >> field; ++n) {
        if (n == 39) {
          t.last_cpu = std::atoi(field.c_str());
          break;
        }
      }
    }
    std::ifstream status(base + "/status");
    std::string line;
    while (std::getline(status, line)) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = line.substr(0, colon);
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      if (key == "Cpus_allowed_list") t.allowed_cpus = value;
      else if (key == "voluntary_ctxt_switches") t.voluntary_switches = std::strtoull(value.c_str(), nullptr, 10);
      else if (key == "nonvoluntary_ctxt_switches") t.involuntary_switches = std::strtoull(value.c_str(), nullptr, 10);
    }
    out.push_back(t);
  }
  closedir(dir);
  return out;
}

}  // namespace uroce::pmd
