#include "cm/cm_state.h"

#include <gtest/gtest.h>

#include <string>

namespace uroce::cm {
namespace {

using S = CmState;

TEST(CmStateTest, EveryStateHasItsOwnName) {
  const S all[] = {S::kReqSent, S::kReqReceived, S::kRepSent, S::kEstablished, S::kDreqSent, S::kTimewait, S::kClosed};
  for (S a : all) {
    for (S b : all) {
      if (a != b) {
        EXPECT_NE(std::string(CmStateName(a)), CmStateName(b));
      }
    }
  }
  EXPECT_STREQ(CmStateName(static_cast<S>(200)), "invalid");
}

TEST(CmStateTest, ConnectionsEstablishOnlyThroughTheHandshake) {
  // Active: REQ, REP, RTU. Passive: REQ, REP, RTU.
  EXPECT_TRUE(CmTransitionAllowed(S::kClosed, S::kReqSent));
  EXPECT_TRUE(CmTransitionAllowed(S::kReqSent, S::kEstablished));
  EXPECT_TRUE(CmTransitionAllowed(S::kClosed, S::kReqReceived));
  EXPECT_TRUE(CmTransitionAllowed(S::kReqReceived, S::kRepSent));
  EXPECT_TRUE(CmTransitionAllowed(S::kRepSent, S::kEstablished));
  // Nothing skips a step or goes back.
  EXPECT_FALSE(CmTransitionAllowed(S::kClosed, S::kEstablished));
  EXPECT_FALSE(CmTransitionAllowed(S::kReqReceived, S::kEstablished));
  EXPECT_FALSE(CmTransitionAllowed(S::kEstablished, S::kReqSent));
  EXPECT_FALSE(CmTransitionAllowed(S::kEstablished, S::kRepSent));
}

TEST(CmStateTest, AnEstablishedConnectionEndsOnlyThroughRelease) {
  EXPECT_TRUE(CmTransitionAllowed(S::kEstablished, S::kDreqSent));
  EXPECT_TRUE(CmTransitionAllowed(S::kEstablished, S::kTimewait));
  EXPECT_TRUE(CmTransitionAllowed(S::kDreqSent, S::kTimewait));
  // A REJ cannot end an established connection: it answers a REQ or a REP
  // (IBTA 12.6.7).
  EXPECT_FALSE(CmTransitionAllowed(S::kEstablished, S::kClosed));
  EXPECT_FALSE(CmTransitionAllowed(S::kDreqSent, S::kClosed));
  // Time wait is the end.
  for (S to : {S::kReqSent, S::kReqReceived, S::kRepSent, S::kEstablished, S::kDreqSent, S::kClosed}) {
    EXPECT_FALSE(CmTransitionAllowed(S::kTimewait, to)) << CmStateName(to);
  }
  EXPECT_FALSE(CmTransitionAllowed(S::kTimewait, static_cast<S>(200)));
}

}  // namespace
}  // namespace uroce::cm
