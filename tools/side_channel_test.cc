// The `uroce perf` side channel faces a peer it cannot trust: it listens on
// loopback unless told otherwise, every wait ends, a line
// has a length limit, a RUN beyond the tool's limits is refused, and over
// TCP each side must show it knows the one-time token.
#include "tools/side_channel.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tools/perf_side.h"

namespace uroce::tools {
namespace {

using Clock = std::chrono::steady_clock;

// A call that never returns would hang the test until Bazel's timeout; this
// ends the process with a message instead.
class Watchdog {
 public:
  explicit Watchdog(const char* what, int seconds = 20)
      : thread_([this, what, seconds] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
            std::fprintf(stderr, "%s: still waiting after %d s (an unbounded wait)\n", what, seconds);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

long long MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// A listener on loopback, an accepted channel and the client's channel.
struct Pair {
  SideChannel listener, server, client;
};

StatusOr<SideChannel> Listen(const std::string& address) { return SideChannel::Listen(address); }

void MakePair(Pair** out) {
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto client = SideChannel::Connect(listener->LocalAddress(), 2000, nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = listener->Accept(2000, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  *out = new Pair{std::move(*listener), std::move(*server), std::move(*client)};
}

// A raw TCP connection to `port` on 127.0.0.1: a peer that does not speak
// through SideChannel.
int RawConnect(const std::string& address) {
  const int port = std::atoi(address.substr(address.rfind(':') + 1).c_str());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
  return fd;
}

TEST(SideChannelTest, NoHostMeansLoopback) {
  // The channel hands its client a writable rkey without asking who it is:
  // with no host given it must not be reachable from other machines.
  auto listener = Listen(":0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const std::string bound = listener->LocalAddress();
  EXPECT_EQ(bound.rfind("127.0.0.1:", 0), 0u) << bound;
  // A client with no host goes to the same place.
  const std::string port = bound.substr(bound.rfind(':') + 1);
  Watchdog dog("connect to :PORT");
  auto client = SideChannel::Connect(":" + port, 2000, nullptr);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = listener->Accept(2000, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(client->Send("hello").ok());
  auto line = server->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "hello");

  // Every interface only when asked for by name.
  auto any = Listen("0.0.0.0:0");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->LocalAddress().rfind("0.0.0.0:", 0), 0u) << any->LocalAddress();
}

TEST(SideChannelTest, OverLongLineIsRefused) {
  Watchdog dog("over-long line");
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int raw = RawConnect(listener->LocalAddress());
  ASSERT_GE(raw, 0);
  auto server = listener->Accept(2000, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // A peer that sends 64 KiB without a newline: refused once the buffer
  // passes the limit, not buffered for ever.
  const std::string junk(64 * 1024, 'x');
  ASSERT_EQ(send(raw, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  auto line = server->Receive(2000, nullptr);
  ASSERT_FALSE(line.ok());
  EXPECT_EQ(line.status().code(), StatusCode::kInvalidArgument) << line.status().ToString();
  EXPECT_NE(line.status().message().find("longer than 8192 bytes"), std::string::npos) << line.status().ToString();
  // And the channel stays failed (the rest of the stream is not a line).
  ASSERT_EQ(send(raw, "RUN\n", 4, MSG_NOSIGNAL), 4);
  line = server->Receive(200, nullptr);
  EXPECT_EQ(line.status().code(), StatusCode::kInvalidArgument) << line.status().ToString();
  close(raw);

  // A complete line over the limit is refused too; one at the limit is not.
  Pair* p = nullptr;
  MakePair(&p);
  ASSERT_NE(p, nullptr);
  std::unique_ptr<Pair> pair(p);
  EXPECT_EQ(pair->client.Send(std::string(SideChannel::kMaxLineBytes + 1, 'y')).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(pair->client.Send(std::string(SideChannel::kMaxLineBytes, 'z')).ok());
  line = pair->server.Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(line->size(), SideChannel::kMaxLineBytes);

  const int raw2 = RawConnect(pair->listener.LocalAddress());
  ASSERT_GE(raw2, 0);
  auto server2 = pair->listener.Accept(2000, nullptr);
  ASSERT_TRUE(server2.ok());
  const std::string long_line = std::string(SideChannel::kMaxLineBytes + 100, 'w') + "\n";
  ASSERT_EQ(send(raw2, long_line.data(), long_line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(long_line.size()));
  line = server2->Receive(2000, nullptr);
  EXPECT_EQ(line.status().code(), StatusCode::kInvalidArgument) << line.status().ToString();
  close(raw2);
}

TEST(SideChannelTest, SilentPeerTimesOutWithinTheBound) {
  Watchdog dog("silent peer");
  Pair* p = nullptr;
  MakePair(&p);
  ASSERT_NE(p, nullptr);
  std::unique_ptr<Pair> pair(p);

  // A peer that connects and says nothing.
  auto start = Clock::now();
  auto line = pair->server.Receive(300, nullptr);
  EXPECT_EQ(line.status().code(), StatusCode::kUnavailable) << line.status().ToString();
  EXPECT_GE(MillisSince(start), 290);
  EXPECT_LT(MillisSince(start), 3000);

  // 0 is one look, not "for ever".
  start = Clock::now();
  line = pair->server.Receive(0, nullptr);
  EXPECT_EQ(line.status().code(), StatusCode::kUnavailable) << line.status().ToString();
  EXPECT_LT(MillisSince(start), 1000);

  // No client at all.
  start = Clock::now();
  auto none = pair->listener.Accept(0, nullptr);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
  none = pair->listener.Accept(200, nullptr);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
  EXPECT_LT(MillisSince(start), 3000);

  // A peer that never reads: Send gives up once the socket buffers are full.
  start = Clock::now();
  const std::string chunk(SideChannel::kMaxLineBytes, 'q');
  Status s;
  for (int i = 0; i < 100000 && s.ok(); ++i) s = pair->client.Send(chunk, 200);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_LT(MillisSince(start), 10000);

  // Nobody listening on a path: the client gives up at its deadline.
  const std::string path = "/tmp/uroce-side-channel-test-" + std::to_string(getpid()) + ".sock";
  start = Clock::now();
  auto client = SideChannel::Connect(path, 200, nullptr);
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status().ToString();
  EXPECT_LT(MillisSince(start), 3000);
}

TEST(SideChannelTest, UnixSocketPath) {
  Watchdog dog("unix socket");
  const std::string path = "/tmp/uroce-side-channel-test-" + std::to_string(getpid()) + "-u.sock";
  {
    auto listener = Listen(path);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    EXPECT_EQ(listener->LocalAddress(), path);
    auto client = SideChannel::Connect(path, 2000, nullptr);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto server = listener->Accept(2000, nullptr);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    ASSERT_TRUE(server->Send("INFO x").ok());
    auto line = client->Receive(2000, nullptr);
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    EXPECT_EQ(*line, "INFO x");
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the socket file outlived its listener";
  // A regular file at the path is not the channel's to remove.
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(Listen(path).ok());
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  unlink(path.c_str());
}

// A path socket is the user's own (no access for others), and a peer of another user
// (here uid 65534, from a forked child; needs root to switch users) is
// refused at both ends. The server goes on waiting for its own client.
TEST(SideChannelTest, PeersOfAnotherUserAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as another user";
  Watchdog dog("another user");
  char dir[] = "/tmp/uroce-side-channel-users.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(chmod(dir, 01777), 0);  // as /tmp: anybody may make a socket here
  const std::string path = std::string(dir) + "/perf.sock";
  // The child says how far it got on a pipe: 'c' once connected as the
  // other user ('u': could not switch users, 's': no connection).
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  auto connect_as_other_user = [&report](const std::string& to) {
    // Async-signal-safe calls only: the test has other threads.
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) {
      (void)!write(report[1], "u", 1);
      _exit(2);
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, to.data(), to.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      (void)!write(report[1], "s", 1);
      _exit(3);
    }
    (void)!write(report[1], "c", 1);
    sleep(3);
    _exit(0);
  };
  {
    auto listener = Listen(path);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u);  // nobody but its user
    // Opened for the test, so that the other user's connect reaches Accept.
    ASSERT_EQ(chmod(path.c_str(), 0666), 0);
    const pid_t other = fork();
    ASSERT_GE(other, 0);
    if (other == 0) connect_as_other_user(path);
    int status = 0;
    char got = 0;
    ASSERT_EQ(read(report[0], &got, 1), 1);
    ASSERT_EQ(got, 'c') << "the other user's client did not connect ('u': no setresuid here, 's': connect failed)";
    close(report[0]);
    close(report[1]);
    auto client = SideChannel::Connect(path, 2000, nullptr);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto server = listener->Accept(2000, nullptr);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    ASSERT_TRUE(client->Send("RUN mine").ok());
    auto line = server->Receive(2000, nullptr);
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    EXPECT_EQ(*line, "RUN mine");  // our own client's, not the other user's connection
    kill(other, SIGKILL);
    waitpid(other, &status, 0);
  }
  // A server of another user at the path: our client refuses it.
  const pid_t squatter = fork();
  ASSERT_GE(squatter, 0);
  if (squatter == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 4) != 0) _exit(3);
    sleep(5);
    _exit(0);
  }
  for (int i = 0; i < 100 && access(path.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto refused = SideChannel::Connect(path, 500, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("the perf server on " + path + " is uid 65534"), std::string::npos)
      << refused.status().ToString();
  int status = 0;
  kill(squatter, SIGKILL);
  waitpid(squatter, &status, 0);
  unlink(path.c_str());
  rmdir(dir);
}

// True once the peer of `fd` closed it (recv(2) returns 0) within
// `timeout_ms`; false if it sent something or stayed open.
bool ClosedByPeer(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

// The server's Accept on a thread of its own: the client's Connect waits
// for the answer to its hello, which Accept gives.
struct AcceptThread {
  AcceptThread(SideChannel* listener, unsigned timeout_ms, std::string token)
      : thread([this, listener, timeout_ms, token] { result = listener->Accept(timeout_ms, nullptr, token); }) {}
  ~AcceptThread() {
    if (thread.joinable()) thread.join();
  }
  StatusOr<SideChannel> Join() {
    thread.join();
    return std::move(result);
  }
  StatusOr<SideChannel> result = Unavailable("not run");
  std::thread thread;
};

TEST(SideChannelTokenTest, TokensAreParsedAndFresh) {
  auto a = SideChannel::NewToken();
  auto b = SideChannel::NewToken();
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_EQ(a->size(), 2 * SideChannel::kTokenBytes);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  auto parsed = SideChannel::ParseToken("00112233445566778899AABBCCDDEEFF");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, "00112233445566778899aabbccddeeff");
  for (const char* bad : {"", "none", "0011223344556677", "00112233445566778899aabbccddeeff00",
                          "00112233445566778899aabbccddeefg", "00112233445566778899aabbccddee f"}) {
    auto token = SideChannel::ParseToken(bad);
    ASSERT_FALSE(token.ok()) << bad;
    EXPECT_EQ(token.status().code(), StatusCode::kInvalidArgument);
    // A mistyped secret is not echoed into logs.
    if (std::strlen(bad) > 4) {
      EXPECT_EQ(token.status().message().find(bad), std::string::npos);
    }
  }
}

// Over TCP a client without the token, or with a wrong one, is closed and
// counted, and the server goes on waiting: the right client, coming after
// them (and after one that connects and says nothing), gets the channel.
TEST(SideChannelTokenTest, WrongClientsAreRefusedThenTheRightOneGetsIn) {
  Watchdog dog("token: wrong clients first");
  auto token = SideChannel::NewToken();
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const std::string address = listener->LocalAddress();
  AcceptThread server(&*listener, 10000, *token);

  // 1. No hello: a client that starts with RUN, as one without a token does.
  auto no_hello = SideChannel::Connect(address, 2000, nullptr, "");
  ASSERT_TRUE(no_hello.ok()) << no_hello.status().ToString();
  ASSERT_TRUE(no_hello->Send("RUN test=send_lat size=64 iters=10 qps=1 window=1 verify=0 idle_qps=0").ok());
  auto answer = no_hello->Receive(3000, nullptr);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->rfind("ERROR this perf server expects a hello", 0), 0u) << *answer;  // why, and no more
  answer = no_hello->Receive(3000, nullptr);
  EXPECT_EQ(answer.status().code(), StatusCode::kNotFound) << "not closed: " << answer.status().ToString();

  // 2. A hello with a wrong token: closed, without the server's half.
  auto wrong = SideChannel::NewToken();
  ASSERT_TRUE(wrong.ok());
  const int raw = RawConnect(address);
  ASSERT_GE(raw, 0);
  const std::string hello = "HELLO token=" + wrong->substr(0, 16) + "\n";
  ASSERT_EQ(send(raw, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
  EXPECT_TRUE(ClosedByPeer(raw, 3000)) << "a wrong hello got an answer or stayed open";
  close(raw);

  // 2b. Through SideChannel: the client says why.
  auto refused = SideChannel::Connect(address, 2000, nullptr, *wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("closed the connection at the hello"), std::string::npos)
      << refused.status().ToString();

  // 3. One that connects and says nothing stays behind, not in the way.
  const int silent = RawConnect(address);
  ASSERT_GE(silent, 0);

  // 4. The right client.
  const auto start = Clock::now();
  auto client = SideChannel::Connect(address, 3000, nullptr, *token);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_LT(MillisSince(start), 2000) << "the right client waited behind the silent one";
  auto accepted = server.Join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  EXPECT_EQ(listener->refused(), 3u);  // 1, 2 and 2b; the silent one was still within its time
  ASSERT_TRUE(client->Send("RUN mine").ok());
  auto line = accepted->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "RUN mine");
  ASSERT_TRUE(accepted->Send("INFO yours").ok());
  line = client->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "INFO yours");
  // Accept has returned: the silent client is closed.
  EXPECT_TRUE(ClosedByPeer(silent, 3000));
  close(silent);
}

// A wrong hello queued ahead of the right client: both wait in Accept at
// once, and refusing the first moves the second into its place (a move
// assignment). The right client still gets in, and the heap stays whole:
// under ASan a move assignment that reused destroyed members shows here as a
// heap-use-after-free.
TEST(SideChannelTokenTest, WrongHelloQueuedAheadOfTheRightClient) {
  Watchdog dog("token: wrong hello ahead of the right client");
  auto token = SideChannel::NewToken();
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const std::string address = listener->LocalAddress();
  // Both connect (the kernel queues them) before Accept runs.
  const int wrong = RawConnect(address);
  ASSERT_GE(wrong, 0);
  const std::string hello = "HELLO token=0123456789abcdef0123456789abcdef\n";
  ASSERT_EQ(send(wrong, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
  StatusOr<SideChannel> client = Unavailable("not run");
  std::thread connecting([&] { client = SideChannel::Connect(address, 5000, nullptr, *token); });
  // The right client's hello is in the socket when Accept looks at it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto accepted = listener->Accept(5000, nullptr, *token);
  connecting.join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ(listener->refused(), 1u);
  EXPECT_TRUE(ClosedByPeer(wrong, 3000));
  close(wrong);
  ASSERT_TRUE(client->Send("RUN after the wrong one").ok());
  auto line = accepted->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "RUN after the wrong one");
}

// Move assignment over a channel that holds a partial line: the target
// takes the source's socket and buffered bytes, the source is left without
// a socket, and the target's old socket is closed.
TEST(SideChannelTest, MoveAssignmentTakesSocketAndBufferedBytes) {
  Watchdog dog("move assignment");
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int raw_a = RawConnect(listener->LocalAddress());
  ASSERT_GE(raw_a, 0);
  auto a = listener->Accept(2000, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int raw_b = RawConnect(listener->LocalAddress());
  ASSERT_GE(raw_b, 0);
  auto b = listener->Accept(2000, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // Partial lines longer than a short string's inline room, so that each
  // buffer lives on the heap.
  const std::string head_a = "a line that client a is still in the middle of";
  const std::string head_b = "a line that client b is still in the middle of";
  ASSERT_EQ(send(raw_a, head_a.data(), head_a.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head_a.size()));
  ASSERT_EQ(send(raw_b, head_b.data(), head_b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head_b.size()));
  for (SideChannel* server : {&*a, &*b}) {
    auto none = server->Receive(200, nullptr);  // takes the partial line into the buffer
    ASSERT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
  }
  *a = std::move(*b);
  EXPECT_TRUE(ClosedByPeer(raw_a, 2000)) << "the target's old socket was not closed";
  auto moved_from = b->Receive(0, nullptr);
  EXPECT_FALSE(moved_from.ok()) << "the moved-from channel still reads: " << *moved_from;
  const std::string tail = ", now ended\n";
  ASSERT_EQ(send(raw_b, tail.data(), tail.size(), MSG_NOSIGNAL), static_cast<ssize_t>(tail.size()));
  auto line = a->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, head_b + ", now ended");
  close(raw_a);
  close(raw_b);
}

// Only wrong clients: the server gives up at its deadline and says how many
// it refused.
TEST(SideChannelTokenTest, ServerGivesUpAtItsDeadline) {
  Watchdog dog("token: deadline");
  auto token = SideChannel::NewToken();
  ASSERT_TRUE(token.ok());
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  const int raw = RawConnect(listener->LocalAddress());
  ASSERT_GE(raw, 0);
  ASSERT_EQ(send(raw, "RUN\n", 4, MSG_NOSIGNAL), 4);
  const auto start = Clock::now();
  auto accepted = listener->Accept(500, nullptr, *token);
  ASSERT_FALSE(accepted.ok());
  EXPECT_EQ(accepted.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(accepted.status().message().find("1 refused"), std::string::npos) << accepted.status().ToString();
  EXPECT_LT(MillisSince(start), 3000);
  close(raw);
}

// A server that does not know the whole token is refused by the client:
// here one whose first half is right (it takes the client's hello) and whose
// second half is not, and one that just mirrors the client's hello back.
TEST(SideChannelTokenTest, ServerWithAWrongTokenIsRefused) {
  Watchdog dog("token: wrong server");
  auto token = SideChannel::NewToken();
  auto other = SideChannel::NewToken();
  ASSERT_TRUE(token.ok() && other.ok());
  const std::string half_right = token->substr(0, 16) + other->substr(16);
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  {
    AcceptThread server(&*listener, 5000, half_right);
    auto client = SideChannel::Connect(listener->LocalAddress(), 3000, nullptr, *token);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
    EXPECT_NE(client.status().message().find("did not answer the hello with the token's other half"),
              std::string::npos)
        << client.status().ToString();
    EXPECT_TRUE(server.Join().ok());  // the server was satisfied; the client was not
  }
  {
    // The mirror: a listener with no token that sends back what it got.
    std::thread mirror([&listener] {
      auto ch = listener->Accept(5000, nullptr);
      if (!ch.ok()) return;
      auto line = ch->Receive(3000, nullptr);
      if (line.ok()) (void)ch->Send(*line);
      (void)ch->Receive(3000, nullptr);  // until the client closes
    });
    auto client = SideChannel::Connect(listener->LocalAddress(), 3000, nullptr, *token);
    mirror.join();
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  }
}

// No token on either side (`--token none`): no hello, the first line is the
// caller's. A client with a token against a server without one gets the
// server's ERROR (as `uroce perf` sends it) as a refusal.
TEST(SideChannelTokenTest, NoTokenOnBothSides) {
  Watchdog dog("token: none");
  auto listener = Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  {
    auto client = SideChannel::Connect(listener->LocalAddress(), 2000, nullptr, "");
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto server = listener->Accept(2000, nullptr, "");
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    ASSERT_TRUE(client->Send("RUN first").ok());
    auto line = server->Receive(2000, nullptr);
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    EXPECT_EQ(*line, "RUN first");
  }
  auto token = SideChannel::NewToken();
  ASSERT_TRUE(token.ok());
  std::thread none_server([&listener] {
    auto ch = listener->Accept(5000, nullptr, "");
    if (!ch.ok()) return;
    auto line = ch->Receive(3000, nullptr);
    if (line.ok() && line->rfind("HELLO ", 0) == 0) (void)ch->Send("ERROR this server takes no token");
    (void)ch->Receive(3000, nullptr);
  });
  auto client = SideChannel::Connect(listener->LocalAddress(), 3000, nullptr, *token);
  none_server.join();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  EXPECT_NE(client.status().message().find("--token none"), std::string::npos) << client.status().ToString();
}

// On a path the token is optional, and works the same when both sides have it.
TEST(SideChannelTokenTest, TokenOverAPath) {
  Watchdog dog("token: path");
  const std::string path = "/tmp/uroce-side-channel-test-" + std::to_string(getpid()) + "-t.sock";
  auto token = SideChannel::NewToken();
  ASSERT_TRUE(token.ok());
  auto listener = Listen(path);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  AcceptThread server(&*listener, 5000, *token);
  auto client = SideChannel::Connect(path, 3000, nullptr, *token);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto accepted = server.Join();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  ASSERT_TRUE(client->Send("RUN path").ok());
  auto line = accepted->Receive(2000, nullptr);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "RUN path");
}

TEST(RunSpecTest, AbsurdRunIsRefused) {
  RunSpec sane;
  sane.test = PerfTest::kWriteBw;
  sane.size = 65536;
  sane.iters = 1000;
  sane.qps = 2;
  sane.window = 64;
  sane.idle_qps = 5;
  auto back = RunSpec::Decode(sane.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->size, 65536u);
  EXPECT_EQ(back->window, 64u);
  EXPECT_EQ(back->idle_qps, 5u);

  const char* refused[] = {
      // Over a field's own limit.
      "RUN test=write_bw size=2147483648 iters=10 qps=1 window=2 verify=0 idle_qps=0",
      "RUN test=send_bw size=64 iters=1000000000000 qps=1 window=2 verify=0 idle_qps=0",
      "RUN test=send_bw size=64 iters=10 qps=100000 window=2 verify=0 idle_qps=0",
      "RUN test=send_bw size=64 iters=10 qps=1 window=1000000 verify=0 idle_qps=0",
      "RUN test=send_bw size=64 iters=10 qps=1 window=2 verify=0 idle_qps=20001",
      "RUN test=send_bw size=64 iters=10 qps=1 window=2 verify=0 idle_qps=4294967297",
      // 2^32 + 64: not taken for 64 by narrowing.
      "RUN test=send_lat size=4294967360 iters=10 qps=1 window=1 verify=0 idle_qps=0",
      // A negative number is a huge one to strtoull.
      "RUN test=send_lat size=-1 iters=10 qps=1 window=1 verify=0 idle_qps=0",
      // Each field within its limit, but 1 GiB times 2 x 4096 slots of buffer.
      "RUN test=write_bw size=1073741824 iters=10 qps=1 window=4096 verify=0 idle_qps=0",
      // Malformed.
      "RUN test=write_bw size=64 iters=10 qps=1 window=2 verify=7 idle_qps=0",
      "RUN test=nope size=64 iters=10 qps=1 window=2 verify=0 idle_qps=0",
      "RUN size=64",
      "RUN test=send_bw size=64 iters=10 qps=1 window=2 verify=0",  // no idle_qps
  };
  for (const char* line : refused) {
    auto spec = RunSpec::Decode(line);
    EXPECT_FALSE(spec.ok()) << line;
    if (!spec.ok()) {
      EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << line;
    }
  }
  auto big = RunSpec::Decode("RUN test=write_bw size=1073741824 iters=10 qps=1 window=4096 verify=0 idle_qps=0");
  EXPECT_NE(big.status().message().find("bytes of registered buffer"), std::string::npos) << big.status().ToString();

  // The largest INFO line (256 QPs, 24-bit QPNs and PSNs) fits in a line.
  SideInfo info;
  info.gid = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  info.addr = ~uint64_t{0};
  info.rkey = ~uint32_t{0};
  info.out_slots = info.in_slots = info.slot_size = ~uint32_t{0};
  for (uint64_t i = 0; i < RunSpec::kMaxQps; ++i) info.qps.emplace_back(0xFFFFFF, 0xFFFFFF);
  EXPECT_LE(info.Encode().size(), SideChannel::kMaxLineBytes);
  EXPECT_TRUE(SideInfo::Decode(info.Encode()).ok());

  // What a peer sends is shown tamed in messages.
  EXPECT_EQ(PrintableLine("a\x1b[2Jb"), "a?[2Jb");
}

}  // namespace
}  // namespace uroce::tools
