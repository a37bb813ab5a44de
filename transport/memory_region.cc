#include "transport/memory_region.h"

#include <random>

#include "transport/on_demand_memory.h"

namespace uroce::transport {
namespace {

constexpr uint32_t kTagBits = 8;

// Verbs rule (ibv_reg_mr(3)): remote write or remote atomic access needs
// local write access too.
bool AccessIsValid(int access) {
  const int remote_writes = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if ((access & remote_writes) && !(access & IBV_ACCESS_LOCAL_WRITE)) return false;
  const int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_ZERO_BASED |
                    IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND;
  return (access & ~known) == 0;
}

// ibv_reg_mr(3)'s implicit on-demand region: the whole address space.
bool IsImplicit(const void* addr, uint64_t length, int access) {
  return (access & IBV_ACCESS_ON_DEMAND) != 0 && addr == nullptr && length == UINT64_MAX;
}

// What Register and Reregister refuse before they touch the table.
Status CheckRegistration(const void* addr, uint64_t length, uint64_t iova, int access) {
  if (!AccessIsValid(access)) return InvalidArgument("invalid MR access flags " + std::to_string(access));
  if (IsImplicit(addr, length, access)) {
    // Zero-based makes no sense for it, nor does a window over it (mlx5
    // refuses both too); and it needs the fault-free copies.
    if ((access & (IBV_ACCESS_ZERO_BASED | IBV_ACCESS_MW_BIND)) != 0 || iova != 0) {
      return InvalidArgument("implicit on-demand MR: zero-based, MW bind or an iova");
    }
    if (!OnDemandMemoryAvailable()) {
      return NotSupported("implicit on-demand MR: process_vm_readv/writev or futex not allowed here");
    }
    return Status::Ok();
  }
  if (addr == nullptr && length != 0) return InvalidArgument("MR address is NULL");
  if (length > (uint64_t(1) << 47)) return InvalidArgument("MR length too large");
  if (iova + length < iova) return InvalidArgument("MR iova range wraps");
  return Status::Ok();
}

}  // namespace

MemoryRegionTable::MemoryRegionTable(uint32_t capacity)
    : entries_(new Entry[capacity]), capacity_(capacity), next_tag_(capacity) {
  std::random_device random;
  std::mt19937 gen(random());
  for (uint32_t i = 0; i < capacity; ++i) next_tag_[i] = static_cast<uint8_t>(gen());
  free_slots_.reserve(capacity);
  // Hand out low indices first; slot 0 is never used so that key 0 is invalid.
  for (uint32_t i = capacity; i-- > 1;) free_slots_.push_back(i);
}

StatusOr<uint32_t> MemoryRegionTable::TakeSlot() {
  if (free_slots_.empty()) return ResourceExhausted("memory region table full");
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  const uint8_t tag = next_tag_[index]++;
  return (index << kTagBits) | tag;  // index >= 1: never 0
}

StatusOr<MrKeys> MemoryRegionTable::Register(PdHandle pd, void* addr, uint64_t length, uint64_t iova,
                                             int access) {
  if (Status s = CheckRegistration(addr, length, iova, access); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto slot = TakeSlot();
  if (!slot.ok()) return slot.status();
  const uint32_t key = *slot;
  Entry& e = entries_[key >> kTagBits];
  e.kind = Kind::kRegion;
  e.bound = false;
  e.pd = pd;
  e.addr = static_cast<uint8_t*>(addr);
  e.length = length;
  e.iova = iova;
  e.access = access;
  e.implicit = IsImplicit(addr, length, access);
  e.key.store(key, std::memory_order_release);
  ++registered_;
  return MrKeys{key, key};
}

MemoryRegionTable::Entry* MemoryRegionTable::RegionLocked(uint32_t lkey) {
  const uint32_t index = lkey >> kTagBits;
  if (index == 0 || index >= capacity_) return nullptr;
  Entry& e = entries_[index];
  if (e.key.load(std::memory_order_relaxed) != lkey || e.kind != Kind::kRegion) return nullptr;
  return &e;
}

Status MemoryRegionTable::Deregister(uint32_t lkey) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  Entry* e = RegionLocked(lkey);
  if (e == nullptr) return InvalidArgument("no MR with key " + std::to_string(lkey));
  e->key.store(0, std::memory_order_release);
  free_slots_.push_back(lkey >> kTagBits);
  --registered_;
  return Status::Ok();
}

Status MemoryRegionTable::Reregister(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova,
                                     int access) {
  if (Status s = CheckRegistration(addr, length, iova, access); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(control_mutex_);
  Entry* region = RegionLocked(lkey);
  if (region == nullptr) return InvalidArgument("no MR with key " + std::to_string(lkey));
  Entry& e = *region;
  // An implicit region stays what it is (the engine reads `implicit`
  // without locks; a region turning explicit under a running access would
  // be dereferenced): re-registering one, or into one, is refused.
  if (e.implicit || IsImplicit(addr, length, access)) {
    return InvalidArgument("implicit on-demand MR cannot be re-registered");
  }
  e.pd = pd;
  e.addr = static_cast<uint8_t*>(addr);
  e.length = length;
  e.iova = iova;
  e.access = access;
  e.key.store(lkey, std::memory_order_release);  // publishes the new fields
  return Status::Ok();
}

MrCheck MemoryRegionTable::Check(uint32_t key, PdHandle pd, uint64_t va, uint64_t length, int needed_access,
                                 bool remote, uint8_t** host, uint32_t qpn) const {
  const uint32_t index = key >> kTagBits;
  if (index == 0 || index >= capacity_) return MrCheck::kBadKey;
  const Entry& e = entries_[index];
  if (e.key.load(std::memory_order_acquire) != key) return MrCheck::kBadKey;
  if (e.kind != Kind::kRegion) {
    // A window: remote access only (an SGE names regions, IBTA 10.6.3.1),
    // and only while bound.
    if (!remote || !e.bound) return MrCheck::kBadKey;
    // Type 1 windows serve the QPs of their PD; a type 2 window only the QP
    // it was bound through (IBTA 10.6.7.2.3, C10-72).
    if (e.kind == Kind::kWindow1 ? e.pd != pd : e.qpn != qpn) return MrCheck::kWrongPd;
    if ((e.access & needed_access) != needed_access) return MrCheck::kNoAccess;
    if (va < e.iova || length > e.length || va - e.iova > e.length - length) return MrCheck::kOutOfRange;
    // And its region, which must still be the one it was bound to (not
    // deregistered, slot not reused) and still cover the range (it may have
    // been re-registered smaller).
    const uint32_t region_index = e.region_key >> kTagBits;
    if (region_index == 0 || region_index >= capacity_) return MrCheck::kBadKey;
    const Entry& r = entries_[region_index];
    if (r.key.load(std::memory_order_acquire) != e.region_key || r.kind != Kind::kRegion) return MrCheck::kBadKey;
    if (va < r.iova || length > r.length || va - r.iova > r.length - length) return MrCheck::kOutOfRange;
    *host = r.addr + (va - r.iova);
    return r.implicit ? MrCheck::kOkOnDemand : MrCheck::kOk;  // BindWindow refuses implicit regions
  }
  if (e.pd != pd) return MrCheck::kWrongPd;
  if ((e.access & needed_access) != needed_access) return MrCheck::kNoAccess;
  if (e.implicit) {
    // The whole address space, local and remote alike (iova 0): only the
    // range must not wrap. Whether it is mapped is for the fault-free
    // copies to find out.
    if (length != 0 && va > UINT64_MAX - length + 1) return MrCheck::kOutOfRange;
    *host = reinterpret_cast<uint8_t*>(va);
    return MrCheck::kOkOnDemand;
  }
  // Local addresses are host addresses; remote ones live in the iova space.
  // A zero-based region (ibv_reg_dm_mr(3), IBV_ACCESS_ZERO_BASED) has no
  // host address the program knows: its SGEs, like its peers, address it by
  // offset, so both use the iova space.
  const bool by_iova = remote || (e.access & IBV_ACCESS_ZERO_BASED) != 0;
  const uint64_t base = by_iova ? e.iova : reinterpret_cast<uint64_t>(e.addr);
  if (va < base || length > e.length || va - base > e.length - length) return MrCheck::kOutOfRange;
  *host = e.addr + (va - base);
  return MrCheck::kOk;
}

MrCheck MemoryRegionTable::CheckLocal(uint32_t lkey, PdHandle pd, uint64_t addr, uint64_t length,
                                      int needed_access, uint8_t** host) const {
  return Check(lkey, pd, addr, length, needed_access, /*remote=*/false, host, 0);
}

MrCheck MemoryRegionTable::CheckRemote(uint32_t rkey, PdHandle pd, uint64_t va, uint64_t length,
                                       int needed_access, uint8_t** host, uint32_t qpn) const {
  return Check(rkey, pd, va, length, needed_access, /*remote=*/true, host, qpn);
}

StatusOr<uint32_t> MemoryRegionTable::AllocateWindow(PdHandle pd, int type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return InvalidArgument("memory window type");
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto slot = TakeSlot();
  if (!slot.ok()) return slot.status();
  Entry& e = entries_[*slot >> kTagBits];
  e.kind = type == IBV_MW_TYPE_1 ? Kind::kWindow1 : Kind::kWindow2;
  e.pd = pd;
  e.addr = nullptr;
  e.length = 0;
  e.iova = 0;
  e.access = 0;
  e.implicit = false;
  e.bound = false;
  e.region_key = 0;
  e.qpn = 0;
  e.key.store(*slot, std::memory_order_release);
  ++registered_;
  return *slot;
}

Status MemoryRegionTable::DeallocateWindow(uint32_t rkey) {
  const uint32_t index = rkey >> kTagBits;
  if (index == 0 || index >= capacity_) return InvalidArgument("no memory window");
  std::lock_guard<std::mutex> lock(control_mutex_);
  Entry& e = entries_[index];
  if (e.key.load(std::memory_order_relaxed) == 0 || e.kind == Kind::kRegion) {
    return InvalidArgument("no memory window");
  }
  e.bound = false;
  e.key.store(0, std::memory_order_release);
  free_slots_.push_back(index);
  --registered_;
  return Status::Ok();
}

void MemoryRegionTable::InvalidateWindowsOfQp(uint32_t qpn) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (uint32_t i = 1; i < capacity_; ++i) {
    Entry& e = entries_[i];
    if (e.kind == Kind::kWindow2 && e.bound && e.qpn == qpn && e.key.load(std::memory_order_relaxed) != 0) {
      e.bound = false;
    }
  }
}

bool MemoryRegionTable::BindWindow(uint32_t window_rkey, PdHandle qp_pd, uint32_t qpn, uint32_t new_rkey,
                                   uint32_t mr_lkey, uint64_t addr, uint64_t length, int access,
                                   uint32_t* bound_rkey) {
  const uint32_t index = window_rkey >> kTagBits;
  if (index == 0 || index >= capacity_) return false;
  Entry& e = entries_[index];
  const uint32_t current = e.key.load(std::memory_order_acquire);
  if (current == 0 || e.kind == Kind::kRegion) return false;
  // The QP, the window and the region share a PD (IBTA C10-72).
  if (e.pd != qp_pd) return false;
  const bool type2 = e.kind == Kind::kWindow2;
  const bool unbind = mr_lkey == 0 || length == 0;
  // A type 2 window is bound only when free (o10-37.2.30), and never to
  // nothing: it is invalidated instead (o10-37.2.40).
  if (type2 && (e.bound || unbind)) return false;
  const int window_access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  // IBV_ACCESS_LOCAL_WRITE means nothing for a window and is ignored
  // (rdma-core's tests pass it); zero-based windows are not offered.
  if ((access & ~(window_access | IBV_ACCESS_LOCAL_WRITE)) != 0) return false;
  if (!unbind) {
    const uint32_t region_index = mr_lkey >> kTagBits;
    if (region_index == 0 || region_index >= capacity_) return false;
    const Entry& r = entries_[region_index];
    if (r.key.load(std::memory_order_acquire) != mr_lkey || r.kind != Kind::kRegion || r.pd != qp_pd) return false;
    // The region allows binding, is not zero-based (as rxe), and allows
    // local write if the window grants remote write or atomics (C10-74).
    if ((r.access & IBV_ACCESS_MW_BIND) == 0 || (r.access & IBV_ACCESS_ZERO_BASED) != 0 || r.implicit) return false;
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
        (r.access & IBV_ACCESS_LOCAL_WRITE) == 0) {
      return false;
    }
    // Inside the region (C10-75).
    if (addr < r.iova || length > r.length || addr - r.iova > r.length - length) return false;
  }
  const uint32_t tag_mask = (1u << kTagBits) - 1;
  const uint32_t rkey = (current & ~tag_mask) | (new_rkey & tag_mask);
  e.bound = !unbind;
  e.region_key = unbind ? 0 : mr_lkey;
  e.iova = unbind ? 0 : addr;
  e.length = unbind ? 0 : length;
  e.access = unbind ? 0 : (access & window_access);
  e.qpn = type2 ? qpn : 0;
  e.key.store(rkey, std::memory_order_release);
  *bound_rkey = rkey;
  return true;
}

bool MemoryRegionTable::InvalidateWindow(uint32_t rkey, PdHandle pd, uint32_t qpn, bool remote) {
  const uint32_t index = rkey >> kTagBits;
  if (index == 0 || index >= capacity_) return false;
  Entry& e = entries_[index];
  // Type 1 windows are unbound by a zero-length bind; regions are not
  // invalidatable (uroce has no fast-registration MRs).
  if (e.key.load(std::memory_order_acquire) != rkey || e.kind != Kind::kWindow2 || !e.bound) return false;
  if (e.pd != pd || (remote && e.qpn != qpn)) return false;
  e.bound = false;
  return true;
}

uint32_t MemoryRegionTable::registered() const { return registered_; }

uint32_t MemoryRegionTable::RegisteredInPd(PdHandle pd) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  uint32_t count = 0;
  for (uint32_t i = 1; i < capacity_ && count < registered_; ++i) {
    if (entries_[i].key.load(std::memory_order_relaxed) != 0 && entries_[i].pd == pd) ++count;
  }
  return count;
}

}  // namespace uroce::transport
