// The runtime from configuration text: two endpoints on a net_ring pair, in
// inline progress and with an engine lcore; RC traffic with every byte
// checked; QPs flushed and every mbuf back at shutdown; telemetry read over
// its socket; SIGTERM turned into a shutdown request.
#include "runtime/runtime.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "pmd/eal.h"
#include "pmd/eal_test_environment.h"
#include "pmd/shutdown_signal.h"
#include "runtime/config.h"
#include "runtime/telemetry_client.h"
#include "testing/engine_pair.h"
#include "transport/address_text.h"
#include "transport/verbs_wr.h"

namespace uroce::runtime {

using pmd::EalFilePrefix;
using pmd::ImpairedPortCounters;
using runtime::LoadConfigText;
using transport::MacToString;
using pmd::ResetShutdownRequest;
using pmd::ShutdownRequested;
using pmd::ShutdownSignal;

namespace {

using transport::CompletionQueue;
using transport::QueuePair;

std::string RingConfig(const std::string& pair, const std::string& progress) {
  return "[eal]\nlcores = 0-1\n[engine]\nprogress = " + progress +
         "\n"
         "[endpoint.a]\nport = ring:" + pair + ":a\nipv4 = 10.5.0.1\nmac = 02:00:00:05:00:01\nlcore = 1\nmtu = 9000\n"
         "mbufs = 2047\n"
         "[endpoint.b]\nport = ring:" + pair + ":b\nipv4 = 10.5.0.2\nipv6 = fd00:5::2\nlcore = 1\nmtu = 9000\n"
         "mbufs = 2047\n";
}

std::unique_ptr<Runtime> StartRuntime(const std::string& text) {
  auto config = LoadConfigText(text, "test");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  if (!config.ok()) return nullptr;
  auto rt = Runtime::Start(*config);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return rt.ok() ? std::move(*rt) : nullptr;
}

// Drives the runtime (inline mode) until `cq` has a completion.
bool WaitOne(Runtime& rt, CompletionQueue* cq, ibv_wc* wc) {
  for (uint64_t i = 0; i < 50'000'000; ++i) {
    if (cq->Poll(1, wc) == 1) return true;
    rt.Progress();
  }
  return false;
}

struct Buffer {
  std::vector<uint8_t> bytes;
  transport::MrKeys keys{};
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

Buffer Register(transport::EngineSide& side, size_t size) {
  Buffer b;
  b.bytes.assign(size, 0);
  auto keys = side.engine->RegMr(side.pd, b.bytes.data(), size, b.addr(),
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_TRUE(keys.ok());
  if (keys.ok()) b.keys = *keys;
  return b;
}

// SEND, RDMA WRITE, RDMA READ and FETCH_AND_ADD from A to B, each checked.
void RunTraffic(Runtime& rt) {
  transport::EngineSide& a = rt.Find("a")->side;
  transport::EngineSide& b = rt.Find("b")->side;
  transport::RcConnectOptions options;
  options.mtu = IBV_MTU_4096;
  auto qps = transport::ConnectQueuePairs(a, b, options);
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  QueuePair* qa = qps->first;
  QueuePair* qb = qps->second;
  constexpr size_t kSize = 20000;  // five packets at path MTU 4096
  Buffer sa = Register(a, kSize), db = Register(b, kSize);
  for (size_t i = 0; i < kSize; ++i) sa.bytes[i] = static_cast<uint8_t>(i * 13 + 1);
  ibv_wc wc;

  ibv_sge rs{db.addr(), kSize, db.keys.lkey};
  ibv_recv_wr rwr = transport::RecvWr(0, &rs);
  const ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(b.engine->PostRecv(qb, &rwr, &bad_r), 0);
  auto post = [&](ibv_wr_opcode op, uint64_t local, uint32_t len, uint32_t lkey, uint64_t remote, uint32_t rkey) {
    ibv_sge s{local, len, lkey};
    ibv_send_wr w = transport::SignaledSendWr(0, op, &s);
    w.wr.rdma.remote_addr = remote;
    w.wr.rdma.rkey = rkey;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.wr.atomic.remote_addr = remote;
      w.wr.atomic.rkey = rkey;
      w.wr.atomic.compare_add = 5;
    }
    const ibv_send_wr* bad = nullptr;
    return a.engine->PostSend(qa, &w, &bad);
  };
  ASSERT_EQ(post(IBV_WR_SEND, sa.addr(), kSize, sa.keys.lkey, 0, 0), 0);
  for (int k = 0; k < 2; ++k) {
    CompletionQueue* cq = k == 0 ? a.cq : b.cq;
    ASSERT_TRUE(WaitOne(rt, cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(sa.bytes, db.bytes);

  Buffer tb = Register(b, kSize);
  ASSERT_EQ(post(IBV_WR_RDMA_WRITE, sa.addr(), kSize, sa.keys.lkey, tb.addr(), tb.keys.rkey), 0);
  ASSERT_TRUE(WaitOne(rt, a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(sa.bytes, tb.bytes);

  Buffer ra = Register(a, kSize);
  for (size_t i = 0; i < kSize; ++i) tb.bytes[i] = static_cast<uint8_t>(i * 3);
  ASSERT_EQ(post(IBV_WR_RDMA_READ, ra.addr(), kSize, ra.keys.lkey, tb.addr(), tb.keys.rkey), 0);
  ASSERT_TRUE(WaitOne(rt, a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(ra.bytes, tb.bytes);

  Buffer counter = Register(b, 8), result = Register(a, 8);
  uint64_t start = 37;
  std::memcpy(counter.bytes.data(), &start, 8);
  ASSERT_EQ(post(IBV_WR_ATOMIC_FETCH_AND_ADD, result.addr(), 8, result.keys.lkey, counter.addr(), counter.keys.rkey), 0);
  ASSERT_TRUE(WaitOne(rt, a.cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  uint64_t original = 0, now = 0;
  std::memcpy(&original, result.bytes.data(), 8);
  std::memcpy(&now, counter.bytes.data(), 8);
  EXPECT_EQ(original, 37u);
  EXPECT_EQ(now, 42u);
}

TEST(RuntimeTest, InlineProgressOverRingPair) {
  auto rt = StartRuntime(RingConfig("rti", "inline"));
  ASSERT_NE(rt, nullptr);
  EXPECT_TRUE(rt->inline_progress());
  RunTraffic(*rt);
  // A's MAC came from the configuration, B's from the port.
  EXPECT_EQ(MacToString(rt->Find("a")->side.mac), "02:00:00:05:00:01");
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
  EXPECT_EQ(report.mbufs_total, 2 * 2047u);
  EXPECT_EQ(report.qps_flushed, 2u);
}

// A poll of one engine's CQ drives that engine, and the others of
// the process only every kOtherEnginesEvery polls (they still move).
TEST(RuntimeTest, ProgressOfOnePolledEngineDrivesTheOthersNowAndThen) {
  auto rt = StartRuntime(RingConfig("rtp", "inline"));
  ASSERT_NE(rt, nullptr);
  transport::EngineSide& a = rt->Find("a")->side;
  transport::EngineSide& b = rt->Find("b")->side;
  auto qps = transport::ConnectQueuePairs(a, b, transport::RcConnectOptions{});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  Buffer sa = Register(a, 64), db = Register(b, 64);
  for (size_t i = 0; i < 64; ++i) sa.bytes[i] = static_cast<uint8_t>(i + 7);
  ibv_sge rs{db.addr(), 64, db.keys.lkey};
  ibv_recv_wr rwr = transport::RecvWr(0, &rs);
  const ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(b.engine->PostRecv(qps->second, &rwr, &bad_r), 0);
  ibv_sge ss{sa.addr(), 64, sa.keys.lkey};
  ibv_send_wr swr = transport::SignaledSendWr(0, IBV_WR_SEND, &ss);
  const ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(a.engine->PostSend(qps->first, &swr, &bad_s), 0);

  // The first poll of A sends; B, not polled, has not received it (its
  // count so far: what neighbour resolution brought it).
  const uint64_t a_sent = a.engine->counters().tx_frames;
  const uint64_t b_received = b.engine->counters().rx_frames;
  rt->Progress(a.engine.get());
  EXPECT_GT(a.engine->counters().tx_frames, a_sent);
  EXPECT_EQ(b.engine->counters().rx_frames, b_received);
  uint32_t calls = 1;
  while (b.engine->counters().rx_frames == b_received && calls < 4 * Runtime::kOtherEnginesEvery) {
    rt->Progress(a.engine.get());
    ++calls;
  }
  EXPECT_EQ(calls, Runtime::kOtherEnginesEvery) << "B is polled every kOtherEnginesEvery polls of A";
  // Polls of A alone finish the exchange: B's receive and A's send complete.
  ibv_wc wc;
  bool got_b = false, got_a = false;
  for (int i = 0; i < 100000 && !(got_a && got_b); ++i) {
    rt->Progress(a.engine.get());
    got_b = got_b || b.cq->Poll(1, &wc) == 1;
    got_a = got_a || a.cq->Poll(1, &wc) == 1;
  }
  EXPECT_TRUE(got_b);
  EXPECT_TRUE(got_a);
  EXPECT_EQ(sa.bytes, db.bytes);
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
}

TEST(RuntimeTest, EngineLcoreOverRingPair) {
  auto rt = StartRuntime(RingConfig("rte", "engine"));
  ASSERT_NE(rt, nullptr);
  EXPECT_FALSE(rt->inline_progress());
  EXPECT_EQ(rt->Progress(), 0u);  // the lcore polls; the application only posts and reads CQs
  RunTraffic(*rt);
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
}

TEST(RuntimeTest, ShutdownFlushesOutstandingWork) {
  auto rt = StartRuntime(RingConfig("rtf", "engine"));
  ASSERT_NE(rt, nullptr);
  transport::EngineSide& a = rt->Find("a")->side;
  transport::EngineSide& b = rt->Find("b")->side;
  auto qps = transport::ConnectQueuePairs(a, b, transport::RcConnectOptions{});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  // Receives nobody will match, and sends that B cannot take (no receives on
  // B: RNR, retried forever with rnr_retry 7).
  Buffer ba = Register(a, 4096), bb = Register(b, 4096);
  for (int i = 0; i < 8; ++i) {
    ibv_sge s{ba.addr(), 64, ba.keys.lkey};
    ibv_recv_wr r = transport::RecvWr(100 + i, &s);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(a.engine->PostRecv(qps->first, &r, &bad), 0);
    ibv_send_wr w = transport::SignaledSendWr(200 + i, IBV_WR_SEND, &s);
    const ibv_send_wr* bad_s = nullptr;
    ASSERT_EQ(a.engine->PostSend(qps->first, &w, &bad_s), 0);
  }
  EXPECT_EQ(rt->FlushQueuePairs(), 2u);
  int flushed = 0;
  ibv_wc wc;
  while (a.cq->Poll(1, &wc) == 1) {
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << wc.wr_id;
    ++flushed;
  }
  EXPECT_EQ(flushed, 16);  // 8 receives and 8 sends
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
}

TEST(RuntimeTest, TelemetryShowsPortsAndQps) {
  auto rt = StartRuntime(RingConfig("rtt", "engine"));
  ASSERT_NE(rt, nullptr);
  RunTraffic(*rt);
  auto client = TelemetryClient::Connect(TelemetrySocketPath(EalFilePrefix()));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_NE(client->greeting().find("\"pid\""), std::string::npos) << client->greeting();
  auto ports = client->Query("/uroce/ports");
  ASSERT_TRUE(ports.ok()) << ports.status().ToString();
  EXPECT_NE(ports->find("\"a\""), std::string::npos) << *ports;
  EXPECT_NE(ports->find("\"b\""), std::string::npos) << *ports;
  auto port = client->Query("/uroce/port,a");
  ASSERT_TRUE(port.ok());
  EXPECT_NE(port->find("\"tx_frames\""), std::string::npos) << *port;
  EXPECT_NE(port->find("\"arp_requests_sent\""), std::string::npos) << *port;
  EXPECT_NE(port->find("\"gids\":\"10.5.0.1\""), std::string::npos) << *port;
  auto qps = client->Query("/uroce/qps");
  ASSERT_TRUE(qps.ok());
  const size_t slash = qps->find("\"a/");
  ASSERT_NE(slash, std::string::npos) << *qps;
  const std::string id = qps->substr(slash + 1, qps->find('"', slash + 1) - slash - 1);
  auto qp = client->Query("/uroce/qp," + id);
  ASSERT_TRUE(qp.ok());
  EXPECT_NE(qp->find("\"state\":\"RTS\""), std::string::npos) << *qp;
  EXPECT_NE(qp->find("\"tx_packets\""), std::string::npos) << *qp;
  EXPECT_TRUE(rt->Shutdown().pools_full());
  // After shutdown the endpoints are gone from telemetry.
  auto after = client->Query("/uroce/ports");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->find("\"a\""), std::string::npos) << *after;
}

// [impair]: RC traffic with every byte checked across a port that loses,
// duplicates, reorders, delays and corrupts; the counters in telemetry and
// in the shutdown report; every mbuf back in its pool. Inline progress and
// one round of traffic: RunTraffic's buffers die with it while their MRs
// stay registered, and under loss a retransmitted READ request may still
// arrive later (as on any fabric); nothing polls until Shutdown has moved
// the QPs to the error state.
TEST(RuntimeTest, ImpairedPortsCarryCheckedTrafficAndCountTheFaults) {
  auto rt = StartRuntime(RingConfig("rtx", "inline") +
                         "[impair]\nloss = 0.1\ndup = 0.05\nreorder = 0.05\nreorder_us = 50\ndelay_us = 10\n"
                         "corrupt = 0.01\nrnr_storm = 0.5\nseed = 5\n");
  ASSERT_NE(rt, nullptr);
  ASSERT_NE(rt->Find("a")->impaired, nullptr);
  RunTraffic(*rt);
  auto client = TelemetryClient::Connect(TelemetrySocketPath(EalFilePrefix()));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto port = client->Query("/uroce/port,b");
  ASSERT_TRUE(port.ok());
  for (const char* key : {"\"impair_tx_frames\"", "\"impair_rx_dropped\"", "\"impair_tx_reordered\"",
                          "\"impair_rx_corrupted\"", "\"rnr_storm_naks\""}) {
    EXPECT_NE(port->find(key), std::string::npos) << key << " in " << *port;
  }
  const ImpairedPortCounters ca = rt->Find("a")->impaired->counters();
  const ImpairedPortCounters cb = rt->Find("b")->impaired->counters();
  EXPECT_GT(ca.tx.sent, 0u);
  EXPECT_GT(cb.rx.sent, 0u);
  EXPECT_GT(ca.tx.dropped + ca.rx.dropped + cb.tx.dropped + cb.rx.dropped, 0u);
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
  EXPECT_NE(report.impairments.find("uroce0 (a) impairments, seed 5: tx: frames"), std::string::npos)
      << report.impairments;
  EXPECT_NE(report.impairments.find("RNR storm NAKs"), std::string::npos) << report.impairments;
}

// Frames still held back (delayed) when the runtime shuts down go back to
// their pool.
TEST(RuntimeTest, FramesHeldByImpairmentAreFreedAtShutdown) {
  auto rt = StartRuntime(RingConfig("rth", "inline") + "[impair]\ndelay_us = 20000\nseed = 2\n");
  ASSERT_NE(rt, nullptr);
  transport::EngineSide& a = rt->Find("a")->side;
  transport::EngineSide& b = rt->Find("b")->side;
  auto qps = transport::ConnectQueuePairs(a, b, {});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  Buffer src = Register(a, 4096);
  ibv_sge sge{src.addr(), 4096, src.keys.lkey};
  for (uint64_t i = 0; i < 16; ++i) {
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(a.engine->PostSend(qps->first, &wr, &bad), 0);
  }
  for (int i = 0; i < 20; ++i) rt->Progress();
  EXPECT_GT(rt->Find("a")->impaired->held(), 0u);
  const ShutdownReport report = rt->Shutdown();
  EXPECT_TRUE(report.pools_full()) << report.Summary();
}

TEST(RuntimeTest, SigtermRequestsShutdown) {
  ResetShutdownRequest();
  EXPECT_FALSE(ShutdownRequested());
  raise(SIGTERM);  // handled: sets the flag, the process lives on
  EXPECT_TRUE(ShutdownRequested());
  EXPECT_EQ(ShutdownSignal(), SIGTERM);
  ResetShutdownRequest();
  raise(SIGINT);
  EXPECT_EQ(ShutdownSignal(), SIGINT);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

TEST(RuntimeTest, MissingPortIsNamed) {
  auto config = LoadConfigText("[endpoint.x]\nport = net_nothing0\nipv4 = 10.6.0.1\n", "test");
  ASSERT_TRUE(config.ok());
  auto rt = Runtime::Start(*config);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("[endpoint.x] port 'net_nothing0'"), std::string::npos)
      << rt.status().message();
}

}  // namespace
}  // namespace uroce::runtime
