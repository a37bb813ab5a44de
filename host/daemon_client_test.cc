#include "host/daemon_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace uroce::host {
namespace {

// Whoever answers on the daemon's socket configures the program: only root,
// the program's own user or the uid the user named is taken.
TEST(DaemonClientTest, OnlyRootThisUserOrTheNamedUidIsADaemon) {
  EXPECT_TRUE(CheckDaemonPeer(0, 10, 1000, nullptr, "/run/uroce/uroce.sock").ok());
  EXPECT_TRUE(CheckDaemonPeer(1000, 10, 1000, nullptr, "/x").ok());
  const Status other = CheckDaemonPeer(65534, 4242, 1000, nullptr, "/tmp/evil/uroce.sock");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("/tmp/evil/uroce.sock is run by uid 65534 (pid 4242)"), std::string::npos)
      << other.ToString();
  EXPECT_TRUE(CheckDaemonPeer(998, 10, 1000, "998", "/x").ok());
  EXPECT_FALSE(CheckDaemonPeer(65534, 10, 1000, "998", "/x").ok());
  EXPECT_FALSE(CheckDaemonPeer(65534, 10, 0, "", "/x").ok());  // root trusts only root, unless told
  EXPECT_EQ(CheckDaemonPeer(65534, 10, 1000, "nobody", "/x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckDaemonPeer(65534, 10, 1000, "-1", "/x").code(), StatusCode::kInvalidArgument);
}

class SocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/uroce-daemon-client-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/uroce.sock";
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  }
  void TearDown() override {
    close(fd_);
    unlink(path_.c_str());
    unlink((dir_ + "/file").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
  int fd_ = -1;
};

TEST_F(SocketPathTest, TheDirectoryMayNotLetOthersReplaceTheSocket) {
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  EXPECT_TRUE(CheckDaemonSocketPath(path_, geteuid(), nullptr).ok());
  ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);  // sticky, as /tmp: others cannot remove our socket
  EXPECT_TRUE(CheckDaemonSocketPath(path_, geteuid(), nullptr).ok());
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  const Status open_dir = CheckDaemonSocketPath(path_, geteuid(), nullptr);
  EXPECT_EQ(open_dir.code(), StatusCode::kPermissionDenied) << open_dir.ToString();
  EXPECT_NE(open_dir.message().find("mode 0777"), std::string::npos) << open_dir.ToString();
  ASSERT_EQ(chmod(dir_.c_str(), 0775), 0);
  EXPECT_FALSE(CheckDaemonSocketPath(path_, geteuid(), nullptr).ok());
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
}

TEST_F(SocketPathTest, TheSocketMustBeASocketOfAnAllowedUser) {
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  // Our own socket, seen from a user that is neither us nor root.
  if (geteuid() != 0) {
    EXPECT_EQ(CheckDaemonSocketPath(path_, geteuid() + 1, nullptr).code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(CheckDaemonSocketPath(path_, geteuid() + 1, std::to_string(geteuid()).c_str()).ok());
  }
  const std::string file = dir_ + "/file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_EQ(CheckDaemonSocketPath(file, geteuid(), nullptr).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckDaemonSocketPath(dir_ + "/none", geteuid(), nullptr).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace uroce::host
