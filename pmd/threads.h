// Where a process's threads run, so that they stay out of the
// way: helper threads placed as the configuration says, and every thread
// of the process as `uroce stats` shows it.
//
// Helper threads are the verbs/libfabric provider's progress thread and the
// connection managers' thread. By default they inherit the affinity of the
// thread that made them (under `uroce exec`, EAL's main lcore: the
// application's CPU) and keep out of its way by sleeping while an
// application thread drives progress; `[engine] helper_cpus` moves them to
// other CPUs instead (runtime/config.h).
//
// Control path only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uroce::pmd {

// Names the calling thread (at most 15 characters), blocks the process's
// signals in it (they go to application threads), and, when `cpus` is not
// empty, pins it to them (sched_setaffinity(2)). A CPU the process may not
// use is an error printed once per thread; the thread then keeps its
// affinity.
void PlaceHelperThread(const char* name, const std::vector<unsigned>& cpus);

struct ThreadPlacement {
  int tid = 0;
  std::string name;         // /proc/self/task/TID/comm
  std::string allowed_cpus; // Cpus_allowed_list
  int last_cpu = -1;        // the CPU it last ran on (stat field 39)
  uint64_t voluntary_switches = 0, involuntary_switches = 0;
};

// Every thread of this process, from /proc/self/task; empty if /proc is not
// mounted.
std::vector<ThreadPlacement> ReadThreadPlacements();

// "0-1,3" -> {0, 1, 3}; false for anything else (empty text is an empty
// list). CPUs at most 1023.
bool ParseCpuList(const std::string& text, std::vector<unsigned>* cpus);

}  // namespace uroce::pmd
