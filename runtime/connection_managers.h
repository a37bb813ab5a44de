// The process's connection managers: one cm::ConnectionManager per
// uroce device (it owns QP1 of that device's engine, so there can be only
// one), shared by every API that connects RC QPs over it: the libfabric
// provider (api/fabric) and librdmacm (api/rdmacm). One thread polls them
// (every millisecond while a connection is being made or ended, up to every
// 32 ms when all are quiet; a Connect, Listen, Accept... wakes it at once)
// and hands each event to the consumer ("sink") that made the connection or
// the listener.
//
// Tags: a consumer registers once (AddSink) and gets a sink number; the tags
// it gives ConnectionManager::Listen/Connect/Accept are MakeTag(sink, key)
// with keys of its own choosing. A kConnectRequest goes to the sink of its
// listen_tag, every other event to the sink of its tag; requests for no sink
// are rejected, other events for no sink are dropped.
//
// Sinks are called from the polling thread with no lock of this class held,
// in the order the connection manager queued the events; a sink may call the
// ConnectionManager (Accept, Reject, Release, ...) but not ForDevice().
// Control path only.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "cm/connection_manager.h"
#include "common/status.h"

namespace uroce::runtime {

class ConnectionManagers {
 public:
  // device: the runtime endpoint index of the connection manager.
  using Sink = std::function<void(size_t device, cm::ConnectionManager* cm, cm::CmEvent& event)>;

  static ConnectionManagers& Get();

  static constexpr unsigned kSinkShift = 48;
  static constexpr uint64_t kKeyMask = (uint64_t{1} << kSinkShift) - 1;
  static uint64_t MakeTag(uint16_t sink, uint64_t key) { return (uint64_t{sink} << kSinkShift) | (key & kKeyMask); }
  static uint64_t KeyOf(uint64_t tag) { return tag & kKeyMask; }

  // Registers a consumer for the life of the process; returns its sink
  // number (1, 2, ...).
  uint16_t AddSink(Sink sink);

  // The connection manager of runtime endpoint `index`, made on first use
  // (the runtime must be running: Process::Start),
  // and the polling thread with it.
  StatusOr<cm::ConnectionManager*> ForDevice(size_t index);
  // The connection of device `index`'s QP `qpn` to `remote_qpn` lost its
  // peer (ConnectionManager::PeerGone); nothing if the device has no
  // connection manager yet or no such connection.
  void PeerGone(size_t index, uint32_t qpn, uint32_t remote_qpn);

 private:
  ConnectionManagers() = default;
  // pthread_atfork(3)'s child handler: the connection managers are the
  // parent's engines' and the polling thread is not in the child; both are
  // let go of (never destroyed, see Process::ForgetParentAfterFork), and
  // the child's first ForDevice makes its own. Consumers stay registered.
  void ForgetParentAfterFork();
  void Loop();
  // Any thread: the loop polls at once and then every millisecond again.
  void Wake();

  static constexpr size_t kMaxSinks = 8;

  std::mutex mutex_;  // cms_, sinks_, thread_started_ (never held while a sink runs)
  std::vector<std::unique_ptr<cm::ConnectionManager>> cms_;  // by device index
  std::array<Sink, kMaxSinks> sinks_{};
  uint16_t sink_count_ = 0;
  bool thread_started_ = false;

  std::mutex wake_mutex_;  // wakes_ (never held while a CM is called)
  std::condition_variable wake_;
  uint64_t wakes_ = 0;
};

}  // namespace uroce::runtime
