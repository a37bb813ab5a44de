// The soak workload (testing/soak.h) between two engines that are two
// processes of one host joined by a real local link (host/local_link_pair.h:
// two LocalLinks over one ShmChannel file): every byte and completion of a
// random mix of SEND, WRITE, READ, atomics and immediates checked, large
// messages in chunks through the link's payload area, or, with no area,
// read from the other engine's memory (transport/peer_memory.h), or, with
// both off, carried as frames (in link form, transport/link_frame.h).
#include <gtest/gtest.h>

#include "host/local_link_pair.h"
#include "pmd/eal_test_environment.h"
#include "testing/soak.h"

namespace uroce::transport {
namespace {

SoakOptions OverALocalLink(uint64_t seed, bool pulls, uint32_t stage_chunks = host::kLinkStageChunks) {
  SoakOptions o;
  o.seed = seed;
  o.messages = 4000;
  o.max_size = 131072;
  // 0: neither descriptors nor chunks; the links still say which frames
  // came in link form.
  o.pull_min_bytes = pulls ? 8192 : 0;
  o.host_ports = [stage_chunks](rte_mempool* pool) -> StatusOr<HostPorts> {
    auto links = host::LocalLinkPair::Create(pool, 1024 + 100 + 18, stage_chunks);
    if (!links.ok()) return links.status();
    HostPorts ports;
    ports.a = &(*links)->a();
    ports.b = &(*links)->b();
    ports.peer_a = &(*links)->a();
    ports.peer_b = &(*links)->b();
    ports.qpn_base_a = host::LocalLinkPair::kSlotA << 16;
    ports.qpn_base_b = host::LocalLinkPair::kSlotB << 16;
    ports.qpn_count = 0xFFFF;
    ports.owner = std::shared_ptr<host::LocalLinkPair>(std::move(*links));
    return ports;
  };
  return o;
}

TEST(LocalLinkSoakTest, LargeMessagesGoThroughThePayloadAreaAndEveryByteArrives) {
  for (uint64_t seed : {1, 2, 3}) {
    auto result = RunSoak(OverALocalLink(seed, /*pulls=*/true), nullptr);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(result->ok()) << "seed " << seed << ": " << result->first_error;
    EXPECT_GT(result->staged, 100u) << "seed " << seed;
    // Most ACKs go as words in the link; each one stored was either taken
    // or passed by a newer one before the requester looked.
    EXPECT_GT(result->link_acks_received, 100u) << "seed " << seed;
    EXPECT_GE(result->link_acks_sent, result->link_acks_received) << "seed " << seed;
  }
}

TEST(LocalLinkSoakTest, WithAFewChunksQpsWaitForThemOrReadTheOtherProcess) {
  // Two chunks for eight QPs: most messages find none free.
  SoakOptions o = OverALocalLink(6, /*pulls=*/true, /*stage_chunks=*/2);
  o.qps = 8;
  auto result = RunSoak(o, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok()) << result->first_error;
  EXPECT_GT(result->staged, 10u);
  EXPECT_GT(result->pulls, 10u);
}

TEST(LocalLinkSoakTest, WithoutAPayloadAreaLargeMessagesAreReadFromTheOtherProcess) {
  for (uint64_t seed : {1, 2}) {
    auto result = RunSoak(OverALocalLink(seed, /*pulls=*/true, /*stage_chunks=*/0), nullptr);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(result->ok()) << "seed " << seed << ": " << result->first_error;
    EXPECT_GT(result->pulls, 100u) << "seed " << seed;
    EXPECT_EQ(result->staged, 0u);
  }
}

TEST(LocalLinkSoakTest, WithoutPullsEverythingGoesAsFrames) {
  auto result = RunSoak(OverALocalLink(4, /*pulls=*/false), nullptr);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->ok()) << result->first_error;
  EXPECT_EQ(result->pulls, 0u);
  EXPECT_EQ(result->staged, 0u);
  EXPECT_GT(result->link_acks_received, 100u);
}

TEST(LocalLinkSoakTest, ImpairmentsAreRefusedOnALocalLink) {
  SoakOptions o = OverALocalLink(5, true);
  o.impairments.loss = 0.01;
  EXPECT_FALSE(RunSoak(o, nullptr).ok());
}

}  // namespace
}  // namespace uroce::transport
