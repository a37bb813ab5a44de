// libFuzzer target: a hostile peer's whole conversation, not one frame. The
// input is a script; each step is one of
//   frame     a well-formed RoCEv2 frame (right ICRC, and unless the script
//             says otherwise the QP's own addresses and a PSN near the one
//             expected) to one of the engine's QPs, with fields from the input;
//   raw       arbitrary bytes as a frame;
//   tx        block or unblock the port's transmit side (a full TX queue);
//   reg/dereg register or deregister a memory region over one slot of an
//             arena (with guard bytes between the slots);
//   modify    a QP to ERR, back through RESET to RTS, or new access flags;
//   poll      polls with the virtual clock moving a little or a lot;
//   post      sends (SEND/WRITE/READ/atomics) and receives of our own;
//   mad       a CM MAD (REQ, REP, REJ, MRA, DREQ, ...) to QP 1, then a CM poll,
// run against a live engine with a connection manager that listens. A new
// world per input (so that a crash replays from its input alone), and after
// the script, the hostile-peer invariants, each an abort:
//   - every mbuf is back in its pool once the engine is gone;
//   - no byte outside the registered slots (guards) changed;
//   - no byte of a slot changed while it was not registered;
//   - no frame that left carried a byte of a slot read while it was not
//     registered (such slots hold a poison pattern nothing else sends).
// Built with --config=fuzz it is a fuzzer (ASan + UBSan); otherwise
// `hostile_script_fuzz_replay` runs its corpus in every CI run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/connection_manager.h"
#include "pmd/fuzz_environment.h"
#include "pmd/mempool.h"
#include "transport/engine.h"
#include "transport/packet_builder.h"
#include "transport/scripted_peer.h"
#include "transport/scripted_port.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {

using cm::CmEvent;
using cm::CmEventType;
using cm::ConnectionManager;
using cm::kCmClassVersion;
using cm::kCmManagementClass;
using cm::kGsiQkey;
using cm::kGsiQpn;
using cm::kMadBaseVersion;
using cm::kMadBytes;

namespace {

constexpr unsigned kPoolMbufs = 2047;
constexpr size_t kSlots = 6;
constexpr size_t kSlotBytes = 8192;
constexpr size_t kGuardBytes = 256;
constexpr uint8_t kGuard = 0xC5;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kPeerQpn = 0x42;
// Unregistered slots hold this; no frame may carry a run of it. The script's
// own fill bytes avoid it.
constexpr uint8_t kPoison = 0xEE;
constexpr size_t kPoisonRun = 64;  // longer than any run of atomic results (8 bytes each)

bool CarriesPoison(const rte_mbuf* m) {
  const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
  size_t run = 0;
  for (uint32_t i = 0; i < rte_pktmbuf_data_len(m); ++i) {
    run = p[i] == kPoison ? run + 1 : 0;
    if (run >= kPoisonRun) return true;
  }
  return false;
}

// The input, read a byte at a time; zeros once it is used up.
class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (uint32_t(u16()) << 16); }
  uint64_t u64() { return u32() | (uint64_t(u32()) << 32); }
  const uint8_t* bytes(size_t n, size_t* got) {
    *got = std::min(n, size_ - std::min(pos_, size_));
    const uint8_t* p = data_ + pos_;
    pos_ += *got;
    return p;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct Slot {
  bool registered = false;
  MrKeys keys;
  std::vector<uint8_t> snapshot;  // while not registered: nothing may change it
};

struct World {
  ScriptedPort port;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ConnectionManager> cm;
  PdHandle pd = 0;
  CompletionQueue* cq = nullptr;
  std::vector<QueuePair*> qps;  // two RC, one UD
  uint32_t ah = 0;               // to the peer, for UD sends
  std::vector<uint8_t> arena;
  Slot slots[kSlots];
  uint64_t now = 1'000'000;
  Gid ours{}, peer{};

  uint8_t* slot_data(size_t i) { return arena.data() + kGuardBytes + i * (kSlotBytes + kGuardBytes); }
};

rte_mempool* Pool() {
  static rte_mempool* pool = [] {
    return pmd::StartFuzzEalWithPool("hostile_script_fuzz", {.name = "script_fuzz_pool",
                                                            .mbufs = kPoolMbufs,
                                                            .per_core_cache = 0,
                                                            .data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256})
        .release();
  }();
  return pool;
}

void Connect(World& w, QueuePair* qp, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE);
  if (qp->type == IBV_QPT_UD) {
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = 0x11111111;
    (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE);
    a.qp_state = IBV_QPS_RTS;
    (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    return;
  }
  ScriptedPeer peer{w.peer, kPeerQpn, 0, 0};
  peer.min_rnr_timer = 1;
  peer.timeout = 4;
  peer.rnr_retry = 2;
  (void)ConnectToScriptedPeer(*w.engine, qp, peer, access);
}

void MakeWorld(World& w) {
  const uint8_t ours[4] = {10, 9, 0, 1}, peer[4] = {10, 9, 0, 2};
  w.ours = Ipv4MappedGid(ours);
  w.peer = Ipv4MappedGid(peer);
  EngineConfig config;
  config.mac = {2, 0, 0, 0, 9, 1};
  config.gids = {w.ours};
  config.tx_pool = Pool();
  config.io = &w.port;
  config.virtual_now_ns = &w.now;
  config.random_seed = 1;
  config.per_qp_packet_budget = 8;
  w.engine = std::make_unique<Engine>(config);
  w.engine->AddNeighbor(w.peer, {2, 0, 0, 0, 9, 2});
  w.pd = *w.engine->AllocPd();
  w.cq = *w.engine->CreateCq(4096);
  QpInitAttr init = OneCqQpInit(IBV_QPT_RC, w.pd, w.cq, 16, 2);
  for (int i = 0; i < 2; ++i) w.qps.push_back(*w.engine->CreateQp(init));
  init.type = IBV_QPT_UD;
  w.qps.push_back(*w.engine->CreateQp(init));
  for (QueuePair* qp : w.qps) Connect(w, qp, kAll);
  w.arena.assign(kGuardBytes + kSlots * (kSlotBytes + kGuardBytes), kGuard);
  for (size_t i = 0; i < kSlots; ++i) {
    std::memset(w.slot_data(i), kPoison, kSlotBytes);
    w.slots[i].snapshot.assign(w.slot_data(i), w.slot_data(i) + kSlotBytes);
  }
  ibv_ah_attr ah{};
  ah.is_global = 1;
  std::memcpy(ah.grh.dgid.raw, w.peer.data(), 16);
  w.ah = *w.engine->CreateAh(w.pd, ah);
  ConnectionManager::Options cm;
  cm.clock_ns = [&w] { return w.now; };
  cm.random_seed = 3;
  cm.recv_buffers = 16;
  auto made = ConnectionManager::Create(w.engine.get(), w.pd, cm);
  if (!made.ok()) abort();
  w.cm = std::move(made).value();
  (void)w.cm->Listen(7471, 1);
}

// One engine poll; what left the port is checked for poison and freed.
void PollEngine(World& w) {
  w.engine->Poll();
  for (rte_mbuf* m : w.port.outbound) {
    if (CarriesPoison(m)) abort();  // read memory that was not registered
    rte_pktmbuf_free(m);
  }
  w.port.outbound.clear();
}

void Inject(World& w, const PacketFields& f, const uint8_t* payload) {
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  if (m == nullptr) abort();  // the engine holds every buffer: a leak
  if (BuildPacket(f, payload, m) != BuildError::kOk) {
    rte_pktmbuf_free(m);
    return;
  }
  w.port.inbound.push_back(m);
}

void StepFrame(World& w, Script& s) {
  static uint8_t payload[4096];
  QueuePair* qp = w.qps[s.u8() % w.qps.size()];
  const uint8_t flags = s.u8();
  PacketFields f;
  f.dst_mac = {2, 0, 0, 0, 9, 1};
  f.src_mac = {2, 0, 0, 0, 9, 2};
  f.src_gid = w.peer;
  f.dst_gid = w.ours;
  if (flags & 0x80) f.src_gid[15] ^= s.u8();  // someone else
  f.bth.opcode = s.u8();
  f.bth.dest_qp = (flags & 0x40) ? s.u32() & 0xFFFFFF : qp->qpn;
  // Near the PSN a responder expects or a requester waits for, or anywhere.
  const int8_t delta = static_cast<int8_t>(s.u8());
  const Psn base = (flags & 1) ? qp->req.unacked : qp->resp.expected_psn;
  f.bth.psn = (flags & 0x20) ? Psn(s.u32() & 0xFFFFFF) : base + static_cast<uint32_t>(int32_t(delta));
  f.bth.ack_request = (flags & 2) != 0;
  if (flags & 0x10) f.bth.pkey = s.u16();
  const size_t slot = s.u8() % kSlots;
  const uint32_t offset = s.u16() % (kSlotBytes + 64);
  f.reth.virtual_address = reinterpret_cast<uint64_t>(w.slot_data(slot)) + offset - 32;
  f.reth.rkey = (flags & 4) ? s.u32() : w.slots[slot].keys.rkey;
  f.reth.dma_length = (flags & 8) ? s.u32() : s.u16() % 9000;
  f.atomic_eth.virtual_address = f.reth.virtual_address & ~uint64_t(s.u8() & 7 ? 7 : 0);
  f.atomic_eth.rkey = f.reth.rkey;
  f.atomic_eth.swap_or_add_data = s.u64();
  f.atomic_eth.compare_data = s.u64();
  f.aeth.syndrome = s.u8();
  f.aeth.msn = s.u32() & 0xFFFFFF;
  f.deth.qkey = (s.u8() & 1) ? 0x11111111 : s.u32();
  f.deth.src_qp = kPeerQpn;
  f.immediate_data = s.u32();
  f.atomic_ack_eth.original_remote_data = s.u64();
  f.payload_length = s.u16() % 1100;
  const uint8_t fill = s.u8();
  std::memset(payload, fill == kPoison ? 0 : fill, f.payload_length);
  Inject(w, f, payload);
}

void StepRaw(World& w, Script& s) {
  size_t length = 0;
  const uint8_t* bytes = s.bytes(s.u16() % 1600, &length);
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  if (m == nullptr) abort();
  char* frame = rte_pktmbuf_append(m, static_cast<uint16_t>(length));
  if (frame == nullptr) {
    rte_pktmbuf_free(m);
    return;
  }
  if (length > 0) std::memcpy(frame, bytes, length);
  w.port.inbound.push_back(m);
}

void StepRegister(World& w, Script& s) {
  Slot& slot = w.slots[s.u8() % kSlots];
  const size_t index = static_cast<size_t>(&slot - w.slots);
  const int access = s.u8() & kAll;
  if (slot.registered) return;
  // Untouched while it was not registered; the application then reuses it.
  if (std::memcmp(slot.snapshot.data(), w.slot_data(index), kSlotBytes) != 0) abort();
  std::memset(w.slot_data(index), 0, kSlotBytes);
  auto keys = w.engine->RegMr(w.pd, w.slot_data(index), kSlotBytes, reinterpret_cast<uint64_t>(w.slot_data(index)),
                              access | IBV_ACCESS_LOCAL_WRITE);
  if (!keys.ok()) return;
  slot.registered = true;
  slot.keys = *keys;
}

void StepDeregister(World& w, Script& s) {
  Slot& slot = w.slots[s.u8() % kSlots];
  const size_t index = static_cast<size_t>(&slot - w.slots);
  if (!slot.registered) return;
  if (!w.engine->DeregMr(slot.keys.lkey).ok()) abort();
  slot.registered = false;
  // From now on nothing of ours or the peer's may touch it: poisoned, so that
  // a read shows in what leaves, and kept, so that a write shows here.
  std::memset(w.slot_data(index), kPoison, kSlotBytes);
  slot.snapshot.assign(w.slot_data(index), w.slot_data(index) + kSlotBytes);
}

void StepModify(World& w, Script& s) {
  QueuePair* qp = w.qps[s.u8() % w.qps.size()];
  const uint8_t action = s.u8();
  ibv_qp_attr a{};
  switch (action % 3) {
    case 0:
      a.qp_state = IBV_QPS_ERR;
      (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE);
      break;
    case 1:
      Connect(w, qp, (action >> 2) & kAll);
      break;
    default:
      a.qp_state = IBV_QPS_RTS;
      a.qp_access_flags = (action >> 2) & kAll;
      (void)w.engine->ModifyQp(qp, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
      break;
  }
}

void StepPoll(World& w, Script& s) {
  const uint8_t how = s.u8();
  for (int i = 0; i <= (how & 7); ++i) {
    w.now += (how & 8) ? 50'000'000 : 2'000;  // sometimes let timers fire
    PollEngine(w);
  }
  ibv_wc wc[64];
  while (w.cq->Poll(64, wc) > 0) {
  }
  w.cm->Poll();
  CmEvent event;
  while (w.cm->NextEvent(&event)) {
    if (event.type == CmEventType::kConnectRequest) (void)w.cm->Reject(event.id, nullptr, 0);
  }
}

void StepPost(World& w, Script& s) {
  const uint8_t which = s.u8();
  QueuePair* qp = w.qps[which % 3];
  const uint8_t kind = s.u8();
  const size_t slot = s.u8() % kSlots;
  ibv_sge sge{reinterpret_cast<uint64_t>(w.slot_data(slot)) + s.u16() % 4096, s.u16() % 4097u,
              w.slots[slot].keys.lkey};
  if (kind & 0x80) {
    ibv_recv_wr wr = RecvWr(0, &sge);
    const ibv_recv_wr* bad = nullptr;
    (void)w.engine->PostRecv(qp, &wr, &bad);
    return;
  }
  static const ibv_wr_opcode kOps[] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
                                       IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_SEND_WITH_IMM, IBV_WR_ATOMIC_WRITE};
  ibv_send_wr wr{};
  wr.opcode = kOps[kind % 7];
  if (wr.opcode == IBV_WR_ATOMIC_WRITE) sge.length = 8;  // any address: the peer's responder judges it
  wr.send_flags = (kind & 0x40) ? IBV_SEND_SIGNALED : 0;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
    sge.length = 8;
    sge.addr &= ~uint64_t(7);
    wr.wr.atomic.remote_addr = s.u64();
    wr.wr.atomic.rkey = s.u32();
  } else {
    wr.wr.rdma.remote_addr = s.u64();
    wr.wr.rdma.rkey = s.u32();
  }
  ibv_ah ah{};
  if (qp->type == IBV_QPT_UD) {
    ah.handle = w.ah;
    wr.opcode = (kind & 1) ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    sge.length %= 1025;
    wr.wr.ud.ah = &ah;
    wr.wr.ud.remote_qpn = kPeerQpn;
    wr.wr.ud.remote_qkey = 0x11111111;
  }
  const ibv_send_wr* bad = nullptr;
  (void)w.engine->PostSend(qp, &wr, &bad);
}

// A CM MAD to QP 1 from the peer: a valid header (management class, version,
// an attribute of the CM class) and the rest from the script.
void StepMad(World& w, Script& s) {
  uint8_t mad[kMadBytes] = {};
  size_t got = 0;
  const uint8_t* bytes = s.bytes(kMadBytes, &got);
  if (got > 0) std::memcpy(mad, bytes, got);
  mad[0] = kMadBaseVersion;
  mad[1] = kCmManagementClass;
  mad[2] = kCmClassVersion;
  mad[3] &= 0x83;
  mad[16] = 0;
  mad[17] = static_cast<uint8_t>(0x10 + mad[17] % 7);  // REQ, MRA, REJ, REP, RTU, DREQ, DREP
  PacketFields f;
  f.dst_mac = {2, 0, 0, 0, 9, 1};
  f.src_mac = {2, 0, 0, 0, 9, static_cast<uint8_t>(2 + (mad[18] & 1))};
  f.src_gid = w.peer;
  f.src_gid[15] ^= mad[19] & 3;  // sometimes a source nobody resolves
  f.dst_gid = w.ours;
  f.bth.opcode = static_cast<uint8_t>(Opcode::kUdSendOnly);
  f.bth.dest_qp = kGsiQpn;
  f.deth.qkey = kGsiQkey;
  f.deth.src_qp = 1;
  f.payload_length = kMadBytes;
  Inject(w, f, mad);
  w.now += 2'000;
  PollEngine(w);
  w.cm->Poll();
}

}  // namespace
}  // namespace uroce::transport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::transport;
  if (size > 64 * 1024) return 0;
  rte_mempool* pool = Pool();
  {
    World w;
    MakeWorld(w);
    Script s(data, size);
    for (int steps = 0; !s.done() && steps < 256; ++steps) {
      switch (s.u8() % 10) {
        case 0: case 1: StepFrame(w, s); break;
        case 2: StepRaw(w, s); break;
        case 3: w.port.blocked = !w.port.blocked; break;
        case 4: StepRegister(w, s); break;
        case 5: StepDeregister(w, s); break;
        case 6: StepModify(w, s); break;
        case 7: StepPoll(w, s); break;
        case 8: StepPost(w, s); break;
        default: StepMad(w, s); break;
      }
    }
    // Drain: the port takes everything again.
    w.port.blocked = false;
    for (int i = 0; i < 8; ++i) {
      w.now += 1'000'000;
      PollEngine(w);
      w.cm->Poll();
    }
    for (size_t i = 0; i < kSlots; ++i) {
      const Slot& slot = w.slots[i];
      if (!slot.registered && std::memcmp(slot.snapshot.data(), w.slot_data(i), kSlotBytes) != 0) {
        abort();  // written while not registered (after ibv_dereg_mr returned)
      }
    }
    for (size_t i = 0; i < w.arena.size(); ++i) {
      const size_t in_slot = i < kGuardBytes ? SIZE_MAX : (i - kGuardBytes) % (kSlotBytes + kGuardBytes);
      if ((in_slot == SIZE_MAX || in_slot >= kSlotBytes) && w.arena[i] != kGuard) abort();  // outside any region
    }
    w.cm.reset();
    w.engine.reset();
    w.port.FreeAll();
  }
  if (uroce::pmd::AvailableMbufs(pool) != kPoolMbufs) abort();  // a buffer leaked
  return 0;
}
