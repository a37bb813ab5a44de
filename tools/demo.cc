// `uroce demo`: the README's first command. Two uroce endpoints, each an
// engine on its own DPDK port, joined by a net_ring pair (no hugepages, no
// NIC, no setup): RC SEND, RDMA WRITE, RDMA READ and an atomic, every byte
// verified, with a short table of latency and bandwidth.
//
// It starts from configs/ring.ini (built in; --config and --set change it):
// the endpoints find each other's MACs with ARP, and progress is what the
// configuration says (inline by default: the demo's thread polls both
// engines; --set engine.progress=engine puts them on lcore 1).
#include <arpa/inet.h>
#include <rte_cycles.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cq/wc_mapping.h"
#include "pmd/eal.h"
#include "pmd/port_setup.h"
#include "pmd/shutdown_signal.h"
#include "runtime/config.h"
#include "runtime/runtime.h"
#include "tools/command.h"
#include "tools/config_flags.h"
#include "transport/address_text.h"
#include "transport/engine_side.h"
#include "transport/verbs_wr.h"

namespace uroce::tools {
namespace {

using transport::CompletionQueue;
using transport::EngineSide;
using transport::Engine;
using transport::QueuePair;

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

struct Region {
  std::vector<uint8_t> bytes;
  transport::MrKeys keys;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

double Seconds(uint64_t cycles) { return double(cycles) / double(rte_get_tsc_hz()); }

class Demo {
 public:
  Demo(runtime::Runtime& rt, EngineSide& a, EngineSide& b, QueuePair* qa, QueuePair* qb)
      : rt_(rt), a_(a), b_(b), qa_(qa), qb_(qb) {}

  bool Register(EngineSide& side, Region& r, size_t size) {
    r.bytes.assign(size, 0);
    auto keys = side.engine->RegMr(side.pd, r.bytes.data(), size, r.addr(), kAccess);
    if (!keys.ok()) {
      std::fprintf(stderr, "uroce demo: %s\n", keys.status().ToString().c_str());
      return false;
    }
    r.keys = *keys;
    return true;
  }

  // Inline progress: polls both engines. Engine progress: the lcore does.
  void Poll() { rt_.Progress(); }

  // Waits for one completion on `cq`; false on timeout or error status.
  bool Wait(CompletionQueue* cq, ibv_wc* wc) {
    const uint64_t deadline = rte_get_tsc_cycles() + 10 * rte_get_tsc_hz();
    while (cq->Poll(1, wc) == 0) {
      Poll();
      if (rte_get_tsc_cycles() > deadline || pmd::ShutdownRequested()) {
        std::fprintf(stderr, "uroce demo: %s\n",
                     pmd::ShutdownRequested() ? "interrupted" : "timed out waiting for a completion");
        return false;
      }
    }
    if (wc->status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "uroce demo: completion failed: %s\n", cq::CompletionStatusText(wc->status));
      return false;
    }
    return true;
  }

  static bool PostRecv(EngineSide& side, QueuePair* qp, Region& r, uint32_t length) {
    ibv_sge sge{r.addr(), length, r.keys.lkey};
    ibv_recv_wr wr = transport::RecvWr(0, &sge);
    const ibv_recv_wr* bad = nullptr;
    return side.engine->PostRecv(qp, &wr, &bad) == 0;
  }

  static bool Post(EngineSide& side, QueuePair* qp, ibv_wr_opcode op, Region& local, uint32_t offset,
                   uint32_t length, uint64_t remote_addr, uint32_t rkey, uint64_t wr_id) {
    ibv_sge sge{local.addr() + offset, length, local.keys.lkey};
    ibv_send_wr wr = transport::SignaledSendWr(wr_id, op, &sge);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    const ibv_send_wr* bad = nullptr;
    return side.engine->PostSend(qp, &wr, &bad) == 0;
  }

  // SEND ping-pong: A sends, B answers; half a round trip per message.
  bool SendPingPong(int iterations, uint32_t size, double* half_rtt_us) {
    Region a_buf, b_buf;
    if (!Register(a_, a_buf, size) || !Register(b_, b_buf, size)) return false;
    ibv_wc wc;
    const uint64_t start = rte_get_tsc_cycles();
    for (int i = 0; i < iterations; ++i) {
      std::memset(a_buf.bytes.data(), i & 0xFF, size);
      if (!PostRecv(b_, qb_, b_buf, size) || !PostRecv(a_, qa_, a_buf, size)) return false;
      if (!Post(a_, qa_, IBV_WR_SEND, a_buf, 0, size, 0, 0, i)) return false;
      if (!Wait(b_.cq, &wc) || wc.opcode != IBV_WC_RECV || wc.byte_len != size) return false;
      if (b_buf.bytes[0] != (i & 0xFF) || b_buf.bytes[size - 1] != (i & 0xFF)) return false;
      b_buf.bytes[0] ^= 0xFF;  // the answer differs from the question
      if (!Post(b_, qb_, IBV_WR_SEND, b_buf, 0, size, 0, 0, i)) return false;
      // A sees its send completion and the answer, in either order; B its send.
      for (int k = 0; k < 2; ++k) {
        if (!Wait(a_.cq, &wc)) return false;
      }
      if (!Wait(b_.cq, &wc)) return false;
      if (a_buf.bytes[0] != ((i & 0xFF) ^ 0xFF)) return false;
    }
    *half_rtt_us = Seconds(rte_get_tsc_cycles() - start) * 1e6 / iterations / 2;
    return true;
  }

  // RDMA WRITE or READ streaming, `outstanding` at a time; checks every byte.
  bool Stream(ibv_wr_opcode op, int messages, uint32_t size, int outstanding, double* gbps) {
    Region local, remote;
    const size_t span = size_t(size) * outstanding;
    if (!Register(a_, local, span) || !Register(b_, remote, span)) return false;
    Region& source = op == IBV_WR_RDMA_WRITE ? local : remote;
    for (size_t i = 0; i < span; ++i) source.bytes[i] = static_cast<uint8_t>(i * 31 + op);
    int posted = 0, done = 0;
    ibv_wc wc;
    const uint64_t start = rte_get_tsc_cycles();
    while (done < messages) {
      while (posted < messages && posted - done < outstanding) {
        const uint32_t slot = static_cast<uint32_t>(posted % outstanding) * size;
        if (!Post(a_, qa_, op, local, slot, size, remote.addr() + slot, remote.keys.rkey, posted)) return false;
        ++posted;
      }
      if (!Wait(a_.cq, &wc)) return false;
      ++done;
    }
    *gbps = double(messages) * size / Seconds(rte_get_tsc_cycles() - start) / 1e9;
    return local.bytes == remote.bytes;
  }

  // Fetch-and-add round trips; the target must hold the sum at the end.
  bool FetchAdd(int iterations, double* latency_us) {
    Region result, target;
    if (!Register(a_, result, 8) || !Register(b_, target, 8)) return false;
    ibv_wc wc;
    uint64_t expected = 0;
    const uint64_t start = rte_get_tsc_cycles();
    for (int i = 0; i < iterations; ++i) {
      ibv_sge sge{result.addr(), 8, result.keys.lkey};
      ibv_send_wr wr = transport::SignaledSendWr(i, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge);
      wr.wr.atomic.remote_addr = target.addr();
      wr.wr.atomic.rkey = target.keys.rkey;
      wr.wr.atomic.compare_add = i + 1;
      const ibv_send_wr* bad = nullptr;
      if (a_.engine->PostSend(qa_, &wr, &bad) != 0 || !Wait(a_.cq, &wc)) return false;
      uint64_t original;
      std::memcpy(&original, result.bytes.data(), 8);
      if (original != expected) return false;
      expected += i + 1;
    }
    *latency_us = Seconds(rte_get_tsc_cycles() - start) * 1e6 / iterations;
    uint64_t final_value;
    std::memcpy(&final_value, target.bytes.data(), 8);
    return final_value == expected;
  }

 private:
  runtime::Runtime& rt_;
  EngineSide& a_;
  EngineSide& b_;
  QueuePair* qa_;
  QueuePair* qb_;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "uroce demo: %s\n", what.c_str());
  std::printf("uroce demo: FAILED\n");
  return 1;
}

}  // namespace

int DemoUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce demo [--iterations N] [--config FILE] [--set SECTION.KEY=VALUE ...] [--impair SPEC]\n"
               "  two endpoints of one process (configs/ring.ini: a DPDK net_ring pair) connect RC\n"
               "  QPs over RoCEv2 and exchange SEND, WRITE, READ and atomics, every byte checked;\n"
               "  then QPs flushed and every packet buffer back in its pool.\n");
  return out == stdout ? 0 : 2;
}

int DemoCommand(int argc, char** argv) {
  int iterations = 2000;
  ConfigFlags flags;
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (TakeConfigFlag(argc, argv, &i, &flags, &error)) {
      if (!error.empty()) return Fail(error);
      continue;
    }
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else {
      return DemoUsage(stderr);
    }
  }
  if (iterations < 1) return Fail("--iterations must be positive");
  auto config = LoadToolConfig(flags, "ring");
  if (!config.ok()) return Fail(config.status().message());
  if (config->endpoints.size() != 2) return Fail(config->origin + ": the demo needs exactly two endpoints");

  pmd::InstallShutdownSignals();
  config->eal.program_name = "uroce-demo";
  Status s = pmd::StartEalFor(config->eal);
  if (!s.ok()) return Fail(s.ToString());
  int rc = 0;
  {
    auto rt = runtime::Runtime::Start(*config);
    if (!rt.ok()) {
      (void)pmd::StopEal();
      return Fail(rt.status().ToString());
    }
    runtime::Runtime& runtime = **rt;
    EngineSide& a = runtime.device(0).side;
    EngineSide& b = runtime.device(1).side;
    transport::RcConnectOptions connect;
    connect.mtu = std::min(a.engine->limits().max_mtu, b.engine->limits().max_mtu);
    connect.timeout = 14;
    // Neither engine knows the other's MAC yet: connecting resolves it (ARP).
    auto qps = transport::ConnectQueuePairs(a, b, connect);
    if (!qps.ok()) {
      runtime.Shutdown();
      (void)pmd::StopEal();
      return Fail(qps.status().ToString());
    }
    const bool engine_mode = !runtime.inline_progress();
    std::printf("uroce demo: two RoCEv2 endpoints over DPDK (%s <-> %s), no hugepages\n",
                runtime.device(0).config.port.c_str(), runtime.device(1).config.port.c_str());
    std::printf("  A %s %s QPN 0x%x  <->  B %s %s QPN 0x%x, RC, path MTU %u, MACs found by ARP\n",
                transport::GidToString(a.gid).c_str(), transport::MacToString(a.mac).c_str(), qps->first->qpn,
                transport::GidToString(b.gid).c_str(), transport::MacToString(b.mac).c_str(), qps->second->qpn,
                transport::MtuBytes(connect.mtu));
    std::printf("  progress: %s\n", engine_mode ? "engine (both engines spin on their own lcore)"
                                                 : "inline (this thread polls both engines)");
    Demo demo(runtime, a, b, qps->first, qps->second);
    double send_us = 0, write_gbps = 0, read_gbps = 0, atomic_us = 0;
    const int stream_messages = std::max(64, iterations / 4);
    const bool send_ok = demo.SendPingPong(iterations, 64, &send_us);
    const bool write_ok = send_ok && demo.Stream(IBV_WR_RDMA_WRITE, stream_messages, 65536, 16, &write_gbps);
    const bool read_ok = write_ok && demo.Stream(IBV_WR_RDMA_READ, stream_messages, 65536, 16, &read_gbps);
    const bool atomic_ok = read_ok && demo.FetchAdd(iterations, &atomic_us);
    std::printf("  %-16s %8s %10s %12s %12s  %s\n", "operation", "size", "messages", "latency", "bandwidth",
                "verified");
    std::printf("  %-16s %8s %10d %9.2f us %12s  %s\n", "SEND ping-pong", "64 B", iterations, send_us, "-",
                send_ok ? "yes" : "NO");
    std::printf("  %-16s %8s %10d %12s %7.2f GB/s  %s\n", "RDMA WRITE", "64 KiB", stream_messages, "-", write_gbps,
                write_ok ? "yes" : "NO");
    std::printf("  %-16s %8s %10d %12s %7.2f GB/s  %s\n", "RDMA READ", "64 KiB", stream_messages, "-", read_gbps,
                read_ok ? "yes" : "NO");
    std::printf("  %-16s %8s %10d %9.2f us %12s  %s\n", "FETCH_AND_ADD", "8 B", iterations, atomic_us, "-",
                atomic_ok ? "yes" : "NO");
    const transport::EngineCounters ca = a.engine->counters();
    std::printf("  A sent %llu frames, received %llu; retransmits %llu, ICRC drops %llu\n",
                (unsigned long long)ca.tx_frames, (unsigned long long)ca.rx_frames,
                (unsigned long long)ca.retransmits, (unsigned long long)ca.rx_icrc_errors);
    const runtime::NeighborCounters na = runtime.device(0).neighbors->counters();
    const runtime::NeighborCounters nb = runtime.device(1).neighbors->counters();
    std::printf("  ARP: A sent %llu request(s) and got %llu reply(ies); B answered %llu, asked %llu\n",
                (unsigned long long)na.arp_requests_sent, (unsigned long long)na.arp_replies_received,
                (unsigned long long)nb.arp_replies_sent, (unsigned long long)nb.arp_requests_sent);
    if (!(send_ok && write_ok && read_ok && atomic_ok)) rc = 1;
    const runtime::ShutdownReport report = runtime.Shutdown();
    std::printf("  mbufs back in the pools: %u of %u\n", report.mbufs_in_pools, report.mbufs_total);
    if (!report.impairments.empty()) {
      std::string lines = report.impairments;
      for (size_t at = lines.find('\n'); at != std::string::npos; at = lines.find('\n', at + 3)) lines.insert(at + 1, "  ");
      std::printf("  %s\n", lines.c_str());
    }
    if (!report.pools_full()) rc = 1;
  }
  if (!pmd::StopEal().ok()) rc = 1;
  std::printf("uroce demo: %s\n", rc == 0 ? "OK" : "FAILED");
  std::printf("(latency: half a SEND round trip; `uroce perf` measures more, `tools/perf_compare` compares)\n");
  return rc;
}

}  // namespace uroce::tools
