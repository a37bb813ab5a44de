#include "pmd/threads.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace uroce::pmd {
namespace {

TEST(Threads, ParseCpuList) {
  std::vector<unsigned> cpus;
  ASSERT_TRUE(ParseCpuList("0-2,5", &cpus));
  EXPECT_EQ(cpus, (std::vector<unsigned>{0, 1, 2, 5}));
  ASSERT_TRUE(ParseCpuList("", &cpus));
  EXPECT_TRUE(cpus.empty());
  for (const char* bad : {"x", "1-", "-1", "3-1", "1,,2", "1 2", "2048", "1@0"}) {
    EXPECT_FALSE(ParseCpuList(bad, &cpus)) << bad;
  }
}

TEST(Threads, AHelperIsNamedAndPlacedAndListed) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  unsigned cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;  // one CPU we may use
  int helper_tid = 0;
  cpu_set_t seen;
  CPU_ZERO(&seen);
  std::thread helper([&] {
    PlaceHelperThread("uroce-test-help", {cpu});
    helper_tid = static_cast<int>(gettid());
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    EXPECT_TRUE(sigismember(&mask, SIGTERM));  // process signals go elsewhere
    EXPECT_TRUE(sigismember(&mask, SIGINT));
    sched_getaffinity(0, sizeof(seen), &seen);
    const std::vector<ThreadPlacement> threads = ReadThreadPlacements();
    bool listed = false;
    for (const ThreadPlacement& t : threads) {
      if (t.tid != helper_tid) continue;
      listed = true;
      EXPECT_EQ(t.name, "uroce-test-help");
      EXPECT_EQ(t.allowed_cpus, std::to_string(cpu));
      EXPECT_EQ(t.last_cpu, static_cast<int>(cpu));
    }
    EXPECT_TRUE(listed);
  });
  helper.join();
  EXPECT_EQ(CPU_COUNT(&seen), 1);
  EXPECT_TRUE(CPU_ISSET(cpu, &seen));
  // The main thread is listed too, under its pid.
  bool main_listed = false;
  for (const ThreadPlacement& t : ReadThreadPlacements()) main_listed |= t.tid == getpid();
  EXPECT_TRUE(main_listed);
}

}  // namespace
}  // namespace uroce::pmd
