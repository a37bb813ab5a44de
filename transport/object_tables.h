// The engine's object tables: PDs, CQs, SRQs, QPs (their storage), address
// handles, the neighbour table and the QPN generator. Device's control calls
// (device.cc, modify_qp.cc) own them under Device::control_mutex_;
// the engine thread reads only the AH table (UD sends, Requester), which the
// control path changes while it holds the progress token.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "transport/completion_queue.h"
#include "transport/engine_types.h"
#include "transport/headers.h"
#include "transport/memory_region.h"
#include "transport/queue_pair.h"
#include "transport/shared_receive_queue.h"

namespace uroce::transport {

struct ObjectTables {
  // `random_seed`: EngineConfig::random_seed (0: from the system's entropy).
  explicit ObjectTables(uint64_t random_seed);
  ObjectTables(const ObjectTables&) = delete;
  ObjectTables& operator=(const ObjectTables&) = delete;

  // `pd` was allocated and not freed.
  bool PdValid(PdHandle pd) const { return pd != 0 && pd < pd_in_use.size() && pd_in_use[pd]; }

  static constexpr uint32_t kMaxPds = 1u << 20;
  static constexpr size_t kMaxNeighbors = 4096;

  uint32_t next_pd = 1;
  std::vector<bool> pd_in_use;
  uint32_t next_xrcd = 1;
  std::vector<uint32_t> xrcds;  // XRC domains in use
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<std::unique_ptr<SharedReceiveQueue>> srqs;
  std::vector<std::unique_ptr<QueuePair>> qp_storage;
  std::vector<AddressHandle> ahs;
  std::vector<std::pair<Gid, MacAddress>> neighbors;
  std::mt19937_64 random;  // QPNs
};

}  // namespace uroce::transport
