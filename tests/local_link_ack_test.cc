// RC acknowledgements as words in a local link (transport/link_ack.h),
// between two engines that are two processes of one host joined by a real
// local link (host/local_link_pair.h): small messages are acknowledged by
// words, not packets; a word found in the link before a run of requests is
// not taken for theirs (an earlier QP of the same numbers may have left
// it), and the duplicate it then takes to finish goes as a packet; words of
// another pair of QPs or outside the window are ignored.
#include <gtest/gtest.h>

#include <memory>

#include "host/local_link_pair.h"
#include "pmd/eal_test_environment.h"
#include "transport/engine_test_fixture.h"
#include "transport/link_ack.h"

namespace uroce::transport {
namespace {

class LocalLinkAckTest : public EngineTest {
 protected:
  void SetUp() override {
    EnginePairOptions o;
    o.host_ports = [this](rte_mempool* pool) -> StatusOr<HostPorts> {
      auto links = host::LocalLinkPair::Create(pool, 1024 + 100 + 18);
      if (!links.ok()) return links.status();
      links_ = links->get();
      HostPorts ports;
      ports.a = &links_->a();
      ports.b = &links_->b();
      ports.peer_a = &links_->a();
      ports.peer_b = &links_->b();
      ports.qpn_base_a = host::LocalLinkPair::kSlotA << 16;
      ports.qpn_base_b = host::LocalLinkPair::kSlotB << 16;
      ports.qpn_count = 0xFFFF;
      ports.owner = std::shared_ptr<host::LocalLinkPair>(std::move(*links));
      return ports;
    };
    Start(o);
    RcConnectOptions c;
    auto qps = pair_->ConnectQps(c);
    ASSERT_TRUE(qps.ok()) << qps.status().ToString();
    qa_ = qps->first;
    qb_ = qps->second;
    psn_a_ = c.psn_a;
    send_ = Register(pair_->a(), 4096, 0x5A);
    recv_ = Register(pair_->b(), 4096 * 64, 0);
  }

  // `count` 64-byte SENDs from a, each into a receive of b's.
  void PostSends(int count, uint64_t first_id) {
    for (int i = 0; i < count; ++i) {
      PostRecv(pair_->b(), qb_, recv_, first_id + i, static_cast<uint32_t>((first_id + i) % 64) * 4096, 4096);
      ASSERT_EQ(PostSend(pair_->a(), qa_, IBV_WR_SEND, send_, 64, first_id + i), 0);
    }
  }
  void ExpectAllSucceed(CompletionQueue* cq, size_t count) {
    const std::vector<ibv_wc> wcs = pair_->WaitCompletions(cq, count);
    ASSERT_EQ(wcs.size(), count);
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "wr " << wc.wr_id;
  }
  // Polls engine a alone: b executes nothing meanwhile.
  size_t CompletionsOfAAlone(int polls) {
    size_t got = 0;
    ibv_wc wc[16];
    for (int i = 0; i < polls; ++i) {
      pair_->a().engine->Poll();
      got += static_cast<size_t>(pair_->a().cq->Poll(16, wc));
    }
    return got;
  }
  // What b's responder would store for a's QP: the word of the pair
  // (requester, responder) saying `psn`, as b's QP would write it.
  void PlantWord(uint32_t requester, uint32_t responder, Psn psn) {
    ASSERT_TRUE(links_->b().WriteLinkAck(qa_->qpn, qb_->path.dgid, qa_->qpn,
                                         LinkAckWord(requester, responder, psn, qb_->resp.selective)));
  }

  host::LocalLinkPair* links_ = nullptr;
  QueuePair* qa_ = nullptr;
  QueuePair* qb_ = nullptr;
  uint32_t psn_a_ = 0;
  Buffer send_, recv_;
};

TEST_F(LocalLinkAckTest, SmallMessagesAreAcknowledgedByWordsNotPackets) {
  for (int round = 0; round < 50; ++round) {
    PostSends(1, 100 + round);
    ExpectAllSucceed(pair_->a().cq, 1);
    ExpectAllSucceed(pair_->b().cq, 1);
  }
  const EngineCounters a = pair_->a().engine->counters(), b = pair_->b().engine->counters();
  // The first ACKs go as packets while the link is new to both; then words.
  EXPECT_GE(b.link_acks_sent, 45u);
  EXPECT_GE(a.link_acks_received, 45u);
  EXPECT_LE(b.tx_frames, 5u) << "ACK packets";
  EXPECT_EQ(a.retransmits, 0u);
}

TEST_F(LocalLinkAckTest, AWordLeftBeforeARunOfRequestsIsNotTakenForTheirs) {
  PostSends(1, 1);  // the link is now in use both ways
  ExpectAllSucceed(pair_->a().cq, 1);
  ExpectAllSucceed(pair_->b().cq, 1);
  // A word of this pair of QPs that acknowledges the next three requests,
  // left before they leave (as an earlier QP of these numbers might).
  PlantWord(qa_->qpn, qb_->qpn, Psn(psn_a_ + 3));
  PostSends(3, 2);
  EXPECT_EQ(CompletionsOfAAlone(200), 0u) << "b executed nothing";
  // b then executes them and stores that same word: the requester sees no
  // change, resends, and the duplicate's ACK comes as a packet.
  ExpectAllSucceed(pair_->a().cq, 3);
  ExpectAllSucceed(pair_->b().cq, 3);
  EXPECT_GE(pair_->a().engine->counters().retransmits, 1u);
  EXPECT_GE(pair_->b().engine->counters().duplicates, 1u);
}

TEST_F(LocalLinkAckTest, WordsOfAnotherPairOrOutsideTheWindowAreIgnored) {
  PostSends(1, 1);
  ExpectAllSucceed(pair_->a().cq, 1);
  ExpectAllSucceed(pair_->b().cq, 1);
  PostSends(1, 2);
  ASSERT_EQ(CompletionsOfAAlone(50), 0u);  // a watches the word now
  PlantWord(qa_->qpn, qb_->qpn + 1, Psn(psn_a_ + 1));  // another responder QP
  EXPECT_EQ(CompletionsOfAAlone(50), 0u);
  PlantWord(qa_->qpn + 1, qb_->qpn, Psn(psn_a_ + 1));  // another requester QP
  EXPECT_EQ(CompletionsOfAAlone(50), 0u);
  PlantWord(qa_->qpn, qb_->qpn, Psn(psn_a_ + 1000));  // never sent
  EXPECT_EQ(CompletionsOfAAlone(50), 0u);
  EXPECT_EQ(pair_->a().engine->counters().link_acks_received, 1u) << "taken, and found outside the window";
  ExpectAllSucceed(pair_->a().cq, 1);
  ExpectAllSucceed(pair_->b().cq, 1);
}

}  // namespace
}  // namespace uroce::transport
