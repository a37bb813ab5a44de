#include "tools/device_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace uroce::tools {
namespace {

std::string FileText(const DeviceTree& tree, const std::string& path) {
  for (const auto& [p, text] : tree.sys_files) {
    if (p == path) return text;
  }
  return "<missing>";
}

// What UCX and rdma-core read, for a device on a virtual
// port and one whose address a kernel interface holds.
TEST(DeviceFilesTest, TreeHasWhatUcxAndRdmaCmRead) {
  PresentedDevice ring;
  ring.index = 0;
  transport::Gid v4{};
  v4[10] = v4[11] = 0xff;
  v4[12] = 10, v4[13] = 99, v4[14] = 0, v4[15] = 1;
  transport::Gid v6{};
  v6[0] = 0xfd;
  v6[15] = 1;
  ring.gids = {v4, v6};
  PresentedDevice kernel;
  kernel.index = 1;
  kernel.gids = {v4};
  kernel.netdev = "eth0";
  const DeviceTree tree = BuildDeviceTree({ring, kernel}, 36);

  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gids/0"), "0000:0000:0000:0000:0000:ffff:0a63:0001");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gids/1"), "fd00:0000:0000:0000:0000:0000:0000:0001");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gids/15"), "0000:0000:0000:0000:0000:0000:0000:0000");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gid_attrs/types/1"), "RoCE v2");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gid_attrs/types/2"), "<missing>") << "empty entry: no type";
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/gid_attrs/ndevs/0"), "<missing>") << "no kernel interface";
  EXPECT_EQ(FileText(tree, "infiniband/uroce1/ports/1/gid_attrs/ndevs/0"), "eth0");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/ports/1/state"), "4: ACTIVE");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/device/numa_node"), "-1");
  EXPECT_EQ(FileText(tree, "infiniband/uroce0/device/local_cpus"), "0000000f,ffffffff") << "36 CPUs";
  EXPECT_EQ(FileText(tree, "infiniband_verbs/uverbs1/ibdev"), "uroce1");
  EXPECT_EQ(FileText(tree, "infiniband_verbs/uverbs1/dev"), "231:193");
  ASSERT_EQ(tree.char_devices.size(), 2u);
  EXPECT_EQ(tree.char_devices[1].first, "infiniband/uverbs1");
  EXPECT_EQ(tree.char_devices[1].second, 193u);
  EXPECT_EQ(tree.sys_dirs, (std::vector<std::string>{"infiniband/uroce1/device/net/eth0"}));
}

// The daemon's DEVICES answer (host/daemon_client.h) as devices; anything
// else is refused, never half-read.
TEST(DeviceFilesTest, DaemonDevicesAreParsedStrictly) {
  auto devices = ParseDaemonDevices(
      "device uroce0 netdev=eth7 gids=00000000000000000000ffff0a000001,fd000000000000000000000000000001\n"
      "device uroce1 netdev=- gids=00000000000000000000ffff0a000002\n");
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].netdev, "eth7");
  ASSERT_EQ((*devices)[0].gids.size(), 2u);
  EXPECT_EQ((*devices)[0].gids[0][15], 1);
  EXPECT_EQ((*devices)[0].gids[1][0], 0xfd);
  EXPECT_EQ((*devices)[1].index, 1u);
  EXPECT_EQ((*devices)[1].gids[0][15], 2);
  for (const char* bad : {"device uroce0 netdev=- gids=0a\n", "device uroce1 netdev=- gids=\n", "hello\n",
                          "device uroce0 netdev=- gids=00000000000000000000ffff0a00000g\n",
                          // Names that would lead root's mkdir out of its scratch tree.
                          "device uroce0 netdev=../../../../../../tmp/x gids=00000000000000000000ffff0a000001\n",
                          "device uroce0 netdev=.. gids=00000000000000000000ffff0a000001\n",
                          "device uroce0 netdev=a/b gids=00000000000000000000ffff0a000001\n"}) {
    EXPECT_FALSE(ParseDaemonDevices(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace uroce::tools
