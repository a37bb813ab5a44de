#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/private_dir.h"
#include "configs/builtin_configs.h"
#include "runtime/config.h"

namespace uroce {
namespace {

TEST(ConfigsTest, EveryFileLoads) {
  for (const char* name : {"ring", "pair-a", "pair-b", "veth-a", "veth-b", "daemon-kernel"}) {
    auto c = runtime::LoadConfigFile(std::string("configs/") + name + ".ini");
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().ToString();
  }
}

TEST(ConfigsTest, BuiltinsMatchTheFiles) {
  for (const char* name : {"ring", "pair-a", "pair-b", "veth-a", "veth-b", "pci-template"}) {
    std::ifstream in(std::string("configs/") + name + ".ini");
    std::stringstream text;
    text << in.rdbuf();
    const char* builtin = configs::BuiltinConfig(name);
    ASSERT_NE(builtin, nullptr) << name;
    EXPECT_EQ(text.str(), std::string(builtin)) << name;
  }
  EXPECT_EQ(configs::BuiltinConfig("nope"), nullptr);
}

// The pair's ends leave the memif socket out: both get the same file, and
// another UROCE_PAIR another file (two pairs never meet). Each
// process gets its own DPDK file prefix at EAL start (no fixed one here).
TEST(ConfigsTest, PairEndsShareTheDefaultSocketPerPair) {
  auto socket = [](const std::string& vdev) {
    const size_t at = vdev.find(",socket=");
    if (at == std::string::npos) return std::string();
    const size_t start = at + 8;
    return vdev.substr(start, vdev.find(',', start) - start);
  };
  auto load = [&](const char* name, const char* pair) {
    if (pair == nullptr) {
      unsetenv("UROCE_PAIR");
    } else {
      setenv("UROCE_PAIR", pair, 1);
    }
    auto c = runtime::LoadConfigText(configs::BuiltinConfig(name), name);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : runtime::UroceConfig{};
  };
  const runtime::UroceConfig a = load("pair-a", "one"), b = load("pair-b", "one"), other = load("pair-b", "two");
  unsetenv("UROCE_PAIR");
  ASSERT_EQ(a.eal.vdevs.size(), 1u);
  ASSERT_EQ(b.eal.vdevs.size(), 1u);
  ASSERT_EQ(other.eal.vdevs.size(), 1u);
  EXPECT_TRUE(a.eal.file_prefix.empty() && b.eal.file_prefix.empty());
  EXPECT_NE(a.eal.lcores, b.eal.lcores);
  // In the user's private directory (common/private_dir.h), never /tmp.
  auto dir = PrivateRuntimeDir();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(socket(a.eal.vdevs[0]).rfind(*dir + "/memif-", 0), 0u) << a.eal.vdevs[0];
  EXPECT_NE(a.eal.vdevs[0].find(",socket-abstract=no"), std::string::npos);
  EXPECT_EQ(socket(a.eal.vdevs[0]), socket(b.eal.vdevs[0]));
  EXPECT_NE(socket(b.eal.vdevs[0]), socket(other.eal.vdevs[0]));
  EXPECT_LT(socket(a.eal.vdevs[0]).size(), 108u);  // sockaddr_un
  EXPECT_NE(a.eal.vdevs[0].find("role=server"), std::string::npos);
  EXPECT_NE(b.eal.vdevs[0].find("role=client"), std::string::npos);
}

TEST(ConfigsTest, PciTemplateWorksOnceUncommented) {
  std::string text = configs::BuiltinConfig("pci-template");
  // Uncomment the lines that start with ';[' or ';key'.
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.size() > 1 && line[0] == ';' && (line[1] == '[' || std::isalpha(static_cast<unsigned char>(line[1])))) {
      line = line.substr(1);
    }
    out += line + "\n";
  }
  auto c = runtime::LoadConfigText(out, "pci-template (uncommented)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoints[0].kind, runtime::PortKind::kPci);
  EXPECT_TRUE(c->eal.pci);
  EXPECT_TRUE(c->eal.hugepages);
}

}  // namespace
}  // namespace uroce
