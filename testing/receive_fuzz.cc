// libFuzzer target for the engine's whole receive path: any bytes arrive as a
// frame at an engine with an RC QP (in RTS, with receives posted and memory
// registered) and a UD QP. The first input byte chooses fix-ups so that the
// fuzzer gets past the cheap checks: aim the frame at a real QPN, and repair
// the ICRC, so responder, completer and UD code see hostile but well-formed
// packets. With its bit 16, the RC QP first has requests of its own
// outstanding (READ 1 KiB at PSN 0-3, WRITE 64 B at 4, READ 1 KiB at 5-8
// on a fresh connection), so that READ responses, acknowledgements and NAKs
// meet the completer with something to answer, selective or not. The RC
// QP runs DCQCN, so CNPs and CE marks meet congestion control. Whatever
// the engine transmits is parsed back (it must be valid) and freed; a QP
// that ends in ERR is reset for the next input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "pmd/fuzz_environment.h"
#include "pmd/mempool.h"
#include "transport/engine.h"
#include "transport/icrc.h"
#include "transport/packet_parser.h"
#include "transport/scripted_peer.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

class FuzzPort : public PacketIo {
 public:
  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override {
    if (pending == nullptr || n == 0) return 0;
    pkts[0] = pending;
    pending = nullptr;
    return 1;
  }
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      PacketView view;
      if (ParsePacket(pkts[i], ParseOptions{}, &view) != ParseError::kOk) abort();  // we sent garbage
      rte_pktmbuf_free(pkts[i]);
    }
    return n;
  }
  rte_mbuf* pending = nullptr;
};

struct World {
  pmd::MempoolPtr pool;
  FuzzPort port;
  std::unique_ptr<Engine> engine;
  PdHandle pd = 0;
  CompletionQueue* cq = nullptr;
  QueuePair* rc = nullptr;
  QueuePair* ud = nullptr;
  std::vector<uint8_t> memory;
  MrKeys keys;
  uint64_t now = 1'000'000;
};

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

void Connect(World& w) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  (void)w.engine->ModifyQp(w.rc, a, IBV_QP_STATE);
  const uint8_t peer_ip[4] = {10, 9, 0, 2};
  ScriptedPeer peer{Ipv4MappedGid(peer_ip), 0x42, 0, 0};
  peer.path_mtu = IBV_MTU_256;
  peer.min_rnr_timer = 0;
  peer.timeout = 1;
  peer.retry_cnt = 1;
  (void)ConnectToScriptedPeer(*w.engine, w.rc, peer, kAll);
}

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    w->pool = pmd::StartFuzzEalWithPool(
        "receive_fuzz",
        {.name = "fuzz_pool", .mbufs = 4095, .per_core_cache = 0, .data_room = RTE_PKTMBUF_HEADROOM + 9000});
    const uint8_t ours[4] = {10, 9, 0, 1}, peer[4] = {10, 9, 0, 2};
    EngineConfig config;
    config.mac = {2, 0, 0, 0, 9, 1};
    config.gids = {Ipv4MappedGid(ours)};
    config.tx_pool = w->pool.get();
    config.io = &w->port;
    config.virtual_now_ns = &w->now;
    // DCQCN on the RC QP: CNPs reach an algorithm, and CE-marked requests
    // are answered with CNPs.
    config.congestion.algorithm = "dcqcn";
    w->engine = std::make_unique<Engine>(config);
    w->engine->AddNeighbor(Ipv4MappedGid(peer), {2, 0, 0, 0, 9, 2});
    w->pd = *w->engine->AllocPd();
    w->cq = *w->engine->CreateCq(4096);
    QpInitAttr init = OneCqQpInit(IBV_QPT_RC, w->pd, w->cq, 16, 1);
    w->rc = *w->engine->CreateQp(init);
    init.type = IBV_QPT_UD;
    w->ud = *w->engine->CreateQp(init);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = 0x11111111;
    (void)w->engine->ModifyQp(w->ud, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a.qp_state = IBV_QPS_RTR;
    (void)w->engine->ModifyQp(w->ud, a, IBV_QP_STATE);
    a.qp_state = IBV_QPS_RTS;
    (void)w->engine->ModifyQp(w->ud, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    w->memory.assign(1 << 16, 0);
    w->keys = *w->engine->RegMr(w->pd, w->memory.data(), w->memory.size(), 0x10000, kAll);
    Connect(*w);
    return w;
  }();
  return *world;
}

void Replenish(World& w, QueuePair* qp) {
  for (int i = 0; i < 4; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(w.memory.data()) + 4096u * i, 4096, w.keys.lkey};
    ibv_recv_wr wr = RecvWr(0, &sge);
    const ibv_recv_wr* bad = nullptr;
    if (w.engine->PostRecv(qp, &wr, &bad) != 0) break;
  }
}

// Two READs and a WRITE between them, from the RC QP, when it has nothing
// outstanding.
void PostRequests(World& w) {
  if (w.rc->req.head != w.rc->req.tail || w.rc->state.load() != IBV_QPS_RTS) return;
  const uint64_t base = reinterpret_cast<uint64_t>(w.memory.data());
  const struct {
    ibv_wr_opcode opcode;
    uint32_t offset, length;
  } requests[] = {{IBV_WR_RDMA_READ, 32768, 1024}, {IBV_WR_RDMA_WRITE, 36864, 64}, {IBV_WR_RDMA_READ, 40960, 1024}};
  for (const auto& r : requests) {
    ibv_sge sge{base + r.offset, r.length, w.keys.lkey};
    ibv_send_wr wr{};
    wr.opcode = r.opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = 0x10000 + r.offset;
    wr.wr.rdma.rkey = 0x77;
    const ibv_send_wr* bad = nullptr;
    if (w.engine->PostSend(w.rc, &wr, &bad) != 0) return;
  }
  w.engine->Poll();  // the requests leave before the frame arrives
}

}  // namespace
}  // namespace uroce::transport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::transport;
  World& w = GetWorld();
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  if (size > 9000) return 0;
  if (mode & 16) PostRequests(w);
  rte_mbuf* m = rte_pktmbuf_alloc(w.pool.get());
  if (m == nullptr) abort();  // a leak in the engine would show up here
  uint8_t* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(size)));
  if (size > 0) std::memcpy(frame, data, size);
  PacketView view;
  ParsePacket(frame, size, ParseOptions{false, false}, &view);
  if (view.is_roce && size_t(view.bth_offset) + 12 <= size) {
    if (mode & 1) {
      // Aim at one of our QPs.
      const uint32_t qpn = (mode & 2) ? w.ud->qpn : w.rc->qpn;
      StoreBe24(frame + view.bth_offset + 5, qpn);
    }
    if ((mode & 4) && view.packet_end >= size_t(view.l3_offset) + view.ip_header_bytes + 4 &&
        view.packet_end <= size) {
      const size_t covered = view.packet_end - view.l3_offset - kIcrcBytes;
      const uint32_t icrc = ComputeIcrc(frame + view.l3_offset, view.ip_header_bytes,
                                        view.fields.ip_version, covered);
      StoreLe32(frame + view.l3_offset + covered, icrc);
    }
  }
  w.port.pending = m;
  for (int i = 0; i < 4; ++i) {
    w.now += (mode & 8) ? 5'000'000 : 1'000;  // sometimes let timers fire
    w.engine->Poll();
  }
  ibv_wc wc[64];
  while (w.cq->Poll(64, wc) > 0) {
  }
  if (w.rc->state.load() == IBV_QPS_ERR) Connect(w);
  Replenish(w, w.rc);
  Replenish(w, w.ud);
  return 0;
}
