#include "runtime/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "transport/address_text.h"

namespace uroce::runtime {
namespace {

using pmd::EalRunning;
using pmd::FindDriverLoadArgument;
using transport::GidToString;
using transport::MacToString;
using transport::ParseIpAddress;
using transport::ParseMacAddress;

constexpr char kRing[] = R"INI(
; two endpoints in one process over a net_ring pair
[eal]
lcores = 0-1
memory = 256
file_prefix = cfgtest

[engine]
progress = engine

[endpoint.a]
port = ring:demo:a
ipv4 = 10.99.0.1
mac = 02:75:72:6f:63:01
lcore = 1
mtu = 9000

[endpoint.b]
port = ring:demo:b
ipv4 = 10.99.0.2
ipv6 = fd00:75::2
gids = 10.99.1.2, fd00:76::2
lcore = 1
rx_descriptors = 512
tx_descriptors = 256
mbufs = 4095
neighbors = 10.99.0.1=02:75:72:6f:63:01
)INI";

std::string ErrorOf(const std::string& text, const std::vector<ConfigOverride>& overrides = {}) {
  auto c = LoadConfigText(text, "test.ini", overrides);
  return c.ok() ? "" : c.status().message();
}

TEST(ConfigTest, ReadsEverySection) {
  auto c = LoadConfigText(kRing, "ring.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eal.lcores, "0-1");
  EXPECT_EQ(c->eal.memory_mb, 256u);
  EXPECT_EQ(c->eal.file_prefix, "cfgtest");
  EXPECT_FALSE(c->eal.hugepages);
  EXPECT_TRUE(c->eal.vdevs.empty());  // ring pairs are made in the process, not by EAL
  EXPECT_EQ(c->progress, ProgressMode::kEngine);
  ASSERT_EQ(c->endpoints.size(), 2u);
  const EndpointConfig& a = c->endpoints[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.kind, PortKind::kRingPair);
  EXPECT_EQ(a.ring_pair, "demo");
  EXPECT_EQ(a.ring_side, 'a');
  EXPECT_FALSE(a.mac_from_port);
  EXPECT_EQ(MacToString(a.mac), "02:75:72:6f:63:01");
  EXPECT_EQ(a.mtu, 9000u);
  EXPECT_EQ(a.lcore, 1);
  ASSERT_EQ(a.gids.size(), 1u);
  EXPECT_EQ(GidToString(a.gids[0]), "10.99.0.1");
  EXPECT_TRUE(transport::IsIpv4MappedGid(a.gids[0]));
  const EndpointConfig* b = c->Find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->gids.size(), 4u);
  EXPECT_EQ(GidToString(b->gids[0]), "10.99.0.2");
  EXPECT_EQ(GidToString(b->gids[1]), "fd00:75::2");
  EXPECT_EQ(GidToString(b->gids[2]), "10.99.1.2");
  EXPECT_EQ(GidToString(b->gids[3]), "fd00:76::2");
  EXPECT_TRUE(b->mac_from_port);
  EXPECT_EQ(b->rx_descriptors, 512);
  EXPECT_EQ(b->tx_descriptors, 256);
  EXPECT_EQ(b->mbufs, 4095u);
  ASSERT_EQ(b->neighbors.size(), 1u);
  EXPECT_EQ(MacToString(b->neighbors[0].second), "02:75:72:6f:63:01");
}

TEST(ConfigTest, VdevAndPciPortsGoToEal) {
  auto c = LoadConfigText(R"INI(
[endpoint.m]
port = net_memif0,role=server,socket=/tmp/x.sock,socket-abstract=no
ipv4 = 10.0.0.1
[endpoint.n]
port = 0000:00:04.0
ipv6 = fd00::1
)INI",
                          "t.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoints[0].kind, PortKind::kVdev);
  EXPECT_EQ(c->endpoints[0].device_name, "net_memif0");
  ASSERT_EQ(c->eal.vdevs.size(), 1u);
  EXPECT_EQ(c->eal.vdevs[0], "net_memif0,role=server,socket=/tmp/x.sock,socket-abstract=no");
  EXPECT_EQ(c->endpoints[1].kind, PortKind::kPci);
  EXPECT_TRUE(c->eal.pci);
  const auto& extra = c->eal.extra_args;
  ASSERT_GE(extra.size(), 2u);
  EXPECT_EQ(extra[0], "-a");
  EXPECT_EQ(extra[1], "0000:00:04.0");
  EXPECT_EQ(c->progress, ProgressMode::kInline);  // the default
}

// memif sockets are files in a directory only the user may enter, never
// abstract names that anyone in the network namespace may take first.
TEST(ConfigTest, MemifSocketsAreNeverAbstractUnlessAskedFor) {
  auto c = LoadConfigText(R"INI(
[endpoint.a]
port = net_memif0,role=server,socket=/tmp/y.sock
ipv4 = 10.0.0.1
[endpoint.b]
port = net_memif1,role=client,socket=/tmp/z.sock,socket-abstract=yes
ipv4 = 10.0.1.1
[endpoint.c]
port = net_memif2,id=3
ipv4 = 10.0.2.1
)INI",
                          "t.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->eal.vdevs.size(), 3u);
  EXPECT_EQ(c->eal.vdevs[0], "net_memif0,role=server,socket=/tmp/y.sock,socket-abstract=no");
  EXPECT_EQ(c->eal.vdevs[1], "net_memif1,role=client,socket=/tmp/z.sock,socket-abstract=yes");  // asked for
  // No socket given: one in the private directory, mode 0700, ours.
  const std::string& v = c->eal.vdevs[2];
  const size_t at = v.find(",socket=") + 8;
  const std::string path = v.substr(at, v.find(',', at) - at);
  EXPECT_EQ(path.rfind("/tmp/uroce-memif", 0), std::string::npos) << v;
  EXPECT_NE(v.find(",socket-abstract=no"), std::string::npos) << v;
  struct stat dir{};
  ASSERT_EQ(stat(path.substr(0, path.rfind('/')).c_str(), &dir), 0) << path;
  EXPECT_EQ(dir.st_uid, geteuid());
  EXPECT_EQ(dir.st_mode & 077, 0u);
}

// The daemon's uplink on a kernel interface: nothing for EAL (the daemon
// opens it), the interface's addresses unless some are given.
TEST(ConfigTest, KernelPortsNeedNoAddressAndStayOutOfEal) {
  auto c = LoadConfigText("[endpoint.up]\nport = kernel:eth0\nkernel_io = af_packet\n", "t.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoints[0].kind, PortKind::kKernel);
  EXPECT_EQ(c->endpoints[0].interface, "eth0");
  EXPECT_EQ(c->endpoints[0].kernel_io, KernelIo::kAfPacket);
  EXPECT_TRUE(c->endpoints[0].gids.empty());
  EXPECT_TRUE(c->eal.vdevs.empty());
  EXPECT_FALSE(c->eal.pci);
  c = LoadConfigText("[endpoint.up]\nport = kernel:ens3\nipv4 = 10.0.0.5\n", "t.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoints[0].kernel_io, KernelIo::kAuto);
  EXPECT_EQ(c->endpoints[0].gids.size(), 1u);
  EXPECT_NE(ErrorOf("[endpoint.up]\nport = kernel:\n").find("kernel:IFNAME"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.up]\nport = kernel:a-name-much-too-long\n").find("at most 15"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.up]\nport = kernel:eth0,x=1\n").find("kernel:IFNAME"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.up]\nport = kernel:eth0\nkernel_io = dpdk\n").find("af_xdp"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nport = kernel:eth0\n[endpoint.b]\nport = kernel:eth0\n").find("used twice"),
            std::string::npos);
}

TEST(ConfigTest, OverridesWinAndCanAddEndpoints) {
  std::vector<ConfigOverride> o;
  for (const char* s : {"endpoint.a.ipv4=10.1.1.1", "engine.progress=inline", "eal.hugepages=yes",
                        "endpoint.c.port=net_tap0,iface=ut0", "endpoint.c.ipv4=10.1.1.3"}) {
    auto parsed = ParseOverride(s);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    o.push_back(*parsed);
  }
  auto c = LoadConfigText(kRing, "ring.ini", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(GidToString(c->endpoints[0].gids[0]), "10.1.1.1");
  EXPECT_EQ(c->progress, ProgressMode::kInline);
  EXPECT_TRUE(c->eal.hugepages);
  ASSERT_NE(c->Find("c"), nullptr);
  EXPECT_EQ(c->Find("c")->device_name, "net_tap0");
}

TEST(ConfigTest, EmptyAddressRemovesIt) {
  auto o = ParseOverride("endpoint.b.ipv4=");
  ASSERT_TRUE(o.ok());
  auto c = LoadConfigText(kRing, "ring.ini", {*o});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->Find("b")->gids.size(), 3u);
  EXPECT_EQ(GidToString(c->Find("b")->gids[0]), "fd00:75::2");
}

TEST(ConfigTest, ParseOverride) {
  auto o = ParseOverride("endpoint.a.port=net_af_packet0,iface=veth0");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->section, "endpoint.a");
  EXPECT_EQ(o->key, "port");
  EXPECT_EQ(o->value, "net_af_packet0,iface=veth0");
  EXPECT_FALSE(ParseOverride("no-equals").ok());
  EXPECT_FALSE(ParseOverride("nodot=1").ok());
  EXPECT_FALSE(ParseOverride(".key=1").ok());
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  const std::string e = ErrorOf("[eal]\nlcore = 0\n[endpoint.a]\nport=ring:p:a\nipv4=1.2.3.4\n");
  EXPECT_NE(e.find("unknown key 'lcore' in [eal]"), std::string::npos) << e;
  const std::string e2 = ErrorOf("[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nspeed=10\n");
  EXPECT_NE(e2.find("unknown key 'speed' in [endpoint.a]"), std::string::npos) << e2;
}

TEST(ConfigTest, UnknownSectionIsNamed) {
  const std::string e = ErrorOf("[ports]\nx = 1\n");
  EXPECT_NE(e.find("unknown section [ports]"), std::string::npos) << e;
}

TEST(ConfigTest, BadValuesAreNamed) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"[endpoint.a]\nport=net_null0\nipv4=10.0.0.300\n", "[endpoint.a] ipv4 = '10.0.0.300': not an IPv4 address"},
      {"[endpoint.a]\nport=net_null0\nipv6=fd00::zz\n", "[endpoint.a] ipv6 = 'fd00::zz'"},
      {"[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nmac=02:00:00:00:00\n", "[endpoint.a] mac = '02:00:00:00:00'"},
      {"[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nmac=01:00:5e:00:00:01\n", "multicast"},
      {"[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nmtu=100\n", "[endpoint.a] mtu = '100'"},
      {"[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nmbufs=lots\n", "[endpoint.a] mbufs = 'lots'"},
      {"[endpoint.a]\nport=ring:p:c\nipv4=1.2.3.4\n", "ring:PAIR:a or ring:PAIR:b"},
      {"[eal]\nhugepages=maybe\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "[eal] hugepages = 'maybe'"},
      {"[eal]\nlcores=0-\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "[eal] lcores = '0-'"},
      {"[engine]\nprogress=sometimes\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n",
       "[engine] progress = 'sometimes'"},
      {"[endpoint.a]\nport=net_null0\ngids=10.0.0.1,nonsense\n", "'nonsense' is not an IPv4 or IPv6 address"},
      {"[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nneighbors=10.0.0.2\n", "'10.0.0.2' is not IP=MAC"},
      {"[engine]\nhelper_cpus=1-\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "[engine] helper_cpus = '1-'"},
  };
  for (const Case& c : cases) {
    const std::string e = ErrorOf(c.text);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "text:\n" << c.text << "error: " << e;
  }
}

TEST(ConfigTest, ImpairSection) {
  const std::string ep = "[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n";
  auto c = LoadConfigText("[impair]\nloss = 0.02\ndup=0.001\nreorder=1e-2\ndelay_us=50\ncorrupt=0.0001\n"
                          "rnr_storm=0.3\nseed=7\ndirection=tx\nreorder_us=300\nhold_frames=64\n" + ep,
                          "test.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->impair.loss, 0.02);
  EXPECT_DOUBLE_EQ(c->impair.duplicate, 0.001);
  EXPECT_DOUBLE_EQ(c->impair.reorder, 0.01);
  EXPECT_DOUBLE_EQ(c->impair.corrupt, 0.0001);
  EXPECT_DOUBLE_EQ(c->impair.rnr_storm, 0.3);
  EXPECT_EQ(c->impair.delay_us, 50u);
  EXPECT_EQ(c->impair.reorder_us, 300u);
  EXPECT_EQ(c->impair.seed, 7u);
  EXPECT_TRUE(c->impair.tx);
  EXPECT_FALSE(c->impair.rx);
  EXPECT_EQ(c->impair.hold_frames, 64u);
  EXPECT_TRUE(c->impair.frame_faults());
  // A bottleneck alone is a frame fault too.
  auto bottleneck = LoadConfigText("[impair]\nrate_mbps=1000\nqueue_frames=32\necn_frames=8\n" + ep, "test.ini");
  ASSERT_TRUE(bottleneck.ok()) << bottleneck.status().ToString();
  EXPECT_EQ(bottleneck->impair.rate_mbps, 1000u);
  EXPECT_EQ(bottleneck->impair.queue_frames, 32u);
  EXPECT_EQ(bottleneck->impair.ecn_frames, 8u);
  EXPECT_TRUE(bottleneck->impair.frame_faults());
  EXPECT_FALSE(bottleneck->impair.spare_acks);
  auto spare = LoadConfigText("[impair]\nloss=0.02\nspare_acks=yes\n" + ep, "test.ini");
  ASSERT_TRUE(spare.ok()) << spare.status().ToString();
  EXPECT_TRUE(spare->impair.spare_acks);
  // No section: no faults.
  auto plain = LoadConfigText(ep, "test.ini");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->impair.any());
  // Strict: each bad key or value is named.
  const struct {
    const char* line;
    const char* expect;
  } bad[] = {
      {"loss=2", "[impair] loss = '2': expected a probability"},
      {"loss=-0.1", "[impair] loss = '-0.1'"},
      {"loss=0.1x", "[impair] loss = '0.1x'"},
      {"loss=nan", "[impair] loss = 'nan'"},
      {"dup=", "[impair] dup = ''"},
      {"spare_acks=maybe", "[impair] spare_acks = 'maybe': expected yes or no"},
      {"delay_us=-1", "[impair] delay_us = '-1'"},
      {"seed=seven", "[impair] seed = 'seven'"},
      {"direction=up", "[impair] direction = 'up': expected both, tx or rx"},
      {"hold_frames=1", "[impair] hold_frames = '1'"},
      {"drop=0.1", "unknown key 'drop' in [impair] (known: loss, dup,"},
  };
  for (const auto& b : bad) {
    const std::string e = ErrorOf(std::string("[impair]\n") + b.line + "\n" + ep);
    EXPECT_NE(e.find(b.expect), std::string::npos) << b.line << ": " << e;
  }
}

TEST(ConfigTest, CongestionSection) {
  const std::string ep = "[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n";
  auto plain = LoadConfigText(ep, "test.ini");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->congestion.algorithm, "none");
  auto c = LoadConfigText("[congestion]\nalgorithm=dcqcn\nalgorithm_sl3=swift\nline_rate_mbps=25000\n"
                          "min_rate_mbps=50\ntarget_delay_us=30\ncnp_interval_us=4\ncnp_dscp=26\n" +
                              ep + "congestion=swift\n",
                          "test.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->congestion.algorithm, "dcqcn");
  EXPECT_EQ(c->congestion.algorithm_by_sl[3], "swift");
  EXPECT_EQ(c->congestion.algorithm_by_sl[0], "");
  EXPECT_EQ(c->congestion.line_rate_mbps, 25000u);
  EXPECT_EQ(c->congestion.min_rate_mbps, 50u);
  EXPECT_EQ(c->congestion.target_delay_us, 30u);
  EXPECT_EQ(c->congestion.cnp_interval_us, 4u);
  EXPECT_EQ(c->congestion.cnp_dscp, 26u);
  EXPECT_EQ(plain->congestion.cnp_dscp, 48u);
  EXPECT_EQ(c->endpoints[0].congestion, "swift");
  const struct {
    const char* section;
    const char* expect;
  } bad[] = {
      {"[congestion]\nalgorithm=cubic\n", "[congestion] algorithm = 'cubic': expected one of none, dcqcn, swift, fixed_rate"},
      {"[congestion]\nalgorithm_sl16=dcqcn\n", "[congestion] algorithm_sl16 = 'dcqcn': a service level is 0..15"},
      {"[congestion]\nline_rate_mbps=0\n", "[congestion] line_rate_mbps = '0'"},
      {"[congestion]\nline_rate_mbps=100\nmin_rate_mbps=200\n",
       "[congestion] min_rate_mbps 200 is above line_rate_mbps 100"},
      {"[congestion]\nwindow=3\n", "unknown key 'window' in [congestion]"},
      {"[congestion]\ncnp_dscp=64\n", "[congestion] cnp_dscp = '64': expected a DSCP, 0..63"},
  };
  for (const auto& b : bad) {
    const std::string e = ErrorOf(std::string(b.section) + ep);
    EXPECT_NE(e.find(b.expect), std::string::npos) << b.section << ": " << e;
  }
  // The two rates are compared once all keys are read, in any order.
  auto raised = LoadConfigText("[congestion]\nmin_rate_mbps=200000\nline_rate_mbps=400000\n" + ep, "test.ini");
  ASSERT_TRUE(raised.ok()) << raised.status().ToString();
  EXPECT_NE(ErrorOf(ep + "congestion=reno\n").find("expected one of none, dcqcn, swift, fixed_rate"), std::string::npos);
}

TEST(ConfigTest, ImpairSpecOverridesTheSection) {
  const std::string text = "[impair]\nloss=0.5\nseed=3\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n";
  auto spec = ParseImpairSpec("loss=0.01, dup=0.001,reorder=0.01,delay_us=50,corrupt=0.0001,seed=7");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->size(), 6u);
  EXPECT_EQ((*spec)[1].section, "impair");
  EXPECT_EQ((*spec)[1].key, "dup");
  EXPECT_EQ((*spec)[1].value, "0.001");
  auto c = LoadConfigText(text, "test.ini", *spec);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->impair.loss, 0.01);
  EXPECT_EQ(c->impair.seed, 7u);
  EXPECT_EQ(c->impair.delay_us, 50u);
  // Without the section in the file, the flag makes it.
  auto made = LoadConfigText("[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "test.ini", *spec);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_DOUBLE_EQ(made->impair.reorder, 0.01);
  EXPECT_FALSE(ParseImpairSpec("").ok());
  EXPECT_FALSE(ParseImpairSpec("loss").ok());
  EXPECT_FALSE(ParseImpairSpec("=0.1").ok());
  EXPECT_NE(ParseImpairSpec("loss=0.1,loss=0.2").status().message().find("given twice"), std::string::npos);
  // Checked at once, as the section is.
  EXPECT_NE(ParseImpairSpec("los=0.1").status().message().find("--impair: unknown key 'los' in [impair]"),
            std::string::npos);
  EXPECT_NE(ParseImpairSpec("loss=0.1,seed=x").status().message().find("[impair] seed = 'x'"), std::string::npos);
}

TEST(ConfigTest, StructuralErrors) {
  EXPECT_NE(ErrorOf("[eal]\nmemory = 64\n").find("no [endpoint.NAME]"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nipv4=1.2.3.4\n").find("needs a port"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nport=net_null0\n").find("needs an address"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nport=ring:p:a\nipv4=1.2.3.4\n").find("needs both sides"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a-1]\nport=net_null0\nipv4=1.2.3.4\n").find("letters, digits and '_'"),
            std::string::npos);
  // A line rte_cfgfile would skip without a word.
  const std::string typo = ErrorOf("[endpoint.a]\nport=net_null0\nipv4 10.0.0.1\n");
  EXPECT_NE(typo.find("test.ini:3: 'ipv4 10.0.0.1' is neither a [section] nor key = value"), std::string::npos)
      << typo;
  EXPECT_NE(ErrorOf("[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\nipv4=1.2.3.5\n").find("set twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n[endpoint.a]\n").find("appears twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf("ipv4=1.2.3.4\n").find("before any [section]"), std::string::npos);
  EXPECT_NE(ErrorOf("[endpoint.a]\nport=net_null0,x=1\nipv4=1.2.3.4\n[endpoint.b]\nport=net_null0\nipv4=1.2.3.5\n")
                .find("used twice"),
            std::string::npos);
}

TEST(ConfigTest, HelperCpus) {
  auto c = LoadConfigText("[engine]\nhelper_cpus = 1,3-4\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "t.ini");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->engine.helper_cpus, (std::vector<unsigned>{1, 3, 4}));
  c = LoadConfigText("[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n", "t.ini");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->engine.helper_cpus.empty());  // default: inherited
}

TEST(ConfigTest, EngineProgressNeedsWorkerLcores) {
  const char* base = "[eal]\nlcores=0-1\n[engine]\nprogress=engine\n[endpoint.a]\nport=net_null0\nipv4=1.2.3.4\n";
  EXPECT_NE(ErrorOf(base).find("[endpoint.a] needs an lcore"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(base) + "lcore=3\n").find("lcore = 3 is not in [eal] lcores = 0-1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(std::string(base) + "lcore=0\n").find("is the main lcore"), std::string::npos);
  EXPECT_EQ(ErrorOf(std::string(base) + "lcore=1\n"), "");
}

// EAL's -d loads a shared object (runs its code); the
// configuration (UROCE_CONFIG, --set) does not get to do that by accident.
TEST(ConfigTest, EalDriverLoadNeedsAllowDriverLoad) {
  const std::string base = "[endpoint.a]\nport=ring:p:a\nipv4=1.2.3.4\n[endpoint.b]\nport=ring:p:b\nipv4=1.2.3.5\n";
  const char* loads[] = {
      "-d /tmp/evil.so",          "-d/tmp/evil.so",        "-vd /tmp/evil.so",
      "--driver-path /tmp/x.so",  "--driver-path=/tmp/x.so", "--driver /tmp/x.so",
      "--d=/tmp/x.so",            "--iova-mode=va -d x.so",
  };
  for (const char* args : loads) {
    const std::string text = base + "[eal]\nargs = " + args + "\n";
    const std::string e = ErrorOf(text);
    EXPECT_NE(e.find("[eal] args: '"), std::string::npos) << args << ": " << e;
    EXPECT_NE(e.find("allow_driver_load = yes"), std::string::npos) << args << ": " << e;
    // Allowed by name, in either order of the keys.
    auto ok = LoadConfigText(text + "allow_driver_load = yes\n", "t.ini");
    EXPECT_TRUE(ok.ok()) << args << ": " << ok.status().ToString();
    if (ok.ok()) {
      EXPECT_TRUE(ok->eal.allow_driver_load);
    }
    auto ok2 = LoadConfigText(base + "[eal]\nallow_driver_load = 1\nargs = " + args + "\n", "t.ini");
    EXPECT_TRUE(ok2.ok()) << args << ": " << ok2.status().ToString();
  }
  // From the command line too.
  auto o = ParseOverride("eal.args=-d/tmp/evil.so");
  ASSERT_TRUE(o.ok());
  EXPECT_NE(ErrorOf(base, {*o}).find("allow_driver_load"), std::string::npos);
  auto allow = ParseOverride("eal.allow_driver_load=yes");
  ASSERT_TRUE(allow.ok());
  EXPECT_EQ(ErrorOf(base, {*o, *allow}), "");

  // Not a driver load: other options, and a 'd' that is another option's value.
  const char* fine[] = {"--iova-mode=va", "-a 0000:00:04.0", "-ad", "-l 0-1", "--no-telemetry", "--huge-dir /d",
                        "-m 64"};
  for (const char* args : fine) {
    const std::string e = ErrorOf(base + "[eal]\nargs = " + args + "\n");
    EXPECT_EQ(e, "") << args;
  }
  EXPECT_NE(ErrorOf(base + "[eal]\nallow_driver_load = maybe\n").find("expected yes or no"), std::string::npos);
  // The default is no.
  auto c = LoadConfigText(base, "t.ini");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->eal.allow_driver_load);
}

TEST(ConfigTest, FindDriverLoadArgument) {
  EXPECT_EQ(FindDriverLoadArgument({"--lcores", "0-1", "-d", "x.so"}), "-d");
  EXPECT_EQ(FindDriverLoadArgument({"-hvdx.so"}), "-hvdx.so");
  EXPECT_EQ(FindDriverLoadArgument({"-ldd"}), "");  // -l's value is "dd"
  EXPECT_EQ(FindDriverLoadArgument({"--driver-path=x"}), "--driver-path=x");
  EXPECT_EQ(FindDriverLoadArgument({"--driver-paths"}), "");  // not an abbreviation of it
  EXPECT_EQ(FindDriverLoadArgument({"--", "-"}), "");
  // StartEal refuses it as well, for an EalConfig built by hand (before EAL
  // is touched: this test never starts EAL).
  EalConfig eal;
  eal.extra_args = {"-d", "/tmp/evil.so"};
  Status s = StartEal(eal);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("allow_driver_load"), std::string::npos) << s.ToString();
  EXPECT_FALSE(EalRunning());
}

TEST(ConfigTest, ReadsFilesAndNamesMissingOnes) {
  const std::string path = ::testing::TempDir() + "/config_test.ini";
  {
    std::ofstream out(path);
    out << kRing;
  }
  auto c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->origin, path);
  auto missing = LoadConfigFile(path + ".nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path + ".nope"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ConfigTest, AddressText) {
  transport::Gid g;
  ASSERT_TRUE(ParseIpAddress("192.168.1.2", &g));
  EXPECT_EQ(GidToString(g), "192.168.1.2");
  ASSERT_TRUE(ParseIpAddress("fe80::1", &g));
  EXPECT_EQ(GidToString(g), "fe80::1");
  EXPECT_FALSE(ParseIpAddress("fe80::1::2", &g));
  transport::MacAddress m;
  EXPECT_TRUE(ParseMacAddress("aa:bb:cc:dd:ee:ff", &m));
  EXPECT_EQ(MacToString(m), "aa:bb:cc:dd:ee:ff");
  EXPECT_FALSE(ParseMacAddress("aa:bb:cc:dd:ee:ff:00", &m));
  EXPECT_FALSE(ParseMacAddress("aa-bb-cc-dd-ee-ff", &m));
}

}  // namespace
}  // namespace uroce::runtime
