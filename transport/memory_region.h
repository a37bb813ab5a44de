// Protection domains, memory regions and memory windows (IBTA vol. 1, 10.6
// "Memory management"; windows 10.6.7). A key is an index into the table plus an 8-bit tag that
// changes on every registration, so a stale key (its region deregistered, the
// slot reused) fails the check instead of reaching someone else's memory.
// Tags start from a random value per table, so keys cannot be guessed from the
// QPN or from the order of registration.
//
// Memory windows share the table (and so the key space) with regions: a
// window's rkey is its index and an 8-bit key the binder chooses (type 2) or
// the library steps (type 1). A window grants remote access to part of a
// region: every access through it is checked like a region's (key, state,
// PD or QP, access, bounds) and then against its region, which must still be
// the one it was bound to, so a window never outlives the memory behind it.
//
// Threads: Register/Deregister/AllocateWindow/DeallocateWindow are
// control-path calls (any thread, serialized by the owner, the Engine; the
// ones that take something away run between polls); the Check* functions are
// the engine's fast path and read a published entry without locks;
// BindWindow/InvalidateWindow run on the engine thread (work requests and
// the invalidate of a received SEND), the only writer of a window's binding.
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

// Why an access was refused; each maps to a different verbs error. kOk and
// kOkOnDemand grant it.
enum class MrCheck : uint8_t {
  kOk = 0,
  // Granted through an implicit on-demand region (ibv_reg_mr(3) with
  // IBV_ACCESS_ON_DEMAND over the whole address space, addr NULL, length
  // SIZE_MAX): the range may be unmapped, or read-only, at any moment, so
  // it is reached only through the fault-free copies of on_demand_memory.h
  // (MrRead/MrWrite/OnDemandAtomic), never dereferenced. A caller that only
  // compares with kOk refuses it: safe by default.
  kOkOnDemand,
  kBadKey,     // no such region, or a stale key
  kWrongPd,    // region of another protection domain
  kNoAccess,   // the region was not registered with the needed access
  kOutOfRange, // [addr, addr+len) is not inside the region
};

inline bool MrGranted(MrCheck c) { return c == MrCheck::kOk || c == MrCheck::kOkOnDemand; }

class MemoryRegionTable {
 public:
  explicit MemoryRegionTable(uint32_t capacity = 1u << 16);

  // Control path. `iova` is the address remote peers use for byte 0 of the
  // region (ibv_reg_mr_iova2); ibv_reg_mr passes iova == addr. With
  // IBV_ACCESS_ZERO_BASED in `access` (device memory, ibv_reg_dm_mr(3)),
  // local SGE addresses are in the iova space too. With
  // IBV_ACCESS_ON_DEMAND, addr nullptr and length UINT64_MAX (SIZE_MAX): an
  // implicit on-demand region, the whole address space at iova 0, whose
  // accesses check as kOkOnDemand (refused with NotSupported where the
  // fault-free copies are not available, OnDemandMemoryAvailable()).
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
  // Remote access (RETH, AtomicETH) arriving on QP `qpn`: `rkey`, a
  // virtual address in the region's iova space and a length. A window's rkey
  // works only while it is bound, and a type 2 window only on the QP it was
  // bound through (IBTA 10.6.7.2.3), a type 1 window in its PD.
  MrCheck CheckRemote(uint32_t rkey, PdHandle pd, uint64_t va, uint64_t length, int needed_access,
                      uint8_t** host, uint32_t qpn) const;

  // ---- Memory windows ----
  // Control path: a window of `type` (1 or 2) in `pd`, unbound; its rkey.
  StatusOr<uint32_t> AllocateWindow(PdHandle pd, int type);
  // Control path, between polls: the window of `rkey`'s index goes; its
  // rkey no longer grants anything.
  Status DeallocateWindow(uint32_t rkey);
  // Control path, between polls: type 2 windows bound through QP `qpn` are
  // invalidated (the QP is destroyed; its QPN may come back).
  void InvalidateWindowsOfQp(uint32_t qpn);
  // Engine thread: a bind work request (IBTA 10.6.7.2) on a QP of `qp_pd`
  // and `qpn`, for the window whose rkey has the index of `window_rkey`. The
  // new rkey keeps the window's index and takes the low 8 bits of
  // `new_rkey` (as rxe and mlx5). `mr_lkey` 0 or `length` 0 unbinds a type 1
  // window. False: the bind is refused (IBV_WC_MW_BIND_ERR) and nothing
  // changed.
  bool BindWindow(uint32_t window_rkey, PdHandle qp_pd, uint32_t qpn, uint32_t new_rkey, uint32_t mr_lkey,
                  uint64_t addr, uint64_t length, int access, uint32_t* bound_rkey);
  // Engine thread: LOCAL_INV (`remote` false) or the IETH of a SEND with
  // invalidate (`remote` true, IBTA 9.4.1.4 / 10.6.7.2.5) of `rkey`: only a
  // bound type 2 window of `pd` with exactly that rkey, and for a remote
  // invalidate one bound through QP `qpn`. False: refused, nothing changed.
  bool InvalidateWindow(uint32_t rkey, PdHandle pd, uint32_t qpn, bool remote);

  uint32_t registered() const;
  // Control path: regions registered in `pd` (ibv_dealloc_pd's EBUSY check).
  uint32_t RegisteredInPd(PdHandle pd);

 private:
  enum class Kind : uint8_t { kRegion, kWindow1, kWindow2 };
  struct Entry {
    // key == 0 means free. Published with release after the other fields.
    // A window's key is its current rkey (it changes with every bind).
    std::atomic<uint32_t> key{0};
    Kind kind = Kind::kRegion;  // set before the key is published, fixed until freed
    PdHandle pd = 0;
    uint8_t* addr = nullptr;  // regions only
    uint64_t length = 0;
    uint64_t iova = 0;  // a bound window: its first address, in its region's iova space
    int access = 0;
    bool implicit = false;  // regions: implicit on-demand (the whole address space)
    // Windows: bound (or else it grants nothing), the region's key, and for
    // type 2 the QP it was bound through.
    bool bound = false;
    uint32_t region_key = 0;
    uint32_t qpn = 0;
  };
  MrCheck Check(uint32_t key, PdHandle pd, uint64_t va, uint64_t length, int needed_access, bool remote,
                uint8_t** host, uint32_t qpn) const;
  // A slot and a fresh key for it; control_mutex_ held.
  StatusOr<uint32_t> TakeSlot();
  // The registered region whose key is `lkey`, or null; control_mutex_ held.
  Entry* RegionLocked(uint32_t lkey);

  std::unique_ptr<Entry[]> entries_;
  const uint32_t capacity_;
  std::mutex control_mutex_;  // serializes Register/Deregister (control path only)
  std::vector<uint32_t> free_slots_;
  std::vector<uint8_t> next_tag_;
  uint32_t registered_ = 0;
};

}  // namespace uroce::transport
