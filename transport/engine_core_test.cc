// The engine-thread check (UROCE_DCHECK_ENGINE_THREAD): the progress token
// records its holder, and a stage entered by a thread that does not hold it
// aborts in checked builds (common/check.h). Plain builds skip these tests.
#include "transport/engine_core.h"

#include <gtest/gtest.h>

#include <thread>

namespace uroce::transport {
namespace {

EngineConfig SmallConfig() {
  EngineConfig config;
  config.max_qps = 4;
  return config;
}

TEST(EngineThreadCheckTest, TheTokenRecordsItsHolder) {
  if (!kDchecksEnabled) GTEST_SKIP() << "built without UROCE_DCHECKS";
  EngineCore core(SmallConfig());
  EXPECT_FALSE(core.TokenHeldByThisThread());
  {
    ProgressToken token(core);
    EXPECT_TRUE(core.TokenHeldByThisThread());
    bool other_thread_holds = true;
    std::thread([&] { other_thread_holds = core.TokenHeldByThisThread(); }).join();
    EXPECT_FALSE(other_thread_holds);
  }
  EXPECT_FALSE(core.TokenHeldByThisThread());
}

TEST(EngineThreadCheckDeathTest, EngineThreadStateTouchedWithoutTheTokenAborts) {
  if (!kDchecksEnabled) GTEST_SKIP() << "built without UROCE_DCHECKS";
  EngineCore core(SmallConfig());
  EXPECT_DEATH(UROCE_DCHECK_ENGINE_THREAD(core), "TokenHeldByThisThread");
}

TEST(EngineThreadCheckDeathTest, TakingTheTokenAgainOnItsHoldersThreadAborts) {
  if (!kDchecksEnabled) GTEST_SKIP() << "built without UROCE_DCHECKS";
  EngineCore core(SmallConfig());
  // Without the check this would wait for itself for ever.
  EXPECT_DEATH(
      {
        ProgressToken first(core);
        ProgressToken second(core);
      },
      "TokenHeldByThisThread");
}

}  // namespace
}  // namespace uroce::transport
