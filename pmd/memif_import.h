// Points net_memif's calls of a C library function at a wrapper of uroce's.
//
// DPDK 22.11's net_memif has faults that only its own calls into the C
// library can be guarded against (pmd/memif_unmap_guard.h: munmap;
// pmd/memif_hangup_guard.h: sendmsg). Each guard rewrites the slots of
// memif's global offset table through which it calls the function, so that
// memif alone calls the wrapper; the rest of the process is untouched.
//
// Control path; call before the ports whose driver it guards start.
#pragma once

#include "common/status.h"

namespace uroce::pmd {

// Rewrites every import of `symbol` by librte_net_memif.so (its
// R_*_JUMP_SLOT and R_*_GLOB_DAT relocations against the symbol) to call
// `replacement`, which must have the function's type. NotFound when
// net_memif is not loaded in this process; IoError when it imports no
// `symbol` or a slot cannot be made writable.
Status RedirectMemifImport(const char* symbol, void* replacement);

}  // namespace uroce::pmd
