// The transport under a bad link: loss, reordering, duplication and
// corruption, from fixed seeds so any failure replays (`uroce soak --seed S`
// with the same flags runs the same thing).
#include <gtest/gtest.h>

#include "testing/soak.h"

namespace uroce::transport {
namespace {

void ExpectClean(const StatusOr<SoakResult>& r) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->errors, 0u) << r->first_error;
  EXPECT_EQ(r->verified, r->messages);
  EXPECT_TRUE(r->mbufs_all_returned);
}

TEST(LossTest, OnePercentLossWithReorderAndDuplicatesOver100kMessages) {
  SoakOptions o;
  o.seed = 20261122;
  o.messages = 100000;
  o.qps = 4;
  o.max_size = 2048;
  o.impairments.loss = 0.01;
  o.impairments.reorder = 0.01;
  o.impairments.duplicate = 0.01;
  auto r = RunSoak(o, {});
  ExpectClean(r);
  // The impairments really happened and were repaired.
  EXPECT_GT(r->link_dropped, 100u);
  EXPECT_GT(r->link_duplicated, 100u);
  EXPECT_GT(r->retransmits, 0u);
}

TEST(LossTest, CorruptedFramesAreDroppedByIcrcAndRepaired) {
  SoakOptions o;
  o.seed = 7;
  o.messages = 5000;
  o.qps = 2;
  o.max_size = 8192;
  o.impairments.corrupt = 0.02;
  auto r = RunSoak(o, {});
  ExpectClean(r);
  EXPECT_GT(r->link_corrupted, 10u);
  EXPECT_GT(r->icrc_drops, 0u);
}

TEST(LossTest, LargeMessagesAtEveryPathMtu) {
  for (uint32_t mtu : {256u, 1024u, 4096u}) {
    SoakOptions o;
    o.seed = mtu;
    o.messages = 600;
    o.qps = 2;
    o.max_size = 256 * 1024;
    o.path_mtu_bytes = mtu;
    o.impairments.loss = 0.005;
    o.impairments.reorder = 0.005;
    auto r = RunSoak(o, {});
    ExpectClean(r);
  }
}

// Selective retransmission offered by both sides, by one side only (a mixed
// pair: go-back-N both ways), and by neither, over the same bad link: every
// byte and completion checked each time; only a pair that both offer it holds
// packets after a gap (placing WRITE packets on arrival) and resends single
// packets.
TEST(LossTest, SelectiveMixedAndGoBackNPairsOverLossReorderDuplicationAndCorruption) {
  struct Pairing {
    const char* name;
    bool a, b;
  };
  for (const Pairing& pairing : {Pairing{"both", true, true}, Pairing{"a only", true, false},
                                 Pairing{"b only", false, true}, Pairing{"neither", false, false}}) {
    SoakOptions o;
    o.seed = 2026112801;
    o.messages = 6000;
    o.qps = 4;
    o.max_size = 32768;
    o.impairments.loss = 0.02;
    o.impairments.reorder = 0.01;
    o.impairments.duplicate = 0.01;
    o.impairments.corrupt = 0.005;
    o.selective_a = pairing.a;
    o.selective_b = pairing.b;
    auto r = RunSoak(o, {});
    ExpectClean(r);
    if (!r.ok()) continue;
    const bool selective = pairing.a && pairing.b;
    EXPECT_EQ(r->held_packets > 0, selective) << pairing.name;
    EXPECT_EQ(r->placed_ahead > 0, selective) << pairing.name;
    EXPECT_LT(r->placed_ahead, r->held_packets + 1) << pairing.name;
    EXPECT_EQ(r->selective_resends > 0, selective) << pairing.name;
    EXPECT_GT(r->link_dropped, 100u) << pairing.name;
  }
}

TEST(LossTest, SameSeedSameRun) {
  SoakOptions o;
  o.seed = 99;
  o.messages = 2000;
  o.impairments.loss = 0.02;
  o.impairments.duplicate = 0.02;
  auto first = RunSoak(o, {});
  auto second = RunSoak(o, {});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->retransmits, second->retransmits);
  EXPECT_EQ(first->link_dropped, second->link_dropped);
}

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

TEST(SoakOverDpdkRingTest, MixedWorkloadOverANetRingPair) {
  SoakOptions o;
  o.dpdk_ring = true;
  o.messages = 5000;
  o.qps = 3;
  o.max_size = 32768;
  auto r = RunSoak(o, {});
  ExpectClean(r);
  o.impairments.loss = 0.1;  // impairments belong to the in-memory link
  EXPECT_FALSE(RunSoak(o, {}).ok());
}

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

// Duplicated READ requests must not fill the responder's queue so that a new
// READ is refused (NAK invalid request, QP in ERR).
TEST(LossTest, DuplicatedReadsNeverCrowdOutNewOnes) {
  // `uroce soak --messages 100 --qps 1 --max-size 67165 --mtu 256 --loss 0.03
  // --reorder 0.01 --dup 0.01 --corrupt 0.005 --delay 3 --seed 35` duplicates
  // READs so that, without that guarantee, its message 7 fails.
  SoakOptions o;
  o.seed = 35;
  o.messages = 100;
  o.qps = 1;
  o.max_size = 67165;
  o.path_mtu_bytes = 256;
  o.impairments.loss = 0.03;
  o.impairments.reorder = 0.01;
  o.impairments.duplicate = 0.01;
  o.impairments.corrupt = 0.005;
  o.impairments.max_delay = 3;
  ExpectClean(RunSoak(o, {}));
}

}  // namespace
}  // namespace uroce::transport
