#include "pmd/eal_test_environment.h"

#include <gtest/gtest.h>

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
