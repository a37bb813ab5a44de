// Fault-free access to process memory for implicit on-demand regions.
//
// An implicit ODP region (ibv_reg_mr(3): IBV_ACCESS_ON_DEMAND, addr NULL,
// length SIZE_MAX) hands a peer holding its rkey the whole address space. An
// ODP NIC resolves each page when it is touched; a page that cannot be
// resolved (not mapped, or not writable for a write or an atomic) fails the
// access: the responder NAKs it with a remote access error, a local access
// completes with a local protection error. The engine, a thread of the
// process, would take SIGSEGV (or SIGBUS) instead, and a peer could end the
// process. So accesses through an implicit region go through the kernel:
//
//  - reads and writes: process_vm_readv(2) / process_vm_writev(2) on the
//    process's own pid. The kernel copies with the page tables' rules
//    (a read-only page is not written: no FOLL_FORCE, unlike /proc/self/mem)
//    and answers EFAULT where a page cannot be had, never a signal; a
//    concurrent munmap(2) only makes the copy fail.
//  - atomics: the 8-byte word must be changed by a real atomic instruction
//    (the engine's atomics are atomic with the host's and other engines'
//    on the same word). First the kernel probes the word for writing:
//    futex(2) FUTEX_WAKE_OP adds 0 to it atomically (no value changes) and
//    answers EFAULT if the page cannot be had for writing (it also faults
//    the page in, copy-on-write resolved, as an ODP page fault would). Then
//    the atomic instruction. The residual race: another thread of the
//    application unmapping (or write-protecting) that very page between the
//    probe and the instruction, a few hundred nanoseconds, still faults the
//    process. No peer can cause it; only the application, by taking away
//    memory a peer is using at that instant.
//
// Cost: a system call per access (per packet's piece of memory), the one
// place where the engine's fast path makes system calls, as a hardware ODP
// page fault takes the NIC's slow path. Explicit regions (including explicit
// ODP ones) keep the plain memcpy: the application vouches for their memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/memory_region.h"

namespace uroce::transport {

// Whether the system calls above work in this process (a seccomp profile may
// forbid process_vm_readv): probed once; false means implicit regions are
// not offered (registration fails with EOPNOTSUPP).
bool OnDemandMemoryAvailable();

// `length` bytes from process memory at `source` (which may be unmapped) to
// `dest` (the engine's own memory). False if any byte could not be read.
bool OnDemandRead(void* dest, const void* source, size_t length);
// `length` bytes from `source` (the engine's own) to process memory at
// `dest`. False if any byte could not be written; bytes before the first
// page that failed may have been written (as a NIC that NAKs mid-message).
bool OnDemandWrite(void* dest, const void* source, size_t length);
// The IB atomic (IBTA 9.4.5) on the naturally aligned word at `word`:
// compare-and-swap if `compare_swap`, else fetch-and-add. False (nothing
// changed) if the word's page cannot be had for writing.
bool OnDemandAtomic(uint64_t* word, bool compare_swap, uint64_t compare, uint64_t swap_or_add, uint64_t* original);

// The copies for a range a check granted: memcpy for kOk, the fault-free
// copies for kOkOnDemand.
inline bool MrRead(MrCheck how, void* dest, const uint8_t* host, size_t length) {
  if (how == MrCheck::kOkOnDemand) return OnDemandRead(dest, host, length);
  __builtin_memcpy(dest, host, length);
  return true;
}
inline bool MrWrite(MrCheck how, uint8_t* host, const void* source, size_t length) {
  if (how == MrCheck::kOkOnDemand) return OnDemandWrite(host, source, length);
  __builtin_memcpy(host, source, length);
  return true;
}

}  // namespace uroce::transport
