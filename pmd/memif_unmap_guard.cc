#include "pmd/memif_unmap_guard.h"

#include <elf.h>
#include <link.h>
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
#include <string>

#include "pmd/log.h"

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

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "memif_unmap_guard: relocation types of this architecture"
#endif

struct PatchState {
  int objects = 0;  // loaded copies of net_memif
  int slots = 0;    // munmap imports rewritten
  std::string error;
};

// Rewrites the GOT slots through which one loaded object calls munmap
// (its R_*_JUMP_SLOT and R_*_GLOB_DAT relocations against the symbol; ELF
// gABI, "Relocation"), making a RELRO page writable for the store.
int PatchMemifObject(dl_phdr_info* info, size_t, void* data) {
  auto* state = static_cast<PatchState*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "librte_net_memif.so") == nullptr) return 0;
  ++state->objects;
  const ElfW(Addr) base = info->dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  ElfW(Addr) relro_begin = 0, relro_end = 0;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dynamic = reinterpret_cast<const ElfW(Dyn)*>(base + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      relro_begin = base + ph.p_vaddr;
      relro_end = relro_begin + ph.p_memsz;
    }
  }
  if (dynamic == nullptr) {
    state->error = "net_memif has no dynamic section";
    return 0;
  }
  // The dynamic linker relocates these entries in place on most targets;
  // an entry below the load address is still an offset.
  auto address = [base](ElfW(Addr) p) { return p < base ? p + base : p; };
  const char* strtab = nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(address(d->d_un.d_ptr)); break;
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(address(d->d_un.d_ptr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(address(d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (strtab == nullptr || symtab == nullptr) {
    state->error = "net_memif has no symbol table";
    return 0;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int t = 0; t < 2; ++t) {
    if (tables[t] == nullptr) continue;
    for (size_t k = 0; k < sizes[t] / sizeof(ElfW(Rela)); ++k) {
      const ElfW(Rela)& rela = tables[t][k];
      const auto type = static_cast<uint32_t>(ELF64_R_TYPE(rela.r_info));
      if (type != kJumpSlot && type != kGlobDat) continue;
      const ElfW(Sym)& sym = symtab[ELF64_R_SYM(rela.r_info)];
      if (std::strcmp(strtab + sym.st_name, "munmap") != 0) continue;
      const ElfW(Addr) slot_address = base + rela.r_offset;
      void** slot = reinterpret_cast<void**>(slot_address);
      const bool read_only = slot_address >= relro_begin && slot_address < relro_end;
      void* const slot_page = reinterpret_cast<void*>(slot_address & ~(page - 1));
      if (read_only && mprotect(slot_page, page, PROT_READ | PROT_WRITE) != 0) {
        state->error = std::string("mprotect of net_memif's GOT: ") + std::strerror(errno);
        return 0;
      }
      __atomic_store_n(slot, reinterpret_cast<void*>(&GuardedMunmap), __ATOMIC_RELEASE);
      if (read_only) mprotect(slot_page, page, PROT_READ);
      ++state->slots;
    }
  }
  return 0;
}

Status Install() {
  PatchState state;
  dl_iterate_phdr(&PatchMemifObject, &state);
  if (state.objects == 0) return NotFound("net_memif is not loaded in this process");
  if (state.slots == 0) {
    return IoError("net_memif's munmap import was not rewritten" + (state.error.empty() ? "" : ": " + state.error));
  }
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
