#include "pmd/memif_unmap_guard.h"

#include <linux/membarrier.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>

#include "pmd/log.h"
#include "pmd/memif_import.h"

namespace uroce::pmd {

class MemifUnmapGuard {
 public:
  static void SetAsymmetric(BurstFence& fence) { fence.asymmetric_.store(true, std::memory_order_relaxed); }
};

namespace {

// A poller is inside a burst for microseconds; one that stays longer than
// this was stopped there (a debugger, a thread that died), and the unmap goes
// ahead rather than hold EAL's interrupt thread for ever.
constexpr std::chrono::seconds kUnmapWaitLimit{1};

BurstFence g_fences[RTE_MAX_ETHPORTS];
std::atomic<bool> g_asymmetric{false};
// The interrupt thread's full barrier when membarrier(2) is not registered:
// a locked read-modify-write (ThreadSanitizer does not take
// atomic_thread_fence, and a locked RMW is one on x86).
std::atomic<uint64_t> g_barrier_word{0};
std::atomic<uint64_t> g_unmaps_seen{0}, g_bursts_waited{0}, g_waits_given_up{0};

// Every burst on a memif port that was under way when the caller's flag
// store became visible has ended once this returns (or the limit passed).
void WaitForBursts() {
  g_unmaps_seen.fetch_add(1, std::memory_order_relaxed);
  // Dekker's pattern between this thread (memif cleared the flag, then
  // reads the epochs) and each poller (marks the epoch, then memif reads
  // the flag): one of the two must see the other's store. membarrier makes
  // every thread of the process execute a full barrier, so the poller's side
  // needs none (MEMBARRIER_CMD_PRIVATE_EXPEDITED, membarrier(2)). Without
  // the registration each poller's Enter is a locked RMW, and a locked RMW
  // here completes the pattern. (Once registered, the call does not fail:
  // its only errors are for an unregistered process or a bad command.)
  if (!g_asymmetric.load(std::memory_order_relaxed) ||
      syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
    g_barrier_word.fetch_add(1, std::memory_order_seq_cst);
  }
  const auto deadline = std::chrono::steady_clock::now() + kUnmapWaitLimit;
  for (BurstFence& fence : g_fences) {
    const uint64_t seen = fence.epoch();
    if ((seen & 1) == 0) continue;
    g_bursts_waited.fetch_add(1, std::memory_order_relaxed);
    while (fence.epoch() == seen) {
      if (std::chrono::steady_clock::now() > deadline) {
        g_waits_given_up.fetch_add(1, std::memory_order_relaxed);
        UROCE_LOG(WARNING, kPmd, "memif: a burst did not end within 1 s; its port's rings are unmapped anyway\n");
        return;
      }
      sched_yield();  // the poller may be waiting for this CPU
    }
  }
}

// What net_memif calls instead of munmap once the guard is installed.
int GuardedMunmap(void* addr, size_t length) {
  if (rte_thread_is_intr()) WaitForBursts();
  return munmap(addr, length);
}

Status Install() {
  UROCE_RETURN_IF_ERROR(RedirectMemifImport("munmap", reinterpret_cast<void*>(&GuardedMunmap)));
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
    g_asymmetric.store(true, std::memory_order_relaxed);
    for (BurstFence& fence : g_fences) MemifUnmapGuard::SetAsymmetric(fence);
  }
  return Status::Ok();
}

}  // namespace

Status InstallMemifUnmapGuard() {
  static std::once_flag once;
  static Status result = Status::Ok();
  std::call_once(once, [] {
    result = Install();
    if (!result.ok()) {
      UROCE_LOG(WARNING, kPmd, "memif ports run unguarded against their peer's disconnect: %s\n",
                result.ToString().c_str());
    }
  });
  return result;
}

BurstFence* MemifBurstFence(uint16_t port_id) {
  rte_eth_dev_info info;
  if (port_id >= RTE_MAX_ETHPORTS || rte_eth_dev_info_get(port_id, &info) != 0 || info.driver_name == nullptr ||
      std::strcmp(info.driver_name, "net_memif") != 0) {
    return nullptr;
  }
  (void)InstallMemifUnmapGuard();
  return &g_fences[port_id];
}

MemifUnmapGuardCounters ReadMemifUnmapGuardCounters() {
  return {g_unmaps_seen.load(std::memory_order_relaxed), g_bursts_waited.load(std::memory_order_relaxed),
          g_waits_given_up.load(std::memory_order_relaxed)};
}

}  // namespace uroce::pmd
