#include "common/private_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace uroce {
namespace {

class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/uroce-private-dir-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    base_ = dir;
    unsetenv("XDG_RUNTIME_DIR");
  }
  void TearDown() override {
    unsetenv("UROCE_RUNTIME_DIR");
    rmdir((base_ + "/made").c_str());
    rmdir((base_ + "/open").c_str());
    unlink((base_ + "/link").c_str());
    rmdir(base_.c_str());
  }
  std::string base_;
};

TEST_F(PrivateDirTest, MadeWithMode0700AndOwnedByUs) {
  const std::string made = base_ + "/made";
  setenv("UROCE_RUNTIME_DIR", made.c_str(), 1);
  auto dir = PrivateRuntimeDir();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(*dir, made);
  struct stat st{};
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_TRUE(PrivateRuntimeDir().ok());  // again: it exists and is ours
}

TEST_F(PrivateDirTest, ADirectoryOthersMayEnterOrASymlinkIsRefused) {
  const std::string open_dir = base_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  setenv("UROCE_RUNTIME_DIR", open_dir.c_str(), 1);
  auto refused = PrivateRuntimeDir();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("mode 0777"), std::string::npos) << refused.status().ToString();
  ASSERT_EQ(chmod(open_dir.c_str(), 0750), 0);
  EXPECT_FALSE(PrivateRuntimeDir().ok());  // the group may read
  ASSERT_EQ(chmod(open_dir.c_str(), 0700), 0);
  EXPECT_TRUE(PrivateRuntimeDir().ok());

  const std::string link = base_ + "/link";
  ASSERT_EQ(symlink(open_dir.c_str(), link.c_str()), 0);
  setenv("UROCE_RUNTIME_DIR", link.c_str(), 1);
  EXPECT_EQ(PrivateRuntimeDir().status().code(), StatusCode::kPermissionDenied);
  // Somebody else's, as another user would see it.
  EXPECT_EQ(CheckPrivateDir(open_dir, geteuid() + 1, false).code(), StatusCode::kPermissionDenied);
}

TEST_F(PrivateDirTest, XdgRuntimeDirIsUsedWhenItIsTheUsers) {
  ASSERT_EQ(chmod(base_.c_str(), 0700), 0);
  setenv("XDG_RUNTIME_DIR", base_.c_str(), 1);
  auto dir = PrivateRuntimeDir();
  unsetenv("XDG_RUNTIME_DIR");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(*dir, base_ + "/uroce");
  rmdir((base_ + "/uroce").c_str());
}

}  // namespace
}  // namespace uroce
