#include "transport/on_demand_memory.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace uroce::transport {
namespace {

// The process's pid, for process_vm_readv/writev on ourselves (the kernel
// lets a process reach its own memory whatever ptrace_scope says: the
// same-thread-group rule of ptrace_may_access). A forked child must not
// reach its parent: the pid is taken again after fork.
std::atomic<pid_t> own_pid{0};

void ForgetPidAfterFork() { own_pid.store(0, std::memory_order_relaxed); }

pid_t OwnPid() {
  pid_t pid = own_pid.load(std::memory_order_relaxed);
  if (pid == 0) {
    static std::once_flag at_fork;
    std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, ForgetPidAfterFork); });
    pid = getpid();
    own_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

// FUTEX_WAKE_OP's operation on its second word, "add 0": atomic, changes
// nothing, needs the page writable (futex(2)).
constexpr uint32_t kAddZero = FUTEX_OP(FUTEX_OP_ADD, 0, FUTEX_OP_CMP_EQ, 0);

// True if the kernel could take the 4-byte-aligned word at `word` for
// writing (and did, atomically, without changing it).
bool ProbeWritable(void* word) {
  static int wake_word = 0;  // FUTEX_WAKE_OP's first word: nobody waits on it
  return syscall(SYS_futex, &wake_word, FUTEX_WAKE_OP_PRIVATE, 0, nullptr, word, kAddZero) >= 0;
}

}  // namespace

bool OnDemandRead(void* dest, const void* source, size_t length) {
  if (length == 0) return true;
  iovec local{dest, length};
  iovec remote{const_cast<void*>(source), length};
  return process_vm_readv(OwnPid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(length);
}

bool OnDemandWrite(void* dest, const void* source, size_t length) {
  if (length == 0) return true;
  iovec local{const_cast<void*>(source), length};
  iovec remote{dest, length};
  return process_vm_writev(OwnPid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(length);
}

bool OnDemandAtomic(uint64_t* word, bool compare_swap, uint64_t compare, uint64_t swap_or_add, uint64_t* original) {
  // Naturally aligned (the responder refuses others, IBTA 9.4.5), so the
  // 8 bytes share one page and one probe covers them.
  if ((reinterpret_cast<uintptr_t>(word) & 7) != 0 || !ProbeWritable(word)) return false;
  // The residual race (see the header): the page unmapped right here.
  if (compare_swap) {
    uint64_t expected = compare;
    __atomic_compare_exchange_n(word, &expected, swap_or_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    *original = expected;
  } else {
    *original = __atomic_fetch_add(word, swap_or_add, __ATOMIC_SEQ_CST);
  }
  return true;
}

bool OnDemandMemoryAvailable() {
  static const bool available = [] {
    uint64_t word = 0x5a5a5a5a5a5a5a5aull;
    uint64_t copy = 0;
    const uint64_t value = 0xa5a5a5a5a5a5a5a5ull;
    return OnDemandRead(&copy, &word, sizeof(word)) && copy == word && OnDemandWrite(&word, &value, sizeof(value)) &&
           word == value && ProbeWritable(&word);
  }();
  return available;
}

}  // namespace uroce::transport
