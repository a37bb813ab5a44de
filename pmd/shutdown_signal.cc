#include "pmd/shutdown_signal.h"

#include <signal.h>

#include <atomic>

namespace uroce::pmd {
namespace {

// Lock-free, so reading and writing it from a signal handler is defined.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnSignal(int signo) { g_signal.store(signo, std::memory_order_relaxed); }

}  // namespace

void InstallShutdownSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // SIGTERM: every one just asks again (see the header)
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_flags = SA_RESETHAND;  // SIGINT: the second takes the default action
  sigaction(SIGINT, &sa, nullptr);
  // A peer that went away must be an error on the write, not the end of
  // this process: drivers write to UNIX sockets without MSG_NOSIGNAL
  // (virtio_user's vhost-user messages at close, after the backend exited).
  signal(SIGPIPE, SIG_IGN);
}

bool ShutdownRequested() { return g_signal.load(std::memory_order_relaxed) != 0; }

int ShutdownSignal() { return g_signal.load(std::memory_order_relaxed); }

void ResetShutdownRequest() {
  g_signal.store(0, std::memory_order_relaxed);
  InstallShutdownSignals();
}

}  // namespace uroce::pmd
