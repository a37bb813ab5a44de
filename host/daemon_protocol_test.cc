// The daemon's control messages: what a process sends is parsed strictly,
// and the configuration the daemon hands out is exactly its own text
// (runtime/daemon_grant_test.cc loads it as a process's configuration).
#include "host/daemon_protocol.h"

#include <gtest/gtest.h>

#include "transport/address_text.h"

namespace uroce::host {

using transport::ParseIpAddress;

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

AttachGrant TwoUplinkGrant() {
  AttachGrant grant;
  grant.slot = 7;
  GrantEndpoint g;
  g.name = "eth0";
  g.mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  ParseIpAddress("10.1.2.3", &g.gids.emplace_back());
  ParseIpAddress("fd00::3", &g.gids.emplace_back());
  grant.endpoints.push_back(g);
  g.name = "second_1";
  g.mac[5] = 0x57;
  g.gids.resize(1);
  ParseIpAddress("10.9.9.9", &g.gids[0]);
  g.mtu = 9000;
  grant.endpoints.push_back(g);
  return grant;
}

// A process takes from the daemon's socket only the configuration a daemon
// writes: whoever answers there could otherwise load a shared object into
// it (EAL -d), give it a port that writes files (net_pcap) or impair it.
TEST(DaemonProtocolTest, GrantRefusesEverythingTheDaemonDoesNotWrite) {
  const AttachGrant grant = TwoUplinkGrant();
  const std::string text = FormatGrantConfig(grant);
  EXPECT_EQ(FormatAttachReply(grant), "OK slot=7\n" + text);
  auto parsed = ParseAttachGrant(text, 7);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
  ASSERT_EQ(parsed->endpoints.size(), 2u);
  EXPECT_EQ(parsed->endpoints[1].name, "second_1");
  EXPECT_EQ(parsed->endpoints[1].mtu, 9000u);
  EXPECT_EQ(parsed->endpoints[0].gids, grant.endpoints[0].gids);
  EXPECT_EQ(FormatGrantConfig(*parsed), text);

  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const std::vector<std::string> hostile = {
      text + "[eal]\nallow_driver_load = yes\nargs = -d /tmp/x.so\n",
      with("[eal]\n", "[eal]\nallow_driver_load = yes\nargs = -d /tmp/x.so\n"),
      with("port = shm:daemon:0", "port = net_pcap0,tx_pcap=/etc/x"),
      with("port = shm:daemon:1", "port = shm:daemon:0"),
      text + "[impair]\nloss = 1\n",
      with("qpn_range = 458752+65536", "qpn_range = 65536+65536"),
      with("loopback = no", "loopback = yes"),
      with("mtu = 1500", "mtu = 1500\nrx_descriptors = 8"),
      with("hugepages = no", "hugepages = yes"),
      with("link_timeout_ms = 10000", "link_timeout_ms = 1"),
      with("10.1.2.3=52:54:00:12:34:56", "10.1.2.3=02:66:66:66:66:66"),
      with("mac = 52:54:00:12:34:56", "mac = 03:54:00:12:34:56"),
      with("[endpoint.eth0]", "[endpoint.../x]"),
      with("gids = 10.1.2.3,fd00::3", "gids = 10.1.2.3,fd00::3,"),
      with("; handed out by uroce daemon: slot 7", "; handed out by uroce daemon: slot 8"),
      text + "\n",
      "",
  };
  for (const std::string& bad : hostile) {
    EXPECT_FALSE(ParseAttachGrant(bad, 7).ok()) << bad;
  }
  EXPECT_FALSE(ParseAttachGrant(text, 8).ok());  // another slot's lease
  EXPECT_FALSE(ParseAttachGrant(text, 0).ok());
  auto refused = ParseAttachGrant(hostile[1], 7);
  EXPECT_NE(refused.status().message().find("line 3 is not what uroce daemon writes: 'allow_driver_load = yes'"),
            std::string::npos)
      << refused.status().ToString();
}

TEST(DaemonProtocolTest, DevicesAnswerNamesOnlyInterfaces) {
  auto ok = ParseDevicesReply("device uroce0 netdev=eth0 gids=00000000000000000000ffff0a000001\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[0].netdev, "eth0");
  for (const char* name : {"../../../../tmp/x", "..", ".", "a/b", "a:b", "sixteen_bytes_xx", ""}) {
    EXPECT_FALSE(ValidInterfaceName(name)) << name;
    const std::string line = std::string("device uroce0 netdev=") + name + " gids=00000000000000000000ffff0a000001\n";
    EXPECT_FALSE(ParseDevicesReply(line).ok()) << line;
  }
  for (const char* name : {"eth0", "veth-a.1", "fifteen_bytes_x", "uk1234-a2"}) EXPECT_TRUE(ValidInterfaceName(name)) << name;
  std::string many;
  for (int i = 0; i < 9; ++i) many += "device uroce" + std::to_string(i) + " netdev=- gids=00000000000000000000ffff0a000001\n";
  EXPECT_FALSE(ParseDevicesReply(many).ok());
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

TEST(DaemonProtocolTest, PeerRecordsRoundTrip) {
  PeerRecord r;
  r.qpn = (3u << 16) + 17;
  ASSERT_TRUE(ParseIpAddress("10.76.0.1", &r.dest));
  r.dest_qpn = (5u << 16) + 2;
  EXPECT_EQ(FormatPeer(r), "PEER qpn=196625 dest=10.76.0.1 dest_qpn=327682");
  auto parsed = ParsePeer(FormatPeer(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->qpn, r.qpn);
  EXPECT_EQ(parsed->dest, r.dest);
  EXPECT_EQ(parsed->dest_qpn, r.dest_qpn);
  ASSERT_TRUE(ParseIpAddress("fd00:76::1", &r.dest));
  r.dest_qpn = kMaxQpn;
  parsed = ParsePeer(FormatPeer(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dest, r.dest);
  EXPECT_EQ(parsed->dest_qpn, kMaxQpn);
  // The IPv4-mapped form names the same address.
  parsed = ParsePeer("PEER qpn=2 dest=::ffff:10.76.0.1 dest_qpn=3");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  transport::Gid v4;
  ASSERT_TRUE(ParseIpAddress("10.76.0.1", &v4));
  EXPECT_EQ(parsed->dest, v4);

  auto unpeer = ParseUnpeer(FormatUnpeer(196625));
  ASSERT_TRUE(unpeer.ok()) << unpeer.status().ToString();
  EXPECT_EQ(*unpeer, 196625u);
}

TEST(DaemonProtocolTest, MalformedPeerRecordsAreRefused) {
  for (const char* bad :
       {"", "PEER", "PEER qpn=2", "PEER qpn=2 dest=10.0.0.1", "PEER qpn=2 dest=10.0.0.1 dest_qpn=",
        "PEER qpn=0 dest=10.0.0.1 dest_qpn=5", "PEER qpn=1 dest=10.0.0.1 dest_qpn=5",
        "PEER qpn=2 dest=10.0.0.1 dest_qpn=16777216", "PEER qpn=99999999999999999999 dest=10.0.0.1 dest_qpn=5",
        "PEER qpn=-2 dest=10.0.0.1 dest_qpn=5", "PEER qpn=2 dest=10.0.0.256 dest_qpn=5",
        "PEER qpn=2 dest=host dest_qpn=5", "PEER qpn=2 dest=fe80::1%eth0 dest_qpn=5", "PEER qpn=2 dest= dest_qpn=5",
        "PEER dest=10.0.0.1 qpn=2 dest_qpn=5", "PEER qpn=2 dest=10.0.0.1 dest_qpn=5 extra=1",
        "PEER qpn=2 qpn=2 dest=10.0.0.1", "PEER qpn=2 dest=10.0.0.1 dest_qpn=5\n", "PEER qpn 2 dest=10.0.0.1 dest_qpn=5",
        "PEERS qpn=2 dest=10.0.0.1 dest_qpn=5", "peer qpn=2 dest=10.0.0.1 dest_qpn=5",
        "PEER qpn=2 dest=1:2:3:4:5:6:7:8:9 dest_qpn=5", "PEER qpnx=2 dest=10.0.0.1 dest_qpn=5"}) {
    auto parsed = ParsePeer(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "' was accepted";
  }
  std::string with_newline = "PEER qpn=2 dest=10.0.0.1 dest_qpn=5\n";
  EXPECT_FALSE(ParsePeer(with_newline).ok());
  EXPECT_FALSE(ParsePeer("PEER qpn=2 dest=10.0.0.1 dest_qpn=5" + std::string(200, ' ')).ok());
  for (const char* bad : {"", "UNPEER", "UNPEER qpn=", "UNPEER qpn=1", "UNPEER qpn=16777216", "UNPEER 5",
                          "UNPEER qpn=5 qpn=6", "UNPEER qpn=5x", "UNPEERqpn=5"}) {
    EXPECT_FALSE(ParseUnpeer(bad).ok()) << "'" << bad << "' was accepted";
  }
}

TEST(DaemonProtocolTest, PeersGoneAreNotificationsInBoundedMessages) {
  std::vector<PeerGone> gone;
  EXPECT_TRUE(FormatPeersGone(gone).empty());
  for (uint32_t i = 0; i < 2 * kMaxPeersGonePerMessage + 3; ++i) gone.push_back({(7u << 16) + i, kMaxQpn - i});
  const std::vector<std::string> messages = FormatPeersGone(gone);
  ASSERT_EQ(messages.size(), 3u);
  std::vector<PeerGone> back;
  for (const std::string& m : messages) {
    EXPECT_LE(m.size(), kMaxControlMessage);
    EXPECT_TRUE(IsNotification(m)) << m.substr(0, 40);
    auto parsed = ParsePeersGone(m);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    back.insert(back.end(), parsed->begin(), parsed->end());
  }
  EXPECT_EQ(back, gone);
  EXPECT_EQ(FormatPeersGone({{196625, 327682}}), std::vector<std::string>{"PEER_GONE 196625:327682"});
  // Replies are never notifications.
  for (const char* reply : {"OK", "ERROR PEER_GONE", "OK slot=3\n", "PEER_GONE", "PEER_GONEX 2:3", ""}) {
    EXPECT_FALSE(IsNotification(reply)) << reply;
  }
  for (const char* bad : {"PEER_GONE", "PEER_GONE ", "PEER_GONE 2", "PEER_GONE 2:", "PEER_GONE :3", "PEER_GONE 1:3",
                          "PEER_GONE 2:16777216", "PEER_GONE 2:3 4", "PEER_GONE 2:3:4", "PEER_GONE 2;3",
                          "PEER_GONE 2:3\n4:5", "OK", "peer_gone 2:3", " PEER_GONE 2:3"}) {
    EXPECT_FALSE(ParsePeersGone(bad).ok()) << "'" << bad << "' was accepted";
  }
  std::string too_many = "PEER_GONE";
  for (size_t i = 0; i <= kMaxPeersGonePerMessage; ++i) too_many += " 2:3";
  EXPECT_FALSE(ParsePeersGone(too_many).ok());
}

TEST(DaemonProtocolTest, LinkChangesAreStrictNotifications) {
  for (const LinkChange& c : {LinkChange{0, 1, true}, LinkChange{7, 254, false}, LinkChange{3, 17, true},
                              LinkChange{3, 17, true, 4194304, 1000}, LinkChange{1, 2, true, 1, 0}}) {
    const std::string m = FormatLinkChange(c);
    EXPECT_TRUE(IsNotification(m)) << m;
    EXPECT_TRUE(IsLinkChange(m)) << m;
    auto back = ParseLinkChange(m);
    ASSERT_TRUE(back.ok()) << m << ": " << back.status().ToString();
    EXPECT_EQ(*back, c);
  }
  EXPECT_EQ(FormatLinkChange({2, 5, true}), "LINK 2 5");
  EXPECT_EQ(FormatLinkChange({0, 9, false}), "UNLINK 0 9");
  EXPECT_EQ(FormatLinkChange({2, 5, true, 1234, 1000}), "LINK 2 5 pid=1234 uid=1000");
  for (const char* bad : {"LINK", "LINK 0", "LINK 0 0", "LINK 8 1", "LINK 0 255", "LINK 0 1 2", "LINK  0 1",
                          "LINK 0 1 ", " LINK 0 1", "link 0 1", "LINK -1 3", "LINK 0 0x3", "UNLINK 0", "LINKS 0 1",
                          "LINK 00000000000000000000001 1", "LINK 0 1 pid=0 uid=0", "LINK 0 1 pid=5",
                          "LINK 0 1 uid=5 pid=5", "UNLINK 0 1 pid=5 uid=5", "LINK 0 1 pid=5 uid=-1",
                          "LINK 0 1 pid=2147483648 uid=0", "LINK 0 1 pid=5 uid=4294967296", "LINK 0 1 pid=5  uid=5",
                          "LINK 0 1 pid=5 uid=5 ", "LINK 0 1 pid= uid=5", "LINK 0 1 pid=5 uid=5 x=1"}) {
    EXPECT_FALSE(ParseLinkChange(bad).ok()) << "'" << bad << "' was accepted";
  }
  EXPECT_FALSE(IsNotification("LINK"));
  EXPECT_FALSE(IsNotification("LINKS 0 1"));
}

}  // namespace
}  // namespace uroce::host
