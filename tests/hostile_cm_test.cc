// The connection manager against hostile peers, across the
// transport: two engines on the EnginePair's virtual clock, one of them used
// as a wire that puts any CM MAD, from any MAC and IP, in front of the other
// side's connection manager. What must hold (docs/architecture.md, "Untrusted
// input"): the state a peer makes is bounded, nothing on the receive
// path resolves an address (Poll never waits for ARP/ND), garbage is counted
// and dropped, and real connections keep working.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/cm_test_frames.h"
#include "cm/connection_manager.h"
#include "testing/engine_pair.h"

namespace uroce::transport {

using cm::CmAcceptParams;
using cm::CmConnectParams;
using cm::CmCounters;
using cm::CmDrep;
using cm::CmDreq;
using cm::CmEvent;
using cm::CmEventType;
using cm::CmMad;
using cm::CmMra;
using cm::CmRej;
using cm::CmRep;
using cm::CmRtu;
using cm::CmStateSizes;
using cm::ConnectionManager;
using cm::EncodeCmMad;
using cm::ForgedReq;
using cm::InjectMadBytes;
using cm::MadFrom;
using cm::kCmDefaultBacklog;
using cm::kMadBytes;

namespace {

Gid Ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const uint8_t ip[4] = {a, b, c, d};
  return Ipv4MappedGid(ip);
}

class HostileCmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EnginePairOptions options;
    // Any resolution (ARP/ND) goes through here: it never answers, as a
    // spoofed address would not, and it counts who asked from Poll.
    options.engine_template.resolve_neighbor = [this](const Gid&) {
      ++resolver_calls_;
      if (in_poll_) ++resolver_calls_in_poll_;
      return Unavailable("no neighbour answers");
    };
    auto pair = EnginePair::Create(options);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = std::move(*pair);
    EngineSide* sides[2] = {&pair_->a(), &pair_->b()};
    for (int i = 0; i < 2; ++i) {
      ConnectionManager::Options o;
      o.local_gid = sides[i]->gid;
      o.response_timeout_ns = 1'000'000;
      o.clock_ns = [p = pair_.get()] { return p->now_ns(); };
      o.random_seed = 7 + i;
      auto cm = ConnectionManager::Create(sides[i]->engine.get(), sides[i]->pd, o);
      ASSERT_TRUE(cm.ok()) << cm.status().ToString();
      cm_[i] = std::move(*cm);
    }
  }

  void TearDown() override {
    cm_[0].reset();
    cm_[1].reset();
    if (pair_) {
      EXPECT_TRUE(pair_->ShutDownAndCheckMbufs()) << "packet buffers leaked";
    }
  }

  EngineSide& side(int i) { return i == 0 ? pair_->a() : pair_->b(); }

  void PollOnce() {
    in_poll_ = true;
    pair_->PollOnce();
    for (int i = 0; i < 2; ++i) {
      cm_[i]->Poll();
      CmEvent e;
      while (cm_[i]->NextEvent(&e)) events_[i].push_back(e);
    }
    in_poll_ = false;
  }
  void Settle(int polls) {
    for (int n = 0; n < polls; ++n) PollOnce();
  }
  bool WaitEvent(int i, CmEventType type, CmEvent* out) {
    for (int n = 0; n < 100'000; ++n) {
      for (auto it = events_[i].begin(); it != events_[i].end(); ++it) {
        if (it->type == type) {
          *out = *it;
          events_[i].erase(it);
          return true;
        }
      }
      PollOnce();
    }
    return false;
  }
  // Side 0's port carries the frame to side 1.
  void Inject(const MadFrom& from, const uint8_t* mad) {
    ASSERT_TRUE(InjectMadBytes(*side(0).engine, pair_->pool(), from, side(1).mac, side(1).gid, mad));
  }

  QueuePair* NewRcQp(int i) {
    QpInitAttr init = OneCqQpInit(IBV_QPT_RC, side(i).pd, side(i).cq, 16, 1);
    auto qp = side(i).engine->CreateQp(init);
    EXPECT_TRUE(qp.ok()) << qp.status().ToString();
    return qp.ok() ? *qp : nullptr;
  }

  // A real connect from side 0 to side 1's `port`, accepted: both established.
  void ConnectForReal(uint16_t port) {
    CmConnectParams params;
    params.qp = NewRcQp(0);
    params.remote = {side(1).gid, port};
    auto id = cm_[0]->Connect(params, 1);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    CmEvent e;
    // Requests of the storm may still be queued before ours (theirs come
    // from source port 40000, see ForgedReq).
    do {
      ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &e));
    } while (e.peer.gid != side(0).gid || e.peer.port == 40000);
    CmAcceptParams accept;
    accept.qp = NewRcQp(1);
    ASSERT_TRUE(cm_[1]->Accept(e.id, accept, 2).ok());
    ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e));
    ASSERT_TRUE(WaitEvent(1, CmEventType::kEstablished, &e));
  }

  std::unique_ptr<EnginePair> pair_;
  std::unique_ptr<ConnectionManager> cm_[2];
  std::vector<CmEvent> events_[2];
  int resolver_calls_ = 0, resolver_calls_in_poll_ = 0;
  bool in_poll_ = false;
};

// 5,000 REQs with distinct communication IDs, from 5,000 spoofed sources the
// neighbour table does not know: the listener keeps at most its backlog
// (kCmDefaultBacklog), the others get REJ "no resources" to their own MAC;
// no resolver call; a real connection works afterwards.
TEST_F(HostileCmTest, ReqStormLeavesBoundedStateAndRealConnectWorks) {
  ASSERT_TRUE(cm_[1]->Listen(5000, 9).ok());
  constexpr uint32_t kStorm = 5000;
  uint8_t mad[kMadBytes];
  for (uint32_t i = 0; i < kStorm; ++i) {
    const MadFrom from{{0x02, 0xaa, 0, uint8_t(i >> 16), uint8_t(i >> 8), uint8_t(i)},
                       Ipv4(10, 9, uint8_t(i >> 8), uint8_t(i))};
    EncodeCmMad(ForgedReq(0x100000 + i, from.gid, side(1).gid, 5000), mad);
    Inject(from, mad);
    if (i % 16 == 15) Settle(2);
    const CmStateSizes sizes = cm_[1]->state_sizes();
    ASSERT_LE(sizes.pending_requests, kCmDefaultBacklog);
    ASSERT_LE(sizes.connections, kCmDefaultBacklog);
    ASSERT_LE(sizes.address_handles, 256u);
  }
  Settle(100);
  const CmCounters counters = cm_[1]->counters();
  EXPECT_EQ(counters.mads_received, kStorm);
  EXPECT_EQ(counters.backlog_rejects + cm_[1]->state_sizes().pending_requests + counters.requests_expired, kStorm);
  EXPECT_EQ(counters.send_failures, 0u);
  EXPECT_EQ(resolver_calls_, 0);
  // The application ignores the storm's requests: they expire once their
  // callers would have given up (4.096 us * 2^8 * 16 tries, ~17 ms) and
  // leave nothing behind; then the listener takes requests again.
  Settle(20'000);
  const CmStateSizes after = cm_[1]->state_sizes();
  EXPECT_EQ(after.pending_requests, 0u);
  EXPECT_EQ(after.connections, 0u);
  EXPECT_EQ(cm_[1]->counters().requests_expired, kCmDefaultBacklog);
  events_[1].clear();
  ConnectForReal(5000);
  EXPECT_EQ(resolver_calls_in_poll_, 0);
}

// Spoofed REJ, REP, DREQ, RTU, DREP and MRA from sources nobody can resolve:
// Poll never asks the resolver (which would wait up to seconds per MAD with
// the CM locked, and every other connection set-up behind it).
TEST_F(HostileCmTest, SpoofedMadsNeverMakePollResolve) {
  ASSERT_TRUE(cm_[1]->Listen(5001, 9).ok());
  std::mt19937 random(5);
  uint8_t bytes[kMadBytes];
  for (int i = 0; i < 600; ++i) {
    const MadFrom from{{0x02, 0xbb, 0, 0, uint8_t(i >> 8), uint8_t(i)}, Ipv4(192, 168, uint8_t(i >> 8), uint8_t(i))};
    CmMad mad;
    mad.header.transaction_id = random();
    switch (i % 7) {
      case 0: mad = ForgedReq(random(), from.gid, side(1).gid, 4444); break;  // nobody listens
      case 1: { CmRep m; m.local_comm_id = random(); m.remote_comm_id = random(); mad.message = m; break; }
      case 2: { CmDreq m; m.local_comm_id = random(); m.remote_comm_id = random(); mad.message = m; break; }
      case 3: { CmRej m; m.local_comm_id = random(); m.reason = 28; mad.message = m; break; }
      case 4: { CmRtu m; m.local_comm_id = random(); m.remote_comm_id = random(); mad.message = m; break; }
      case 5: { CmDrep m; m.local_comm_id = random(); m.remote_comm_id = random(); mad.message = m; break; }
      default: { CmMra m; m.remote_comm_id = random(); m.service_timeout = 31; mad.message = m; break; }
    }
    EncodeCmMad(mad, bytes);
    Inject(from, bytes);
    if (i % 16 == 15) Settle(2);
  }
  Settle(100);
  EXPECT_EQ(cm_[1]->counters().mads_received, 600u);
  EXPECT_EQ(resolver_calls_in_poll_, 0);
  EXPECT_EQ(resolver_calls_, 0);
  EXPECT_EQ(cm_[1]->counters().send_failures, 0u);
  EXPECT_LE(cm_[1]->state_sizes().address_handles, 256u);
  ConnectForReal(5001);
  EXPECT_EQ(resolver_calls_in_poll_, 0);
}

// Garbage: random bytes, and CM headers with random bodies and attributes,
// from random sources. Nothing crashes, nothing is kept beyond the bounds,
// and the manager still connects.
TEST_F(HostileCmTest, GarbageMadStormDoesNotCrash) {
  ASSERT_TRUE(cm_[1]->Listen(5002, 9).ok());
  std::mt19937_64 random(11);
  uint8_t bytes[kMadBytes];
  for (int i = 0; i < 4000; ++i) {
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    if (i % 2 == 0) {
      // A valid CM MAD header, so that decoding goes past it.
      CmMad header_only;
      CmRtu rtu;
      header_only.message = rtu;
      uint8_t valid[kMadBytes];
      EncodeCmMad(header_only, valid);
      std::memcpy(bytes, valid, 16);
      static const uint16_t kAttributes[] = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0xffff};
      const uint16_t attribute = kAttributes[random() % (sizeof(kAttributes) / sizeof(kAttributes[0]))];
      bytes[16] = uint8_t(attribute >> 8);
      bytes[17] = uint8_t(attribute);
      if (i % 8 == 0) {
        // A REQ for the listened port (Service ID at byte 8 of the REQ,
        // IBTA 12.6.5), the rest random, so that some reach the listener.
        bytes[17] = 0x10;
        const uint8_t service_id[8] = {0, 0, 0, 0, 0x01, 0x06, 0x13, 0x8a};  // port 5002
        std::memcpy(bytes + 24 + 8, service_id, 8);
      }
    }
    Gid gid{};
    for (auto& b : gid) b = static_cast<uint8_t>(random());
    if (i % 3 == 0) gid = Ipv4(10, 7, uint8_t(i >> 8), uint8_t(i));
    const MadFrom from{{0x02, 0xcc, 0, 0, uint8_t(i >> 8), uint8_t(i)}, gid};
    const bool v6 = !IsIpv4MappedGid(gid);
    ASSERT_TRUE(InjectMadBytes(*side(0).engine, pair_->pool(), from, side(1).mac, v6 ? side(1).gid6 : side(1).gid,
                               bytes));
    if (i % 16 == 15) Settle(2);
    ASSERT_LE(cm_[1]->state_sizes().connections, kCmDefaultBacklog);
  }
  Settle(3000);
  const CmCounters counters = cm_[1]->counters();
  EXPECT_GT(counters.mads_dropped, 0u);
  EXPECT_EQ(resolver_calls_, 0);
  EXPECT_LE(cm_[1]->state_sizes().address_handles, 256u);
  events_[1].clear();
  ConnectForReal(5002);
}

}  // namespace
}  // namespace uroce::transport
