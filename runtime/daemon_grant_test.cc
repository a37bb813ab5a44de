// The configuration a uroce daemon hands out (host/daemon_protocol.h's
// grant) loads as any other: a process attached to a daemon runs exactly the
// runtime a process-private one does.
#include <gtest/gtest.h>

#include "host/daemon_protocol.h"
#include "runtime/config.h"
#include "transport/address_text.h"

namespace uroce::runtime {
namespace {

using host::AttachGrant;
using host::FormatAttachReply;
using host::GrantEndpoint;
using host::ParseAttachReply;
using transport::ParseIpAddress;

TEST(DaemonGrantTest, GrantIsAConfigurationOnTheDaemonsSharedMemoryPort) {
  AttachGrant grant;
  grant.slot = 7;
  grant.endpoints.reserve(2);  // g and h stay valid
  GrantEndpoint& g = grant.endpoints.emplace_back();
  g.name = "eth0";
  g.mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  ASSERT_TRUE(ParseIpAddress("10.1.2.3", &g.gids.emplace_back()));
  ASSERT_TRUE(ParseIpAddress("fd00::3", &g.gids.emplace_back()));
  g.mtu = 1500;
  // A second uplink: a second device on the same lease.
  GrantEndpoint& h = grant.endpoints.emplace_back();
  h.name = "eth1";
  h.mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x57};
  ASSERT_TRUE(ParseIpAddress("10.9.9.9", &h.gids.emplace_back()));
  h.mtu = 9000;
  auto reply = ParseAttachReply(FormatAttachReply(grant));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->slot, 7u);
  auto config = LoadConfigText(reply->config_text, "test");
  ASSERT_TRUE(config.ok()) << config.status().ToString() << "\n" << reply->config_text;
  ASSERT_EQ(config->endpoints.size(), 2u);
  const EndpointConfig& ep = config->endpoints[0];
  EXPECT_EQ(ep.name, "eth0");
  EXPECT_EQ(ep.port, "shm:daemon:0");
  EXPECT_EQ(ep.kind, PortKind::kShm);
  EXPECT_EQ(ep.shm_index, 0u);
  const EndpointConfig& second = config->endpoints[1];
  EXPECT_EQ(second.name, "eth1");
  EXPECT_EQ(second.shm_index, 1u);
  EXPECT_EQ(second.mtu, 9000u);
  EXPECT_EQ(second.mac, h.mac);
  EXPECT_EQ(second.qpn_base, 7u << 16);
  EXPECT_EQ(ep.shm_fd, -1);  // the process sets it from the file the reply carries
  EXPECT_EQ(ep.gids, g.gids);
  EXPECT_FALSE(ep.mac_from_port);
  EXPECT_EQ(ep.mac, g.mac);
  EXPECT_FALSE(ep.loopback);
  EXPECT_EQ(ep.qpn_base, 7u << 16);
  EXPECT_EQ(ep.qpn_count, 65536u);
  // The host's addresses, this uplink's and the other's, are reached at
  // this uplink's MAC, through its switch.
  ASSERT_EQ(ep.neighbors.size(), 3u);
  EXPECT_EQ(ep.neighbors[0].first, g.gids[0]);
  EXPECT_EQ(ep.neighbors[0].second, g.mac);
  EXPECT_EQ(ep.neighbors[2].first, h.gids[0]);
  EXPECT_EQ(ep.neighbors[2].second, g.mac);
  ASSERT_EQ(second.neighbors.size(), 3u);
  EXPECT_EQ(second.neighbors[0].first, g.gids[0]);
  EXPECT_EQ(second.neighbors[0].second, h.mac);
  EXPECT_EQ(config->progress, ProgressMode::kInline);
}

}  // namespace
}  // namespace uroce::runtime
