// Congestion control end to end (congestion/, docs/congestion.md): two
// engines on the in-memory link with a seeded bottleneck in one direction,
// WRITE traffic from a to b, on the virtual clock, so every run replays.
//
// The bottleneck releases about one 1 KiB-MTU frame per poll (~8.8 Gbit/s
// of virtual time); the requester could send 32 per poll. Without control
// its queue overflows; DCQCN (ECN marks -> CNPs -> rate cuts) and the
// Swift-like window (the RTT) must keep it in check, and a hostile peer's
// CNP flood must slow a QP down to the floor without stalling it or its
// neighbours.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "testing/engine_pair.h"
#include "transport/engine.h"
#include "transport/engine_test_fixture.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

constexpr uint32_t kMessage = 64 * 1024;
constexpr uint32_t kMessages = 96;
constexpr uint32_t kOutstanding = 8;

Impairments Bottleneck(uint32_t ecn_frames) {
  Impairments b;
  b.rate = 1100;  // bytes per tick: one frame of a 1 KiB MTU per poll
  b.queue_frames = 32;  // below the QP's window (128 packets): it can overflow
  b.ecn_frames = ecn_frames;
  return b;
}

struct Outcome {
  bool completed = false;
  uint64_t polls = 0;
  LinkCounters link;
  EngineCounters a, b;
  uint64_t lowest_rate_mbps = 0;  // the lowest pace seen (0: never paced)
  uint32_t lowest_window = 0;     // the smallest window seen (0: never limited)
  uint64_t srtt_ns = 0;
};

class CongestionTest : public EngineTest {
 protected:
  void StartWith(const std::string& algorithm, const Impairments& bottleneck) {
    EnginePairOptions o;
    o.seed = 11;
    o.impairments = bottleneck;
    o.engine_template.congestion.algorithm = algorithm;
    o.engine_template.congestion.params.target_delay_ns = 40'000;
    o.engine_template.congestion.params.min_rate_mbps = 100;
    Start(o);
  }

  // kMessages WRITEs of kMessage bytes from a to b, kOutstanding at a time;
  // with `read`, a READs them from b instead (the data flows from b's QP,
  // the sender whose rate counts then: `sender` below).
  Outcome Transfer(uint64_t max_polls = 3'000'000, bool read = false) {
    Outcome out;
    auto qps = pair_->ConnectQps({});
    EXPECT_TRUE(qps.ok()) << qps.status().ToString();
    if (!qps.ok()) return out;
    qa_ = qps->first;
    qb_ = qps->second;
    Buffer src = Register(read ? pair_->b() : pair_->a(), kMessage, 0x5A);
    Buffer dst = Register(read ? pair_->a() : pair_->b(), kMessage, 0);
    QueuePair* sender = read ? qb_ : qa_;
    uint32_t posted = 0, done = 0;
    ibv_wc wc[16];
    while (done < kMessages && out.polls < max_polls) {
      while (posted < kMessages && posted - done < kOutstanding) {
        if (read) {
          EXPECT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_READ, dst, kMessage, posted, src.addr(), src.keys.rkey), 0);
        } else {
          EXPECT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_WRITE, src, kMessage, posted, dst.addr(), dst.keys.rkey), 0);
        }
        ++posted;
      }
      pair_->PollOnce();
      ++out.polls;
      const int n = pair_->a().cq->Poll(16, wc);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        ++done;
      }
      if (sender->cc != nullptr) {
        const congestion::Allowance& allowed = sender->cc->allowance();
        if (allowed.rate_mbps != 0 && (out.lowest_rate_mbps == 0 || allowed.rate_mbps < out.lowest_rate_mbps)) {
          out.lowest_rate_mbps = allowed.rate_mbps;
        }
        if (allowed.window_packets != 0 && (out.lowest_window == 0 || allowed.window_packets < out.lowest_window)) {
          out.lowest_window = allowed.window_packets;
        }
      }
    }
    out.completed = done == kMessages;
    out.link = pair_->link().counters();
    out.a = pair_->a().engine->counters();
    out.b = pair_->b().engine->counters();
    out.srtt_ns = qa_->req.timer.srtt_ns();
    EXPECT_EQ(dst.bytes, src.bytes);
    std::printf("%s: %s in %llu polls, queue drops %llu, CE %llu, CNPs %llu/%llu, lowest rate %llu Mbit/s, "
                "lowest window %u, srtt %llu ns\n",
                sender->cc != nullptr ? sender->cc->name() : "none", out.completed ? "done" : "NOT done",
                (unsigned long long)out.polls, (unsigned long long)out.link.queue_dropped,
                (unsigned long long)out.link.ce_marked,
                (unsigned long long)(read ? out.a.cnps_sent : out.b.cnps_sent),
                (unsigned long long)(read ? out.b.cnps_received : out.a.cnps_received),
                (unsigned long long)out.lowest_rate_mbps, out.lowest_window,
                (unsigned long long)out.srtt_ns);
    return out;
  }

  // A CNP (annex A17.9.3) from `from`'s address to `to`'s QP `qpn`, as
  // `from`'s engine would send it.
  static PacketFields Cnp(const EngineSide& from, const EngineSide& to, uint32_t qpn) {
    PacketFields cnp;
    cnp.dst_mac = to.mac;
    cnp.src_mac = from.mac;
    cnp.src_gid = from.gid;
    cnp.dst_gid = to.gid;
    cnp.bth.opcode = static_cast<uint8_t>(Opcode::kCnp);
    cnp.bth.dest_qp = qpn;
    cnp.bth.reserved_byte4 = kBthBecn;
    cnp.payload_length = 16;
    return cnp;
  }
  PacketFields CnpFromB(uint32_t qpn) { return Cnp(pair_->b(), pair_->a(), qpn); }

  // Four copies of `cnp` queued on `from`'s engine (the next poll sends
  // them): a peer flooding CNPs.
  void Flood(EngineSide& from, const PacketFields& cnp) {
    const uint8_t reserved[16] = {};
    for (int i = 0; i < 4; ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(pair_->pool());
      ASSERT_NE(m, nullptr);
      ASSERT_EQ(BuildPacket(cnp, reserved, m), BuildError::kOk);
      if (!from.engine->QueueRawFrame(m)) rte_pktmbuf_free(m);
    }
  }

  QueuePair* qa_ = nullptr;
  QueuePair* qb_ = nullptr;
};

TEST_F(CongestionTest, WithoutControlTheBottleneckOverflows) {
  StartWith("none", Bottleneck(16));
  const Outcome none = Transfer();
  ASSERT_TRUE(none.completed);
  EXPECT_GT(none.link.queue_dropped, 100u) << "the bottleneck must be a real one";
  EXPECT_EQ(none.link.ce_marked, 0u) << "nothing is ECN-capable without an algorithm that reads ECN";
  EXPECT_EQ(none.b.cnps_sent, 0u);
}

TEST_F(CongestionTest, DcqcnCutsOnCnpsAndKeepsTheQueueFromOverflowing) {
  StartWith("none", Bottleneck(16));
  const Outcome none = Transfer();
  pair_->ShutDownAndCheckMbufs();
  pair_.reset();
  StartWith("dcqcn", Bottleneck(16));
  // Every CNP on the link, as the annex lays it out: opcode 0x81 to a's QP,
  // BECN, PSN 0, 16 zero bytes, not ECN-capable, DSCP 48 (cnp_dscp).
  uint32_t cnps_seen = 0, cnps_malformed = 0;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    PacketView v;
    ParseOptions options;
    options.verify_icrc = true;
    if (ParsePacket(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), options, &v) != ParseError::kOk ||
        v.fields.bth.opcode != static_cast<uint8_t>(Opcode::kCnp)) {
      return false;
    }
    ++cnps_seen;
    const bool zeros = v.fields.payload_length == 16 &&
                       std::all_of(v.payload, v.payload + 16, [](uint8_t b) { return b == 0; });
    if (v.fields.bth.dest_qp != qa_->qpn || v.fields.bth.reserved_byte4 != kBthBecn || v.fields.bth.psn.value() != 0 ||
        v.fields.traffic_class != (48 << 2) || !zeros) {
      ++cnps_malformed;
    }
    return false;  // observed, never dropped
  });
  const Outcome dcqcn = Transfer();
  ASSERT_TRUE(none.completed);
  ASSERT_TRUE(dcqcn.completed);
  EXPECT_EQ(cnps_seen, dcqcn.b.cnps_sent);
  EXPECT_EQ(cnps_malformed, 0u);
  // Marked, notified, cut.
  EXPECT_GT(dcqcn.link.ce_marked, 0u);
  EXPECT_GT(dcqcn.b.rx_ce_marked, 0u);
  EXPECT_GT(dcqcn.b.cnps_sent, 0u);
  EXPECT_GT(dcqcn.a.cnps_received, 0u);
  EXPECT_LE(dcqcn.a.cnps_received, dcqcn.b.cnps_sent);
  EXPECT_NE(dcqcn.lowest_rate_mbps, 0u);
  EXPECT_LT(dcqcn.lowest_rate_mbps, 20'000u);
  EXPECT_EQ(qa_->counters.cnps_received, dcqcn.a.cnps_received);
  // The queue overflows only at the start (until the first CNP arrives the
  // QP sends at the line rate): a fifth of the drops without control at
  // most, for no more than a sixth more time (the link's other direction is
  // the same bottleneck here, and a paced QP asks an ACK for every packet).
  EXPECT_LT(dcqcn.link.queue_dropped * 5, none.link.queue_dropped);
  EXPECT_LT(dcqcn.polls, none.polls + none.polls / 6);
  // uroce stats: the algorithm, its rate, the CNPs.
  bool found = false;
  for (const QpStats& s : pair_->a().engine->QpStatsSnapshot()) {
    if (s.qpn != qa_->qpn) continue;
    found = true;
    EXPECT_EQ(s.congestion, "dcqcn");
    EXPECT_EQ(s.counters.cnps_received, dcqcn.a.cnps_received);
  }
  EXPECT_TRUE(found);
}

// READ answers are paced too: the data flows from b's QP, a sends CNPs for
// the CE-marked responses to it, and b's rate limiter slows its answers.
TEST_F(CongestionTest, DcqcnPacesReadResponses) {
  StartWith("none", Bottleneck(16));
  const Outcome none = Transfer(3'000'000, /*read=*/true);
  pair_->ShutDownAndCheckMbufs();
  pair_.reset();
  StartWith("dcqcn", Bottleneck(16));
  const Outcome dcqcn = Transfer(3'000'000, /*read=*/true);
  ASSERT_TRUE(none.completed);
  ASSERT_TRUE(dcqcn.completed);
  EXPECT_GT(none.link.queue_dropped, 100u) << "the bottleneck must be a real one";
  EXPECT_GT(dcqcn.link.ce_marked, 0u);
  EXPECT_GT(dcqcn.a.rx_ce_marked, 0u) << "the responses arrive marked";
  EXPECT_GT(dcqcn.a.cnps_sent, 0u);
  EXPECT_GT(dcqcn.b.cnps_received, 0u) << "the responder hears them";
  EXPECT_GT(dcqcn.b.paced_waits, 0u) << "and paces its answers";
  EXPECT_NE(dcqcn.lowest_rate_mbps, 0u);
  EXPECT_LT(dcqcn.link.queue_dropped * 2, none.link.queue_dropped);
  EXPECT_EQ(qb_->counters.cnps_received, dcqcn.b.cnps_received);
}

TEST_F(CongestionTest, DcqcnRecoversTheLineRateOnceNotificationsStop) {
  StartWith("dcqcn", Bottleneck(16));
  const Outcome dcqcn = Transfer();
  ASSERT_TRUE(dcqcn.completed);
  ASSERT_NE(dcqcn.lowest_rate_mbps, 0u);
  // The bottleneck goes away; the next messages see no marks, and the
  // timers bring the rate back to the line rate (unpaced).
  pair_->link().set_impairments({});
  Buffer src = Register(pair_->a(), 4096, 1);
  Buffer dst = Register(pair_->b(), 4096, 0);
  ibv_wc wc[4];
  for (int round = 0; round < 200 && qa_->cc->allowance().rate_mbps != 0; ++round) {
    ASSERT_EQ(PostSend(pair_->a(), qa_, IBV_WR_RDMA_WRITE, src, 4096, 1000 + round, dst.addr(), dst.keys.rkey), 0);
    for (int i = 0; i < 1000; ++i) pair_->PollOnce();  // a millisecond of virtual time
    ASSERT_EQ(pair_->a().cq->Poll(4, wc), 1);
  }
  EXPECT_EQ(qa_->cc->allowance().rate_mbps, 0u) << "still paced at " << qa_->cc->allowance().rate_mbps;
}

TEST_F(CongestionTest, SwiftHoldsTheRoundTripNearItsTarget) {
  // No ECN: the round trip is the only signal. A queue deeper than the
  // QP's window, that the window must keep short.
  Impairments deep = Bottleneck(0);
  deep.queue_frames = 4096;
  StartWith("none", deep);
  const Outcome none = Transfer();
  pair_->ShutDownAndCheckMbufs();
  pair_.reset();
  StartWith("swift", deep);
  const Outcome swift = Transfer();
  ASSERT_TRUE(none.completed);
  ASSERT_TRUE(swift.completed);
  EXPECT_NE(swift.lowest_window, 0u);
  EXPECT_LT(swift.lowest_window, 128u);
  // The target is 40 us: Swift keeps the measured round trip within a few
  // targets, and far below what the uncontrolled queue builds.
  EXPECT_LT(swift.srtt_ns, 4 * 40'000u) << "none: " << none.srtt_ns;
  EXPECT_LT(swift.srtt_ns, none.srtt_ns / 2);
  EXPECT_LE(swift.link.queue_dropped, none.link.queue_dropped);
}

// A peer that floods CNPs: the flooded QP slows to the floor and still
// finishes; another QP of the same engine is not slowed at all.
TEST_F(CongestionTest, ACnpFloodSlowsOneQpToTheFloorWithoutStallingItOrItsNeighbour) {
  StartWith("dcqcn", Impairments{});
  auto flooded = pair_->ConnectQps({});
  auto neighbour = pair_->ConnectQps({});
  ASSERT_TRUE(flooded.ok() && neighbour.ok());
  QueuePair* victim = flooded->first;
  QueuePair* other = neighbour->first;
  Buffer src = Register(pair_->a(), 16 * 1024, 7);
  Buffer dst = Register(pair_->b(), 16 * 1024, 0);
  Buffer dst2 = Register(pair_->b(), 16 * 1024, 0);

  // The CNP b's side would send: from b's address to a's, to the victim.
  const PacketFields cnp = CnpFromB(victim->qpn);
  auto flood = [&] { Flood(pair_->b(), cnp); };
  // Cut to the floor first.
  for (int i = 0; i < 200; ++i) {
    flood();
    pair_->PollOnce();
  }
  ASSERT_EQ(victim->cc->allowance().rate_mbps, 100u) << "the floor (min_rate_mbps)";
  ASSERT_EQ(other->cc->allowance().rate_mbps, 0u) << "the neighbour heard nothing";

  ASSERT_EQ(PostSend(pair_->a(), victim, IBV_WR_RDMA_WRITE, src, 16 * 1024, 1, dst.addr(), dst.keys.rkey), 0);
  ASSERT_EQ(PostSend(pair_->a(), other, IBV_WR_RDMA_WRITE, src, 16 * 1024, 2, dst2.addr(), dst2.keys.rkey), 0);
  ibv_wc wc[4];
  uint64_t other_done_at = 0, victim_done_at = 0;
  for (uint64_t poll = 1; poll <= 200'000 && victim_done_at == 0; ++poll) {
    flood();
    pair_->PollOnce();
    const int n = pair_->a().cq->Poll(4, wc);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
      (wc[i].wr_id == 1 ? victim_done_at : other_done_at) = poll;
    }
  }
  // 16 KiB at 100 Mbit/s is about 1.4 ms of virtual time: slow, not stopped.
  ASSERT_NE(victim_done_at, 0u) << "the flooded QP stalled";
  EXPECT_GT(victim_done_at, 1000u);
  ASSERT_NE(other_done_at, 0u);
  EXPECT_LT(other_done_at, 100u) << "the neighbour was slowed by another QP's CNPs";
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(dst2.bytes, src.bytes);
  EXPECT_GT(pair_->a().engine->counters().cnps_received, 1000u);
}

// A responder flooded with CNPs answers a READ at the floor rate: slowly,
// and completely (the requester's timers spend no retry on a slow answer).
TEST_F(CongestionTest, ACnpFloodSlowsReadAnswersToTheFloorWithoutFailingTheRead) {
  StartWith("dcqcn", Impairments{});
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  QueuePair* requester = qps->first;
  QueuePair* responder = qps->second;
  Buffer src = Register(pair_->b(), 16 * 1024, 9);
  Buffer dst = Register(pair_->a(), 16 * 1024, 0);
  // CNPs from a's address to b's QP, as a would send them.
  const PacketFields cnp = Cnp(pair_->a(), pair_->b(), responder->qpn);
  auto flood = [&] { Flood(pair_->a(), cnp); };
  for (int i = 0; i < 200; ++i) {
    flood();
    pair_->PollOnce();
  }
  ASSERT_EQ(responder->cc->allowance().rate_mbps, 100u) << "the floor (min_rate_mbps)";
  ASSERT_EQ(PostSend(pair_->a(), requester, IBV_WR_RDMA_READ, dst, 16 * 1024, 1, src.addr(), src.keys.rkey), 0);
  ibv_wc wc[4];
  uint64_t done_at = 0;
  for (uint64_t poll = 1; poll <= 200'000 && done_at == 0; ++poll) {
    flood();
    pair_->PollOnce();
    if (pair_->a().cq->Poll(4, wc) == 1) {
      ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
      done_at = poll;
    }
  }
  // 16 KiB at 100 Mbit/s is about 1.4 ms of virtual time: slow, not stopped.
  ASSERT_NE(done_at, 0u) << "the READ stalled";
  EXPECT_GT(done_at, 1000u) << "the answers were not paced";
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_GT(pair_->b().engine->counters().paced_waits, 0u);
}

// CNPs that do not come from the QP's peer, or reach a QP without an
// algorithm, change nothing.
TEST_F(CongestionTest, ForeignOrUnwantedCnpsAreCountedAndIgnored) {
  StartWith("none", Impairments{});
  auto qps = pair_->ConnectQps({});
  ASSERT_TRUE(qps.ok());
  const PacketFields cnp = CnpFromB(qps->first->qpn);
  const uint8_t reserved[16] = {};
  auto send = [&](const PacketFields& f) {
    rte_mbuf* m = rte_pktmbuf_alloc(pair_->pool());
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(BuildPacket(f, reserved, m), BuildError::kOk);
    ASSERT_TRUE(pair_->b().engine->QueueRawFrame(m));
    for (int i = 0; i < 4; ++i) pair_->PollOnce();
  };
  send(cnp);  // to a QP with no algorithm
  EXPECT_EQ(pair_->a().engine->counters().cnps_ignored, 1u);
  PacketFields stranger = cnp;
  stranger.src_gid = Ipv4MappedGid(0x0A000063u);  // 10.0.0.99: not the QP's peer
  const uint64_t mismatches = pair_->a().engine->counters().rx_path_mismatch;
  send(stranger);
  EXPECT_EQ(pair_->a().engine->counters().rx_path_mismatch, mismatches + 1);
  PacketFields padded = cnp;
  padded.payload_length = 12;  // not the 16 reserved bytes: the builder refuses it
  rte_mbuf* m = rte_pktmbuf_alloc(pair_->pool());
  ASSERT_NE(m, nullptr);
  EXPECT_NE(BuildPacket(padded, reserved, m), BuildError::kOk);
  rte_pktmbuf_free(m);
  EXPECT_EQ(pair_->a().engine->counters().cnps_received, 0u);
}

}  // namespace
}  // namespace uroce::transport
