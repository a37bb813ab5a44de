// For fuzz targets: EAL started once per process (no hugepages, errors only
// in the log) and a packet pool of the target's own. A fuzz target has no
// way to report a failed set-up, so it aborts, which libFuzzer and the
// replay driver (//common:fuzz_replay_main) both show as a crash of the
// set-up, never of an input.
#pragma once

#include <cstdlib>
#include <utility>

#include "pmd/eal.h"
#include "pmd/mempool.h"

namespace uroce::pmd {

// Starts EAL as `program_name` and creates `pool`; aborts if either fails.
// Call it from the one-time initializer of the target's world.
inline MempoolPtr StartFuzzEalWithPool(const char* program_name, const PktPoolConfig& pool) {
  EalConfig eal;
  eal.program_name = program_name;
  eal.log_level = "*:error";
  if (!StartEal(eal).ok()) abort();
  auto created = CreatePktPool(pool);
  if (!created.ok()) abort();
  return std::move(created).value();
}

}  // namespace uroce::pmd
