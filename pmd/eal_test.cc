#include "pmd/eal.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace uroce::pmd {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(EalArgumentsTest, TestDefaultsAvoidHugepagesAndPci) {
  EalConfig config;
  config.file_prefix = "p1";
  config.vdevs = {"net_ring0", "net_memif,role=server"};
  std::vector<std::string> args = EalArguments(config);
  EXPECT_TRUE(Contains(args, "--no-huge"));
  EXPECT_TRUE(Contains(args, "--no-shconf"));
  EXPECT_TRUE(Contains(args, "--no-pci"));
  EXPECT_FALSE(Contains(args, "--in-memory"));  // EAL refuses it with --no-huge
  EXPECT_TRUE(Contains(args, "net_memif,role=server"));
  auto prefix = std::find(args.begin(), args.end(), "--file-prefix");
  ASSERT_NE(prefix, args.end());
  EXPECT_EQ(*(prefix + 1), "p1");
}

TEST(EalArgumentsTest, HugepagesAndPciWhenAsked) {
  EalConfig config;
  config.hugepages = true;
  config.pci = true;
  std::vector<std::string> args = EalArguments(config);
  EXPECT_FALSE(Contains(args, "--no-huge"));
  EXPECT_FALSE(Contains(args, "--no-pci"));
}

TEST(EalArgumentsTest, UniqueFilePrefixes) {
  std::string a = UniqueFilePrefix(), b = UniqueFilePrefix();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("uroce-", 0), 0u);
}

TEST(EalArgumentsTest, LcoreLists) {
  EXPECT_EQ(ParseLcoreList("0"), (std::vector<unsigned>{0}));
  EXPECT_EQ(ParseLcoreList("0-2"), (std::vector<unsigned>{0, 1, 2}));
  EXPECT_EQ(ParseLcoreList("3,1"), (std::vector<unsigned>{1, 3}));
  EXPECT_EQ(ParseLcoreList("0@0,1@(0-1)"), (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(ParseLcoreList("(0,1)@(0-1)"), (std::vector<unsigned>{0, 1}));
  EXPECT_TRUE(ParseLcoreList("").empty());
  EXPECT_TRUE(ParseLcoreList("a").empty());
  EXPECT_TRUE(ParseLcoreList("2-1").empty());
  EXPECT_TRUE(ParseLcoreList("0,").empty());
}

}  // namespace
}  // namespace uroce::pmd
