// Protection domains and memory regions (IBTA vol. 1, 10.6 "Memory
// management"). A key is an index into the table plus an 8-bit tag that
// changes on every registration, so a stale key (its region deregistered, the
// slot reused) fails the check instead of reaching someone else's memory.
// Tags start from a random value per table, so keys cannot be guessed from the
// QPN or from the order of registration.
//
// Threads: Register/Deregister are control-path calls (any thread, serialized
// by the owner, the Engine); the Check* functions are the engine's fast path
// and read a published entry without locks.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace uroce::transport {

using PdHandle = uint32_t;

struct MrKeys {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// Why an access was refused; each maps to a different verbs error.
enum class MrCheck : uint8_t {
  kOk = 0,
  kBadKey,     // no such region, or a stale key
  kWrongPd,    // region of another protection domain
  kNoAccess,   // the region was not registered with the needed access
  kOutOfRange, // [addr, addr+len) is not inside the region
};

class MemoryRegionTable {
 public:
  explicit MemoryRegionTable(uint32_t capacity = 1u << 16);

  // Control path. `iova` is the address remote peers use for byte 0 of the
  // region (ibv_reg_mr_iova2); ibv_reg_mr passes iova == addr. With
  // IBV_ACCESS_ZERO_BASED in `access` (device memory, ibv_reg_dm_mr(3)),
  // local SGE addresses are in the iova space too.
  StatusOr<MrKeys> Register(PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access);
  Status Deregister(uint32_t lkey);
  // ibv_rereg_mr(3): the region of `lkey` gets a new PD, range and access,
  // and keeps its keys (as rxe's and mlx5's re-registration do: programs go
  // on using the keys they exchanged). The caller holds the engine between
  // polls (the fast path reads entries without locks).
  Status Reregister(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova, int access);

  // Engine thread. On kOk, *host points at the first byte of the range.
  // Local access (an SGE): `lkey`, a host address and length.
  MrCheck CheckLocal(uint32_t lkey, PdHandle pd, uint64_t addr, uint64_t length, int needed_access,
                     uint8_t** host) const;
  // Remote access (RETH, AtomicETH): `rkey`, a virtual address in the
  // region's iova space and a length.
  MrCheck CheckRemote(uint32_t rkey, PdHandle pd, uint64_t va, uint64_t length, int needed_access,
                      uint8_t** host) const;

  uint32_t registered() const;
  // Control path: regions registered in `pd` (ibv_dealloc_pd's EBUSY check).
  uint32_t RegisteredInPd(PdHandle pd);

 private:
  struct Entry {
    // key == 0 means free. Published with release after the other fields.
    std::atomic<uint32_t> key{0};
    PdHandle pd = 0;
    uint8_t* addr = nullptr;
    uint64_t length = 0;
    uint64_t iova = 0;
    int access = 0;
  };
  MrCheck Check(uint32_t key, PdHandle pd, uint64_t va, uint64_t length, int needed_access, bool remote,
                uint8_t** host) const;

  std::unique_ptr<Entry[]> entries_;
  const uint32_t capacity_;
  std::mutex control_mutex_;  // serializes Register/Deregister (control path only)
  std::vector<uint32_t> free_slots_;
  std::vector<uint8_t> next_tag_;
  uint32_t registered_ = 0;
};

}  // namespace uroce::transport
