#include "transport/memory_region.h"

#include <random>

namespace uroce::transport {
namespace {

constexpr uint32_t kTagBits = 8;

// Verbs rule (ibv_reg_mr(3)): remote write or remote atomic access needs
// local write access too.
bool AccessIsValid(int access) {
  const int remote_writes = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if ((access & remote_writes) && !(access & IBV_ACCESS_LOCAL_WRITE)) return false;
  const int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_ZERO_BASED;
  return (access & ~known) == 0;
}

// What Register and Reregister refuse before they touch the table.
Status CheckRegistration(const void* addr, uint64_t length, uint64_t iova, int access) {
  if (!AccessIsValid(access)) return InvalidArgument("invalid MR access flags " + std::to_string(access));
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

StatusOr<MrKeys> MemoryRegionTable::Register(PdHandle pd, void* addr, uint64_t length, uint64_t iova,
                                             int access) {
  if (Status s = CheckRegistration(addr, length, iova, access); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (free_slots_.empty()) return ResourceExhausted("memory region table full");
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  uint8_t tag = next_tag_[index]++;
  if (tag == 0 && index == 0) tag = next_tag_[index]++;
  const uint32_t key = (index << kTagBits) | tag;
  Entry& e = entries_[index];
  e.pd = pd;
  e.addr = static_cast<uint8_t*>(addr);
  e.length = length;
  e.iova = iova;
  e.access = access;
  e.key.store(key, std::memory_order_release);
  ++registered_;
  return MrKeys{key, key};
}

Status MemoryRegionTable::Deregister(uint32_t lkey) {
  const uint32_t index = lkey >> kTagBits;
  if (index == 0 || index >= capacity_) return InvalidArgument("no MR with key " + std::to_string(lkey));
  std::lock_guard<std::mutex> lock(control_mutex_);
  Entry& e = entries_[index];
  if (e.key.load(std::memory_order_relaxed) != lkey) {
    return InvalidArgument("no MR with key " + std::to_string(lkey));
  }
  e.key.store(0, std::memory_order_release);
  free_slots_.push_back(index);
  --registered_;
  return Status::Ok();
}

Status MemoryRegionTable::Reregister(uint32_t lkey, PdHandle pd, void* addr, uint64_t length, uint64_t iova,
                                     int access) {
  if (Status s = CheckRegistration(addr, length, iova, access); !s.ok()) return s;
  const uint32_t index = lkey >> kTagBits;
  if (index == 0 || index >= capacity_) return InvalidArgument("no MR with key " + std::to_string(lkey));
  std::lock_guard<std::mutex> lock(control_mutex_);
  Entry& e = entries_[index];
  if (e.key.load(std::memory_order_relaxed) != lkey) {
    return InvalidArgument("no MR with key " + std::to_string(lkey));
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
                                 bool remote, uint8_t** host) const {
  const uint32_t index = key >> kTagBits;
  if (index == 0 || index >= capacity_) return MrCheck::kBadKey;
  const Entry& e = entries_[index];
  if (e.key.load(std::memory_order_acquire) != key) return MrCheck::kBadKey;
  if (e.pd != pd) return MrCheck::kWrongPd;
  if ((e.access & needed_access) != needed_access) return MrCheck::kNoAccess;
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
  return Check(lkey, pd, addr, length, needed_access, /*remote=*/false, host);
}

MrCheck MemoryRegionTable::CheckRemote(uint32_t rkey, PdHandle pd, uint64_t va, uint64_t length,
                                       int needed_access, uint8_t** host) const {
  return Check(rkey, pd, va, length, needed_access, /*remote=*/true, host);
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
