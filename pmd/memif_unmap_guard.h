// Keeps DPDK's net_memif from unmapping a port's shared memory under a burst.
//
// DPDK 22.11's memif handles its control channel on EAL's interrupt thread.
// When the peer goes away (it closed its port, or died), that thread runs
// memif_disconnect on the port: it clears the port's CONNECTED flag with a
// plain store, closes the queues' event descriptors, then munmaps the shared
// regions (the rings and the packet buffers). eth_memif_rx and eth_memif_tx
// read the flag once, on entry, and take no lock; a burst that passed the
// check just before the flag was cleared can still be reading a ring or
// copying a frame when its region is unmapped, and the poller dies of
// SIGSEGV. Nothing in the driver signals the teardown (memif raises no link
// state event).
//
// The guard takes the unmap's side. Once installed, memif's own calls to
// munmap go through a wrapper (its import of munmap is pointed there,
// pmd/memif_import.h). On the interrupt thread, the wrapper first waits for
// every burst that is under way on a memif port of the process to end (it
// cannot tell which port a region belongs to; bursts last microseconds); a
// burst that begins after that reads the flag cleared and returns at once.
// Pollers mark their bursts with BurstFence. A teardown run elsewhere
// (rte_eth_dev_stop on the port's own thread) is not waited for: nothing
// polls the port then.
//
// Threads: BurstFence::Enter/Leave on the port's one polling thread at a
// time; the rest on the control path.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/status.h"

namespace uroce::pmd {

// One memif port's bursts, as the unmap sees them: an epoch that is odd while
// a burst runs. Written by one thread at a time (the port's poller), read by
// the interrupt thread.
class alignas(64) BurstFence {
 public:
  // Marks a burst as begun, ordered before the driver's read of its flag:
  // with membarrier(2) registered the interrupt thread's membarrier supplies
  // the full barrier, so this is a plain store; otherwise a locked
  // read-modify-write here does.
  void Enter() {
    if (asymmetric_.load(std::memory_order_relaxed)) {
      epoch_.store(epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      epoch_.fetch_add(1, std::memory_order_seq_cst);
    }
  }
  // The burst's reads and writes of the regions happen before this store.
  void Leave() { epoch_.store(epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  friend class MemifUnmapGuard;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> asymmetric_{false};
};

// Marks one burst for as long as it is in scope; `fence` may be null (a port
// that is not memif).
class BurstScope {
 public:
  explicit BurstScope(BurstFence* fence) : fence_(fence) {
    if (fence_ != nullptr) fence_->Enter();
  }
  ~BurstScope() {
    if (fence_ != nullptr) fence_->Leave();
  }
  BurstScope(const BurstScope&) = delete;
  BurstScope& operator=(const BurstScope&) = delete;

 private:
  BurstFence* const fence_;
};

// The fence of a memif port, installing the guard the first time; null for
// any other port. Control path.
BurstFence* MemifBurstFence(uint16_t port_id);

// Points memif's import of munmap at the wrapper. Idempotent; the first
// call's result is kept. Fails when net_memif is not loaded, or when its
// import cannot be rewritten (then the port runs unguarded, as before).
Status InstallMemifUnmapGuard();

// How often the wrapper waited for a burst, and how often it gave up after
// kUnmapWaitLimit (a poller stopped inside a burst). For tests and stats.
struct MemifUnmapGuardCounters {
  uint64_t unmaps_seen = 0;     // memif munmaps on the interrupt thread
  uint64_t bursts_waited = 0;   // bursts those unmaps waited for
  uint64_t waits_given_up = 0;  // waits that reached the limit
};
MemifUnmapGuardCounters ReadMemifUnmapGuardCounters();

}  // namespace uroce::pmd
