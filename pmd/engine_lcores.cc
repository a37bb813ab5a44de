#include "pmd/engine_lcores.h"

#include <rte_launch.h>
#include <rte_lcore.h>

#include <string>

namespace uroce::pmd {

int EngineLcores::Run(void* arg) {
  Loop* loop = static_cast<Loop*>(arg);
  uint64_t rounds = 0;
  // The stop flag is read once per round: an acquire load on a line nobody
  // writes until shutdown stays in this core's cache.
  while (!loop->stop->load(std::memory_order_acquire)) {
    for (transport::Engine* e : loop->engines) e->Poll();
    loop->rounds.store(++rounds, std::memory_order_relaxed);
  }
  loop->finished.store(true, std::memory_order_release);
  return 0;
}

Status EngineLcores::Launch(const std::vector<std::pair<unsigned, transport::Engine*>>& assignments) {
  if (!loops_.empty()) return FailedPrecondition("engine lcores are already running");
  for (const auto& [lcore, engine] : assignments) {
    Loop* loop = nullptr;
    for (auto& l : loops_) {
      if (l->lcore == lcore) loop = l.get();
    }
    if (loop == nullptr) {
      if (lcore >= RTE_MAX_LCORE || !rte_lcore_is_enabled(lcore)) {
        loops_.clear();
        return InvalidArgument("lcore " + std::to_string(lcore) + " is not enabled in EAL (see [eal] lcores)");
      }
      if (lcore == rte_get_main_lcore()) {
        loops_.clear();
        return InvalidArgument("lcore " + std::to_string(lcore) + " is the main lcore; engines need worker lcores");
      }
      loops_.push_back(std::make_unique<Loop>());
      loop = loops_.back().get();
      loop->lcore = lcore;
      loop->stop = &stop_;
    }
    loop->engines.push_back(engine);
  }
  stop_.store(false, std::memory_order_release);
  for (size_t i = 0; i < loops_.size(); ++i) {
    const int ret = rte_eal_remote_launch(&EngineLcores::Run, loops_[i].get(), loops_[i]->lcore);
    if (ret != 0) {
      // Stop what started; the rest never ran.
      stop_.store(true, std::memory_order_release);
      for (size_t k = 0; k < i; ++k) rte_eal_wait_lcore(loops_[k]->lcore);
      const unsigned lcore = loops_[i]->lcore;
      loops_.clear();
      return Unavailable("rte_eal_remote_launch on lcore " + std::to_string(lcore) + " failed (" +
                         (ret == -EBUSY ? "busy" : std::to_string(ret)) + ")");
    }
  }
  return Status::Ok();
}

void EngineLcores::Stop() {
  if (loops_.empty()) return;
  stop_.store(true, std::memory_order_release);
  for (auto& loop : loops_) {
    rte_eal_wait_lcore(loop->lcore);
    while (!loop->finished.load(std::memory_order_acquire)) {
    }
  }
  loops_.clear();
}

uint64_t EngineLcores::rounds() const {
  uint64_t sum = 0;
  for (const auto& loop : loops_) sum += loop->rounds.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace uroce::pmd
