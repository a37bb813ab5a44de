// For tests of memif ports against EAL's interrupt thread, where DPDK 22.11's
// net_memif runs its control channel: memif devices made at run time, and a
// way to hold that thread in a callback of the test's own.
#pragma once

// rte_intr_instance_alloc and its setters (the test's own interrupt source)
// are experimental in DPDK 22.11. Before any DPDK header.
#ifndef ALLOW_EXPERIMENTAL_API
#define ALLOW_EXPERIMENTAL_API 1
#endif

#include <rte_bus_vdev.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "pmd/eal.h"
#include "pmd/port.h"

namespace uroce::pmd {

// A memif device created at run time (what --vdev makes at start-up).
class MemifDevice {
 public:
  MemifDevice(const std::string& name, const std::string& args) : name_(name) {
    ok_ = rte_vdev_init(name.c_str(), args.c_str()) == 0;
  }
  ~MemifDevice() {
    // The port is closed by the test; this removes the device itself.
    if (ok_) rte_vdev_uninit(name_.c_str());
  }
  bool ok() const { return ok_; }
  StatusOr<uint16_t> port() const { return PortByName(name_); }

 private:
  std::string name_;
  bool ok_ = false;
};

inline bool LinkUp(uint16_t port) {
  rte_eth_link link;
  return rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

// In /tmp: Bazel's TEST_TMPDIR is longer than a UNIX socket's 108 bytes.
// Named after EAL's file prefix, unique per process (concurrent runs of this
// test share /tmp, and may share a pid in their PID namespaces).
inline std::string SocketPath(const std::string& tag) {
  const std::string path = "/tmp/" + EalFilePrefix() + "-" + tag + ".sock";
  unlink(path.c_str());  // a run that died left it
  return path;
}

// Holds EAL's interrupt thread in a callback of its own (as memif's
// disconnect handler holds it) until Release.
class InterruptThreadBlocker {
 public:
  InterruptThreadBlocker() {
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    handle_ = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
    if (fd_ < 0 || handle_ == nullptr) return;
    rte_intr_fd_set(handle_, fd_);
    rte_intr_type_set(handle_, RTE_INTR_HANDLE_EXT);
    registered_ = rte_intr_callback_register(handle_, &InterruptThreadBlocker::Run, this) == 0;
  }
  ~InterruptThreadBlocker() {
    Release();
    if (registered_) rte_intr_callback_unregister_sync(handle_, &InterruptThreadBlocker::Run, this);
    if (handle_ != nullptr) rte_intr_instance_free(handle_);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return registered_; }

  // Returns once the interrupt thread is inside the callback; false if it
  // did not come within `limit`.
  bool Block(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const uint64_t one = 1;
    if (write(fd_, &one, sizeof(one)) != sizeof(one)) return false;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!inside_.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  void Release() { release_.store(true, std::memory_order_release); }
  bool left() const { return left_.load(std::memory_order_acquire); }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<InterruptThreadBlocker*>(arg);
    uint64_t n;
    (void)!read(self->fd_, &n, sizeof(n));
    self->inside_.store(true, std::memory_order_release);
    while (!self->release_.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    self->left_.store(true, std::memory_order_release);
  }

  int fd_ = -1;
  rte_intr_handle* handle_ = nullptr;
  bool registered_ = false;
  std::atomic<bool> inside_{false}, release_{false}, left_{false};
};

// Returns once EAL's interrupt thread is done with what it was handling.
// Its epoll batches name descriptors by number: a batch taken before a
// close can still hold an event for a closed descriptor, and a device made
// meanwhile whose socket got the same number would be handed that event (a
// memif listener then blocks the thread in accept). Between rounds only.
inline void SettleInterruptThread() {
  InterruptThreadBlocker probe;
  if (probe.ok() && probe.Block()) probe.Release();
}

}  // namespace uroce::pmd
