// host::Daemon in one process: a daemon on a net_null uplink (nothing leaves
// the process), a program attaching through its control socket, STATS, the
// end of a session, and a second daemon refused on the same socket.
#include "host/daemon.h"

#include <gtest/gtest.h>
#include <rte_dev.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/daemon_client.h"
#include "host/daemon_protocol.h"
#include "host/host_config.h"
#include "pmd/eal_test_environment.h"
#include "pmd/shutdown_signal.h"
#include "transport/address_text.h"

namespace uroce::host {
namespace {

// A private directory for the socket: Bazel's TEST_TMPDIR is too long for
// a socket's path (unix(7): 108 bytes).
std::string ScratchDir() {
  char dir[] = "/tmp/uroce-daemon-test-XXXXXX";
  return mkdtemp(dir) != nullptr ? dir : "";
}

// Asks for STATS until `done` holds for the answer, for up to five seconds.
template <typename Done>
std::string StatsUntil(const std::string& socket, Done done) {
  std::string last;
  for (int i = 0; i < 500; ++i) {
    auto stats = QueryDaemonStats(socket);
    if (stats.ok()) {
      last = *stats;
      if (done(last)) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return last;
}

TEST(DaemonTest, AProgramAttachesIsListedAndLeaves) {
  ASSERT_TRUE(pmd::TestEalStarted());
  ASSERT_EQ(rte_dev_probe("net_null0"), 0);
  const std::string dir = ScratchDir();
  ASSERT_FALSE(dir.empty());
  const std::string socket = dir + "/daemon.sock";
  // [daemon] socket = SOCKET; [endpoint.up] port = net_null0, ipv4 =
  // 192.0.2.1, mac = 02:00:00:00:00:01, as the configuration parser makes it.
  DaemonConfig config;
  config.socket = socket;
  EndpointPortConfig up;
  up.name = "up";
  up.port = "net_null0";
  up.kind = PortKind::kVdev;
  up.device_name = "net_null0";
  ASSERT_TRUE(transport::ParseIpAddress("192.0.2.1", &up.gids.emplace_back()));
  up.has_ipv4 = true;
  up.mac_from_port = false;
  ASSERT_TRUE(transport::ParseMacAddress("02:00:00:00:00:01", &up.mac));
  const std::vector<EndpointPortConfig> uplinks = {up};

  // The daemon's report lines, from its thread and from Stop on this one.
  std::mutex report_mutex;
  std::vector<std::string> report;
  auto reported = [&](const std::string& prefix) {
    std::lock_guard<std::mutex> lock(report_mutex);
    for (const std::string& line : report) {
      if (line.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  std::unique_ptr<Daemon> daemon = Daemon::Create(config, uplinks, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(report_mutex);
    report.push_back(line);
  });
  ASSERT_TRUE(daemon->Listen().ok());
  const Status started = daemon->StartUplinks();
  ASSERT_TRUE(started.ok()) << started.ToString();
  pmd::InstallShutdownSignals();
  std::thread loop([&] { daemon->Run(); });

  // A second daemon stops at the socket, before touching any port.
  std::unique_ptr<Daemon> second = Daemon::Create(config, uplinks, nullptr);
  EXPECT_FALSE(second->Listen().ok());
  second.reset();

  uint32_t slot = 0;
  {
    auto session = DaemonSession::Attach(socket);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    slot = (*session)->slot();
    EXPECT_NE(slot, 0u);
    // The grant is the uplink's address and MAC, on a port of its own.
    auto granted = ParseAttachGrant((*session)->config_text(), slot);
    ASSERT_TRUE(granted.ok()) << granted.status().ToString();
    ASSERT_EQ(granted->endpoints.size(), 1u);
    ASSERT_FALSE(granted->endpoints[0].gids.empty());
    EXPECT_EQ(transport::GidToString(granted->endpoints[0].gids[0]), "192.0.2.1");
    EXPECT_EQ(transport::MacToString(granted->endpoints[0].mac), "02:00:00:00:00:01");

    const std::string listed = " slot=" + std::to_string(slot) + " ";
    const std::string stats = StatsUntil(socket, [&](const std::string& s) { return s.find(listed) != s.npos; });
    EXPECT_NE(stats.find("daemon sessions="), std::string::npos) << stats;
    EXPECT_NE(stats.find("pid=" + std::to_string(getpid()) + " "), std::string::npos) << stats;
    EXPECT_NE(stats.find(listed), std::string::npos) << stats;
  }
  // The session closed: the daemon releases the slot.
  const std::string listed = " slot=" + std::to_string(slot) + " ";
  const std::string after = StatsUntil(socket, [&](const std::string& s) { return s.find(listed) == s.npos; });
  EXPECT_EQ(after.find(listed), std::string::npos) << after;

  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  loop.join();
  daemon->Stop();
  daemon.reset();
  pmd::ResetShutdownRequest();
  EXPECT_TRUE(reported("uroce0 on net_null0 (up)")) << "no report of the uplink";
  EXPECT_TRUE(reported("attached pid " + std::to_string(getpid()) + " ")) << "no report of the attach";
  EXPECT_TRUE(reported("released pid " + std::to_string(getpid()) + " ")) << "no report of the release";
  EXPECT_TRUE(reported("stopped; mbufs back in the pool")) << "no report of the stop";
  EXPECT_EQ(access(socket.c_str(), F_OK), -1) << "the socket file stays after Stop";
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace uroce::host
