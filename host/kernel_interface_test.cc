// The kernel's side of a kernel uplink, on what every network namespace has
// (the loopback interface); tests/daemon_kernel_test runs it on a veth pair
// with addresses, neighbours and XDP.
#include <net/if.h>

#include <gtest/gtest.h>

#include "host/kernel_interface.h"
#include "host/kernel_neighbors.h"
#include "transport/address_text.h"

namespace uroce::host {

using transport::ParseIpAddress;

namespace {

TEST(KernelInterfaceTest, NamesWhatItCannotUse) {
  auto missing = ReadKernelInterface("uroce-nope0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no network interface 'uroce-nope0'"), std::string::npos);
  // The loopback interface is no Ethernet interface: no MAC to send as.
  auto lo = ReadKernelInterface("lo");
  ASSERT_FALSE(lo.ok());
  EXPECT_NE(lo.status().message().find("not an Ethernet interface"), std::string::npos);
  EXPECT_FALSE(ReadKernelInterface("").ok());
  EXPECT_FALSE(ReadKernelInterface("a-name-much-too-long").ok());
}

TEST(KernelNeighborsTest, AnAddressNotReachedThroughTheInterfaceIsUnreachable) {
  KernelNeighbors neighbors;
  ASSERT_TRUE(neighbors.Open(if_nametoindex("lo")).ok());
  EXPECT_GE(neighbors.event_fd(), 0);
  transport::Gid local, documentation;
  ASSERT_TRUE(ParseIpAddress("127.0.0.1", &local));
  ASSERT_TRUE(ParseIpAddress("192.0.2.1", &documentation));
  transport::MacAddress mac{};
  // A local address has no unicast route; a remote one (if routed at all)
  // does not leave through lo.
  EXPECT_EQ(neighbors.Lookup(local, &mac), KernelNeighbors::Answer::kUnreachable);
  EXPECT_EQ(neighbors.Lookup(documentation, &mac), KernelNeighbors::Answer::kUnreachable);
  neighbors.DrainEvents();  // nothing to wait for
}

}  // namespace
}  // namespace uroce::host
