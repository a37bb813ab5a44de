// The daemon's control messages: what a process sends is parsed strictly,
// and the configuration the daemon hands out loads as any other.
#include "pmd/daemon_protocol.h"

#include <gtest/gtest.h>

#include "pmd/config.h"

namespace uroce::pmd {
namespace {

TEST(DaemonProtocolTest, AttachRequestRoundTrips) {
  AttachRequest r;
  r.pid = 4242;
  r.program = "ibv_rc_pingpong";
  auto parsed = ParseAttachRequest(FormatAttachRequest(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->pid, 4242);
  EXPECT_EQ(parsed->program, "ibv_rc_pingpong");
  // Names are tamed on the way out.
  r.program = "a b/c\n";
  parsed = ParseAttachRequest(FormatAttachRequest(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->program, "a_b_c_");
}

TEST(DaemonProtocolTest, MalformedRequestsAreRefusedWithAReason) {
  for (const char* bad : {"", "HELLO", "ATTACH", "ATTACH pid=1", "ATTACH program=x", "ATTACH pid=0 program=x",
                          "ATTACH pid=-1 program=x", "ATTACH pid=99999999999 program=x", "ATTACH pid=1 program=",
                          "ATTACH pid=1 pid=2 program=x", "ATTACH pid=1 program=x extra=1", "ATTACH pid=1 program=a/b",
                          "ATTACH pid=1 program=x\n", "ATTACH pid 1 program=x"}) {
    auto parsed = ParseAttachRequest(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "' was accepted";
    if (!parsed.ok()) {
      EXPECT_FALSE(parsed.status().message().empty());
    }
  }
  EXPECT_FALSE(ParseAttachRequest(std::string(kMaxControlMessage + 1, 'A')).ok());
  std::string with_nul = "ATTACH pid=1 program=x";
  with_nul[6] = '\0';
  EXPECT_FALSE(ParseAttachRequest(with_nul).ok());
}

TEST(DaemonProtocolTest, GrantIsAConfigurationOnTheDaemonsMemifPort) {
  AttachGrant g;
  g.slot = 7;
  g.endpoint_name = "eth0";
  g.memif_socket = "/run/uroce/uroce.sock.memif3";
  g.memif_secret = "0123456789abcdef";
  g.mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  ASSERT_TRUE(ParseIpAddress("10.1.2.3", &g.gids.emplace_back()));
  ASSERT_TRUE(ParseIpAddress("fd00::3", &g.gids.emplace_back()));
  g.mtu = 1500;
  auto reply = ParseAttachReply(FormatAttachReply(g));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->slot, 7u);
  auto config = LoadConfigText(reply->config_text, "test");
  ASSERT_TRUE(config.ok()) << config.status().ToString() << "\n" << reply->config_text;
  ASSERT_EQ(config->endpoints.size(), 1u);
  const EndpointConfig& ep = config->endpoints[0];
  EXPECT_EQ(ep.name, "eth0");
  EXPECT_EQ(ep.port,
            "net_memif0,role=client,id=0,socket=/run/uroce/uroce.sock.memif3,secret=0123456789abcdef");
  EXPECT_EQ(ep.gids, g.gids);
  EXPECT_FALSE(ep.mac_from_port);
  EXPECT_EQ(ep.mac, g.mac);
  EXPECT_FALSE(ep.loopback);
  EXPECT_EQ(ep.qpn_base, 7u << 16);
  EXPECT_EQ(ep.qpn_count, 65536u);
  // Our own addresses are reached at the uplink's MAC, through the switch.
  ASSERT_EQ(ep.neighbors.size(), 2u);
  EXPECT_EQ(ep.neighbors[0].first, g.gids[0]);
  EXPECT_EQ(ep.neighbors[0].second, g.mac);
  EXPECT_EQ(config->progress, ProgressMode::kInline);
}

TEST(DaemonProtocolTest, ErrorRepliesCarryTheDaemonsReason) {
  auto reply = ParseAttachReply("ERROR the daemon serves 64 processes already");
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reply.status().message(), "the daemon serves 64 processes already");
  for (const char* bad : {"", "OK", "OK slot=0\n", "OK slot=255\n", "OK slot=x\n", "OK slot=1", "HELLO\n"}) {
    EXPECT_EQ(ParseAttachReply(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace uroce::pmd
