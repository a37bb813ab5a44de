#include "host/udp_port_holders.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uroce::host {
namespace {

// Rows as Linux 6.1 prints them (proc(5)); 0x12B7 is 4791.
constexpr char kUdp[] =
    "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
    "  112: 00000000:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000 65534        0 81234 2 0000000000000000 0\n"
    "  113: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 1111 2 0000000000000000 0\n"
    "  114: 0A4B0001:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 0 2 0000000000000000 0\n"
    "  junk\n";
constexpr char kUdp6[] =
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when "
    "retrnsmt   uid  timeout inode ref pointer drops\n"
    "  7: 00000000000000000000000000000000:12B7 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 "
    "00000000  1000        0 4242 2 0000000000000000 0\n";

TEST(UdpPortHolders, ParsesTheRowsOfThePortOnly) {
  const auto v4 = ParseProcNetUdp(kUdp, false, 4791);
  ASSERT_EQ(v4.size(), 2u);
  EXPECT_EQ(v4[0].local_address, "00000000");
  EXPECT_EQ(v4[0].uid, 65534u);
  EXPECT_EQ(v4[0].inode, 81234u);
  EXPECT_FALSE(v4[0].ipv6);
  EXPECT_EQ(v4[1].inode, 0u);  // the kernel's own socket
  EXPECT_EQ(DescribeHolder(v4[1]), "the kernel (a socket of its own: rdma_rxe?)");
  const auto v6 = ParseProcNetUdp(kUdp6, true, 4791);
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_TRUE(v6[0].ipv6);
  EXPECT_EQ(v6[0].uid, 1000u);
  EXPECT_TRUE(ParseProcNetUdp(kUdp, false, 53).size() == 1);
  EXPECT_TRUE(ParseProcNetUdp("", false, 4791).empty());
  EXPECT_TRUE(ParseProcNetUdp("1: zz:zz", false, 4791).empty());
}

TEST(UdpPortHolders, FindsThisProcessHoldingAPort) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);  // a free port, the kernel's choice
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const auto holders = UdpPortHolders(ntohs(a.sin_port));
  close(fd);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].local_address, "0100007F");
  EXPECT_EQ(holders[0].uid, geteuid());
  ASSERT_EQ(holders[0].pids.size(), 1u);
  EXPECT_EQ(holders[0].pids[0], getpid());
  EXPECT_NE(DescribeHolder(holders[0]).find("pid " + std::to_string(getpid()) + " "), std::string::npos)
      << DescribeHolder(holders[0]);
}

}  // namespace
}  // namespace uroce::host
