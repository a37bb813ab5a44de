// Engines on pinned EAL lcores (engine progress mode, FI_PROGRESS_AUTO): one
// loop per lcore, launched with rte_eal_remote_launch, polls its engines (RX
// burst, the QPs' send rings, timers, TX) until told to stop, like a NIC that
// never sleeps. Several engines may share an lcore; an engine is polled by
// one lcore only.
//
// Control path: Launch and Stop from the main lcore.
#pragma once

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/engine.h"

namespace uroce::pmd {

class EngineLcores {
 public:
  EngineLcores() = default;
  ~EngineLcores() { Stop(); }
  EngineLcores(const EngineLcores&) = delete;
  EngineLcores& operator=(const EngineLcores&) = delete;

  // (lcore, engine) pairs. Each lcore must be an EAL worker lcore that is
  // idle (not the main lcore, not running anything).
  Status Launch(const std::vector<std::pair<unsigned, transport::Engine*>>& assignments);

  // Asks every loop to finish its current round and waits for them
  // (rte_eal_wait_lcore). After Stop, no engine is polled by an lcore.
  void Stop();

  bool running() const { return !loops_.empty(); }
  // Poll rounds so far, over all lcores (for tests and telemetry).
  uint64_t rounds() const;

 private:
  struct Loop {
    unsigned lcore = 0;
    std::vector<transport::Engine*> engines;
    const std::atomic<bool>* stop = nullptr;
    std::atomic<uint64_t> rounds{0};
    // Set (release) as the loop returns; Stop reads it (acquire) after
    // rte_eal_wait_lcore, so the hand-back is visible to tools that do not
    // see inside DPDK (ThreadSanitizer).
    std::atomic<bool> finished{false};
  };
  static int Run(void* arg);

  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Loop>> loops_;
};

}  // namespace uroce::pmd
