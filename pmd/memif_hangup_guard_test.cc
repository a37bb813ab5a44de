// memif's listener against peers that connect and hang up before this
// process accepts them (pmd/memif_hangup_guard.h): the connections wait in
// the listening socket's backlog while EAL's interrupt thread is held, as
// they do while the process is stopped. Unguarded, DPDK 22.11's memif leaves
// each one's closed descriptor registered with that thread, whose next
// rebuild of its epoll set calls rte_panic, and this test binary aborts.

// The test utilities' interrupt source needs DPDK 22.11's experimental API.
// Before any DPDK header.
#define ALLOW_EXPERIMENTAL_API 1

#include "pmd/memif_hangup_guard.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "pmd/eal.h"
#include "pmd/eal_test_environment.h"
#include "pmd/mempool.h"
#include "pmd/memif_test_util.h"
#include "pmd/port.h"

namespace uroce::pmd {
namespace {

using Clock = std::chrono::steady_clock;

// Connects to the UNIX socket at `path` and closes at once; false if the
// connect failed.
bool ConnectAndHangUp(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const bool connected = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return connected;
}

TEST(MemifHangupGuardTest, PeersThatHungUpBeforeTheHandshakeLeaveTheListenerWorking) {
  ASSERT_TRUE(EalRunning());
  auto pool = CreatePktPool({.name = "hangup_test_pool", .mbufs = 1023, .per_core_cache = 0});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const std::string path = SocketPath("hangup");
  MemifDevice server("net_memif_hangup_s", "role=server,id=0,socket-abstract=no,socket=" + path);
  ASSERT_TRUE(server.ok());
  auto server_port = server.port();
  ASSERT_TRUE(server_port.ok()) << server_port.status().ToString();
  PortConfig config;
  config.rx_pool = pool->get();
  ASSERT_TRUE(StartPort(*server_port, config).ok());  // installs the guard
  ASSERT_TRUE(InstallMemifHangupGuard().ok()) << InstallMemifHangupGuard().ToString();
  const uint64_t before = MemifSendsToGonePeers();

  // Two: memif listens with a backlog of 1, which holds two connections.
  constexpr int kHungUp = 2;
  {
    InterruptThreadBlocker blocker;
    ASSERT_TRUE(blocker.ok());
    ASSERT_TRUE(blocker.Block());
    for (int i = 0; i < kHungUp; ++i) ASSERT_TRUE(ConnectAndHangUp(path)) << "connection " << i;
    blocker.Release();
  }  // its unregistration: the interrupt thread rebuilds its epoll set
  // memif accepts each and sends HELLO to nobody.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (MemifSendsToGonePeers() < before + kHungUp && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(MemifSendsToGonePeers(), before + kHungUp) << "memif did not send to the connections that hung up";
  // More rebuilds, each of which would meet a closed descriptor left
  // registered; the thread must still run callbacks after them.
  for (int i = 0; i < 3; ++i) {
    InterruptThreadBlocker probe;
    ASSERT_TRUE(probe.ok());
    ASSERT_TRUE(probe.Block()) << "EAL's interrupt thread stopped taking callbacks";
    probe.Release();
  }

  // The listener still serves a real peer.
  MemifDevice client("net_memif_hangup_c", "role=client,id=0,socket-abstract=no,socket=" + path);
  ASSERT_TRUE(client.ok());
  auto client_port = client.port();
  ASSERT_TRUE(client_port.ok()) << client_port.status().ToString();
  ASSERT_TRUE(StartPort(*client_port, config).ok());
  const auto link_deadline = Clock::now() + std::chrono::seconds(10);
  while (!(LinkUp(*server_port) && LinkUp(*client_port)) && Clock::now() < link_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(LinkUp(*server_port) && LinkUp(*client_port)) << "a peer could not connect after the hang-ups";
  EXPECT_TRUE(ClosePort(*client_port).ok());
  EXPECT_TRUE(ClosePort(*server_port).ok());
  SettleInterruptThread();
}

}  // namespace
}  // namespace uroce::pmd
