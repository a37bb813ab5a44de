// ClosePort against EAL's interrupt thread. DPDK 22.11's net_memif handles
// its control channel there: when the peer goes away, that thread runs
// memif_disconnect on the port (unmaps its regions, rte_frees them and the
// channel); rte_eth_dev_stop runs memif_disconnect too, and rte_eth_dev_close
// frees the queues and the port's private data, with no lock between them.
// Both ends of `uroce perf` close their ports at about the same moment after
// the last run, so the second to close sees the first's disconnect arrive on
// its interrupt thread while its own ClosePort runs. The two teardowns must
// not overlap: when they do, the heap is corrupted and the process dies of
// SIGSEGV (tools/perf_compare's client, exit -11). These tests guard that.

// The test utilities' interrupt source needs DPDK 22.11's experimental API.
// Before any DPDK header.
#define ALLOW_EXPERIMENTAL_API 1

#include "pmd/port.h"

#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_log.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "pmd/eal.h"
#include "pmd/eal_test_environment.h"
#include "pmd/eth_port_io.h"
#include "pmd/mempool.h"
#include "pmd/memif_test_util.h"
#include "pmd/memif_unmap_guard.h"

namespace uroce::pmd {
namespace {

using Clock = std::chrono::steady_clock;

// DPDK's log, kept in a file while it lives. The heap logs "Invalid memory"
// when rte_free is handed a block that is not in use: a second free of the
// same block, which is what memif's two teardowns racing do (most of them
// leave the heap whole; some corrupt it).
class DpdkLogCapture {
 public:
  DpdkLogCapture() : file_(std::tmpfile()) {
    if (file_ != nullptr) rte_openlog_stream(file_);
  }
  ~DpdkLogCapture() { (void)Stop(); }
  // Back to the default stream; what was logged meanwhile.
  std::string Stop() {
    if (file_ == nullptr) return "";
    rte_openlog_stream(nullptr);
    std::string text;
    std::rewind(file_);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), file_)) > 0;) text.append(buf, n);
    std::fclose(file_);
    file_ = nullptr;
    return text;
  }

 private:
  std::FILE* file_;
};

class PortCloseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(EalRunning());
    auto pool = CreatePktPool({.name = "close_test_pool", .mbufs = 2047, .per_core_cache = 0});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
  }
  MempoolPtr pool_;
};

// The deterministic half: while the interrupt thread is busy in a callback,
// closing a memif port waits for it (and then runs there), so the port's
// teardown never runs beside memif's own: ClosePort must not return at once
// with the callback still running.
TEST_F(PortCloseTest, MemifCloseWaitsForTheInterruptThread) {
  MemifDevice dev("net_memif_close_wait",
                  "role=server,id=1,socket-abstract=no,socket=" + SocketPath("wait"));
  ASSERT_TRUE(dev.ok());
  auto port = dev.port();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  PortConfig config;
  config.rx_pool = pool_.get();
  ASSERT_TRUE(StartPort(*port, config).ok());

  InterruptThreadBlocker blocker;
  ASSERT_TRUE(blocker.ok());
  ASSERT_TRUE(blocker.Block());
  std::thread releaser([&blocker] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    blocker.Release();
  });
  const Status closed = ClosePort(*port);
  const bool callback_done_first = blocker.left();
  releaser.join();
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(callback_done_first) << "ClosePort ran while the interrupt thread was in a callback";
}

// The stress: a memif server and client in this process, connected, then
// both closed back to back, as perf's two processes do. Closing the server
// hangs up on the client, whose disconnect the interrupt thread handles
// while the client's own ClosePort comes in.
TEST_F(PortCloseTest, MemifPairClosesBackToBack) {
  constexpr int kRounds = 40;
  DpdkLogCapture log;
  for (int round = 0; round < kRounds; ++round) {
    const std::string tag = "pair" + std::to_string(round);
    const std::string socket = "socket-abstract=no,socket=" + SocketPath(tag);
    // Server first: the first device on a socket decides whether it listens.
    MemifDevice server("net_memif_s" + std::to_string(round), "role=server,id=0," + socket);
    MemifDevice client("net_memif_c" + std::to_string(round), "role=client,id=0," + socket);
    ASSERT_TRUE(server.ok() && client.ok()) << "round " << round;
    auto s = server.port();
    auto c = client.port();
    ASSERT_TRUE(s.ok() && c.ok()) << "round " << round;
    PortConfig config;
    config.rx_pool = pool_.get();
    ASSERT_TRUE(StartPort(*s, config).ok()) << "round " << round;
    ASSERT_TRUE(StartPort(*c, config).ok()) << "round " << round;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!(LinkUp(*s) && LinkUp(*c)) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(LinkUp(*s) && LinkUp(*c)) << "round " << round << ": the memif pair never connected";
    // Alternate which side goes first: each side's disconnect reaches the
    // other through the interrupt thread.
    const uint16_t first = round % 2 == 0 ? *s : *c;
    const uint16_t second = round % 2 == 0 ? *c : *s;
    EXPECT_TRUE(ClosePort(first).ok()) << "round " << round;
    EXPECT_TRUE(ClosePort(second).ok()) << "round " << round;
    SettleInterruptThread();
  }
  const std::string logged = log.Stop();
  EXPECT_EQ(logged.find("Invalid memory"), std::string::npos)
      << "memory freed twice: the port's close ran beside memif's disconnect\n"
      << logged;
  EXPECT_EQ(AvailableMbufs(pool_.get()), 2047u);
}

// A memif server and client in this process, connected.
struct ConnectedMemifPair {
  ConnectedMemifPair(const std::string& tag, rte_mempool* pool, const std::string& args = "")
      : server("net_memif_s" + tag, "role=server,id=0,socket-abstract=no,socket=" + SocketPath(tag) + args),
        client("net_memif_c" + tag,
               "role=client,id=0,socket-abstract=no,socket=/tmp/" + EalFilePrefix() + "-" + tag + ".sock" + args) {
    if (!server.ok() || !client.ok()) return;
    auto s = server.port();
    auto c = client.port();
    if (!s.ok() || !c.ok()) return;
    server_port = *s;
    client_port = *c;
    PortConfig config;
    config.rx_pool = pool;
    if (!StartPort(server_port, config).ok() || !StartPort(client_port, config).ok()) return;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!(LinkUp(server_port) && LinkUp(client_port)) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    connected = LinkUp(server_port) && LinkUp(client_port);
  }
  MemifDevice server;  // first: the first device on a socket decides whether it listens
  MemifDevice client;
  uint16_t server_port = 0, client_port = 0;
  bool connected = false;
};

// The deterministic half of the unmap guard: the peer's disconnect reaches
// the client on the interrupt thread, and its unmap of the client's rings
// waits there for as long as a burst on the client is marked under way.
TEST_F(PortCloseTest, PeersDisconnectWaitsForABurstUnderWay) {
  ConnectedMemifPair pair("guard_wait", pool_.get());
  ASSERT_TRUE(pair.connected) << "the memif pair never connected";
  ASSERT_TRUE(InstallMemifUnmapGuard().ok()) << InstallMemifUnmapGuard().ToString();
  BurstFence* fence = MemifBurstFence(pair.client_port);
  ASSERT_NE(fence, nullptr);
  const MemifUnmapGuardCounters before = ReadMemifUnmapGuardCounters();

  // The server's teardown runs here while the interrupt thread is held (so
  // that its unmaps are not the interrupt thread's, which would wait for
  // every memif burst under way, the client's included); its disconnect
  // message and closed socket reach the client's handler once the thread
  // is let go.
  InterruptThreadBlocker blocker;
  ASSERT_TRUE(blocker.ok());
  ASSERT_TRUE(blocker.Block());
  ASSERT_EQ(rte_eth_dev_stop(pair.server_port), 0);
  fence->Enter();  // as a poller does at the start of a burst
  blocker.Release();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (ReadMemifUnmapGuardCounters().bursts_waited == before.bursts_waited && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(ReadMemifUnmapGuardCounters().bursts_waited, before.bursts_waited)
      << "the client's unmap did not wait for the burst";
  // Held there: the interrupt thread takes nothing else until the burst
  // ends.
  InterruptThreadBlocker probe;
  ASSERT_TRUE(probe.ok());
  EXPECT_FALSE(probe.Block(std::chrono::milliseconds(100))) << "the client's unmap went on during the burst";
  fence->Leave();
  EXPECT_TRUE(probe.Block()) << "the interrupt thread never came back from the client's unmap";
  probe.Release();
  EXPECT_FALSE(LinkUp(pair.client_port));
  EXPECT_TRUE(ClosePort(pair.client_port).ok());
  EXPECT_TRUE(ClosePort(pair.server_port).ok());
  SettleInterruptThread();
  EXPECT_EQ(ReadMemifUnmapGuardCounters().waits_given_up, before.waits_given_up);
}

// The stress: the client sends and receives full-size frames without pause
// while its server goes away, round after round; the client's disconnect
// lands in the middle of its bursts' copies. Without the guard the process
// dies of SIGSEGV in the first round or two (the ring unmapped under
// eth_memif_tx).
TEST_F(PortCloseTest, PollerSurvivesItsPeersDisconnect) {
  ASSERT_TRUE(InstallMemifUnmapGuard().ok());
  const MemifUnmapGuardCounters before = ReadMemifUnmapGuardCounters();
  constexpr int kRounds = 30;
  std::mt19937 random(20261129);
  for (int round = 0; round < kRounds; ++round) {
    // Rings of 16384 slots: after the server stops reading, the client goes
    // on copying frames into its ring for milliseconds, which is when the
    // server's disconnect reaches it.
    ConnectedMemifPair pair("guard" + std::to_string(round), pool_.get(), ",rsize=14");
    ASSERT_TRUE(pair.connected) << "round " << round;
    std::atomic<bool> stop_client{false}, stop_server{false};
    std::atomic<uint64_t> client_bursts{0};
    auto poll = [this](uint16_t port, bool send, std::atomic<bool>& stop, std::atomic<uint64_t>* bursts) {
      EthPortIo io(port, 0);
      rte_mbuf* frames[32];
      while (!stop.load(std::memory_order_relaxed)) {
        if (send && rte_pktmbuf_alloc_bulk(pool_.get(), frames, 32) == 0) {
          // What the frames hold does not matter: the copy does.
          for (rte_mbuf* m : frames) (void)rte_pktmbuf_append(m, 1500);
          const uint16_t sent = io.TxBurst(frames, 32);
          rte_pktmbuf_free_bulk(frames + sent, 32 - sent);
        }
        const uint16_t got = io.RxBurst(frames, 32);
        rte_pktmbuf_free_bulk(frames, got);
        if (bursts != nullptr) bursts->fetch_add(1, std::memory_order_relaxed);
      }
    };
    std::thread server_poller(poll, pair.server_port, true, std::ref(stop_server), nullptr);
    std::thread client_poller(poll, pair.client_port, true, std::ref(stop_client), &client_bursts);
    while (client_bursts.load() < 100) std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
    stop_server.store(true);
    server_poller.join();
    EXPECT_TRUE(ClosePort(pair.server_port).ok()) << "round " << round;
    // The client goes on polling through its own disconnect.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (LinkUp(pair.client_port) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_FALSE(LinkUp(pair.client_port)) << "round " << round;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    stop_client.store(true);
    client_poller.join();
    EXPECT_TRUE(ClosePort(pair.client_port).ok()) << "round " << round;
    SettleInterruptThread();
  }
  EXPECT_EQ(ReadMemifUnmapGuardCounters().waits_given_up, before.waits_given_up);
  EXPECT_EQ(AvailableMbufs(pool_.get()), 2047u);
}

}  // namespace
}  // namespace uroce::pmd
