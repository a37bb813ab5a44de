#include "pmd/eal_test_environment.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <string>

#include "pmd/eal.h"

namespace uroce::pmd {
namespace {

bool g_started = false;

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    EalConfig config;
    config.program_name = "uroce_test";
    config.memory_mb = 256;
    config.log_level = "*:warning";
    // A test that runs engines on their own lcore sets UROCE_TEST_LCORES=0-1
    // (cc_test env). With fewer than two CPUs, lcore 1 shares CPU 0: slower,
    // but the same code runs.
    if (const char* lcores = secure_getenv("UROCE_TEST_LCORES"); lcores != nullptr && *lcores != '\0') {
      config.lcores = lcores;
      cpu_set_t cpus;
      if (config.lcores == "0-1" && sched_getaffinity(0, sizeof(cpus), &cpus) == 0 &&
          (!CPU_ISSET(0, &cpus) || !CPU_ISSET(1, &cpus))) {
        config.lcores = "0,1@0";
      }
    }
    Status s = StartEal(config);
    ASSERT_TRUE(s.ok()) << s.ToString();
    g_started = true;
  }
  void TearDown() override {
    if (!g_started) return;
    Status s = StopEal();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
};

// Registered during static initialisation, before gtest's main runs.
[[maybe_unused]] ::testing::Environment* const g_environment =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment);

}  // namespace

bool TestEalStarted() { return g_started; }

}  // namespace uroce::pmd
