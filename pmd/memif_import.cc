#include "pmd/memif_import.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace uroce::pmd {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "memif_import: relocation types of this architecture"
#endif

struct Redirect {
  const char* symbol = nullptr;
  void* replacement = nullptr;
  int objects = 0;  // loaded copies of net_memif
  int slots = 0;    // imports rewritten
  std::string error;
};

// Rewrites the GOT slots through which one loaded object calls the symbol
// (ELF gABI, "Relocation"), making a RELRO page writable for the store.
int RedirectInObject(dl_phdr_info* info, size_t, void* data) {
  auto* redirect = static_cast<Redirect*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "librte_net_memif.so") == nullptr) return 0;
  ++redirect->objects;
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
    redirect->error = "net_memif has no dynamic section";
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
    redirect->error = "net_memif has no symbol table";
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
      if (std::strcmp(strtab + sym.st_name, redirect->symbol) != 0) continue;
      const ElfW(Addr) slot_address = base + rela.r_offset;
      void** slot = reinterpret_cast<void**>(slot_address);
      const bool read_only = slot_address >= relro_begin && slot_address < relro_end;
      void* const slot_page = reinterpret_cast<void*>(slot_address & ~(page - 1));
      if (read_only && mprotect(slot_page, page, PROT_READ | PROT_WRITE) != 0) {
        redirect->error = std::string("mprotect of net_memif's GOT: ") + std::strerror(errno);
        return 0;
      }
      __atomic_store_n(slot, redirect->replacement, __ATOMIC_RELEASE);
      if (read_only) mprotect(slot_page, page, PROT_READ);
      ++redirect->slots;
    }
  }
  return 0;
}

}  // namespace

Status RedirectMemifImport(const char* symbol, void* replacement) {
  Redirect redirect;
  redirect.symbol = symbol;
  redirect.replacement = replacement;
  dl_iterate_phdr(&RedirectInObject, &redirect);
  if (redirect.objects == 0) return NotFound("net_memif is not loaded in this process");
  if (redirect.slots == 0) {
    return IoError(std::string("net_memif's ") + symbol + " import was not rewritten" +
                   (redirect.error.empty() ? "" : ": " + redirect.error));
  }
  return Status::Ok();
}

}  // namespace uroce::pmd
