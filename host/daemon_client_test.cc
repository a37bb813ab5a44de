#include "host/daemon_client.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host/daemon_protocol.h"
#include "transport/address_text.h"

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

// A SOCK_SEQPACKET socket bound at DIR/uroce.sock in a new private
// directory (Bazel's TEST_TMPDIR is too long for a socket's path).
void BindSocketInNewDir(std::string* dir, std::string* path, int* fd) {
  char name[] = "/tmp/uroce-daemon-client-test.XXXXXX";
  ASSERT_NE(mkdtemp(name), nullptr);
  *dir = name;
  *path = *dir + "/uroce.sock";
  *fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(*fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path->data(), path->size());
  ASSERT_EQ(bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
}

class SocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override { BindSocketInNewDir(&dir_, &path_, &fd_); }
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

// A handler installed without SA_RESTART, as many programs do: a blocking
// call it interrupts fails with EINTR instead of going on.
class SignalDuringWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct sigaction action{};
    action.sa_handler = [](int) {};
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    ASSERT_EQ(sigaction(SIGUSR1, &action, &previous_), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds_), 0);
  }
  void TearDown() override {
    close(fds_[0]);
    close(fds_[1]);
    sigaction(SIGUSR1, &previous_, nullptr);
  }
  // Signals `thread` every 20 ms until `done`.
  static void Pester(pthread_t thread, const std::atomic<bool>& done) {
    while (!done.load()) {
      pthread_kill(thread, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  struct sigaction previous_{};
  int fds_[2] = {-1, -1};
};

TEST_F(SignalDuringWaitTest, ASignalDoesNotEndTheWaitForAReply) {
  std::atomic<bool> waiting{false}, done{false};
  bool readable = false;
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    waiting = true;
    const auto begin = std::chrono::steady_clock::now();
    readable = WaitReadable(fds_[0], 5000);
    waited = std::chrono::steady_clock::now() - begin;
    done = true;
  });
  while (!waiting.load()) std::this_thread::yield();
  std::thread pester([&] { Pester(waiter.native_handle(), done); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // some 15 signals
  ASSERT_EQ(send(fds_[1], "OK", 2, 0), 2);
  waiter.join();
  done = true;
  pester.join();
  EXPECT_TRUE(readable);
  EXPECT_LT(waited, std::chrono::seconds(4));
  char reply[8];
  EXPECT_EQ(recv(fds_[0], reply, sizeof(reply), MSG_DONTWAIT), 2);
}

TEST_F(SignalDuringWaitTest, TheWaitEndsAtItsTimeoutWhateverTheSignals) {
  std::atomic<bool> waiting{false}, done{false};
  bool readable = true;
  int error = 0;
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    waiting = true;
    const auto begin = std::chrono::steady_clock::now();
    readable = WaitReadable(fds_[0], 300);
    error = errno;
    waited = std::chrono::steady_clock::now() - begin;
    done = true;
  });
  while (!waiting.load()) std::this_thread::yield();
  std::thread pester([&] { Pester(waiter.native_handle(), done); });
  waiter.join();
  pester.join();
  EXPECT_FALSE(readable);
  EXPECT_EQ(error, ETIMEDOUT);
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

// A daemon played by the test: it grants an attach with one uplink and then
// answers (or does not) as each test says.
class FakeDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BindSocketInNewDir(&dir_, &path_, &listen_fd_);
    if (HasFatalFailure()) return;
    ASSERT_EQ(listen(listen_fd_, 1), 0);
    // The daemon's side of the attach, while Attach waits for it.
    std::thread daemon([this] { GrantOneAttach(); });
    auto session = DaemonSession::Attach(path_);
    daemon.join();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    session_ = std::move(*session);
    session_->set_reply_timeout_ms(200);
  }
  void TearDown() override {
    session_.reset();
    if (fd_ >= 0) close(fd_);
    close(listen_fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  void GrantOneAttach() {
    fd_ = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd_ < 0) return;
    char request[kMaxControlMessage];
    if (recv(fd_, request, sizeof(request), 0) <= 0) return;
    AttachGrant grant;
    grant.slot = 3;
    GrantEndpoint up;
    up.name = "up";
    up.mac = {0x02, 0, 0, 0, 0, 1};
    transport::ParseIpAddress("192.0.2.1", &up.gids.emplace_back());
    grant.endpoints.push_back(up);
    const std::string reply = FormatAttachReply(grant);
    const int port_file = memfd_create("uroce-test-port", MFD_CLOEXEC);  // the uplink's port, as the daemon sends
    iovec iov{const_cast<char*>(reply.data()), reply.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &port_file, sizeof(int));
    sendmsg(fd_, &mh, 0);
    close(port_file);
  }
  // The next request the session sent ("" when none came).
  std::string Request() {
    char text[kMaxControlMessage];
    const ssize_t n = recv(fd_, text, sizeof(text), MSG_DONTWAIT);
    return n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
  }
  void Answer(const std::string& text) { ASSERT_EQ(send(fd_, text.data(), text.size(), 0), ssize_t(text.size())); }

  std::string dir_, path_;
  int listen_fd_ = -1;
  int fd_ = -1;  // the daemon's end of the session
  std::unique_ptr<DaemonSession> session_;
};

// The daemon answers every request in order. A claim that gave up waiting
// leaves its answer to come: the next claim must skip it and take its own,
// whether that answer comes before the next claim or is read by the
// progress thread's DaemonGone first.
TEST_F(FakeDaemonTest, ALateAnswerIsNeverTakenForTheNextClaims) {
  const Status gave_up = session_->ClaimPort(6000, true);
  EXPECT_EQ(gave_up.code(), StatusCode::kUnavailable) << gave_up.ToString();
  EXPECT_EQ(Request(), FormatPortClaim({6000, true}));
  // The daemon comes back: port 6000 was granted; 6001 is someone else's.
  Answer("OK");
  Answer("ERROR port 6001 is taken");
  const Status taken = session_->ClaimPort(6001, true);
  EXPECT_EQ(taken.code(), StatusCode::kAlreadyExists) << taken.ToString();
  EXPECT_EQ(Request(), FormatPortClaim({6001, true}));

  // A late answer with a notification ahead of it, both read by DaemonGone.
  EXPECT_EQ(session_->ClaimPort(6002, true).code(), StatusCode::kUnavailable);
  Answer(FormatPeersGone({PeerGone{(3u << kDaemonQpnShift) | 5, 99}})[0]);
  Answer("ERROR port 6002 is taken");
  EXPECT_FALSE(session_->DaemonGone());
  Answer("OK");
  EXPECT_TRUE(session_->ClaimPort(6003, true).ok());
  const std::vector<PeerGone> gone = session_->TakePeersGone();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].qpn, (3u << kDaemonQpnShift) | 5);
}

}  // namespace
}  // namespace uroce::host
