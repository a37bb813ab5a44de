#include "testing/soak.h"

#include <arpa/inet.h>

#include <cstring>
#include <deque>
#include <random>
#include <sstream>
#include <vector>

#include "testing/engine_pair.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

// The bytes of message `id`: a cheap generator, so the target can check any
// byte without keeping a copy.
inline uint8_t PatternByte(uint64_t id, uint64_t i) {
  uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

void FillPattern(uint8_t* p, uint64_t id, uint32_t length) {
  for (uint32_t i = 0; i < length; ++i) p[i] = PatternByte(id, i);
}

bool CheckPattern(const uint8_t* p, uint64_t id, uint32_t length) {
  for (uint32_t i = 0; i < length; ++i) {
    if (p[i] != PatternByte(id, i)) return false;
  }
  return true;
}

ibv_mtu MtuEnum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

enum class Kind : uint8_t { kSend, kSendImm, kWrite, kWriteImm, kRead, kFetchAdd };

struct Pending {
  uint64_t id = 0;
  Kind kind = Kind::kSend;
  uint32_t slot = 0;
  uint32_t length = 0;
  uint32_t offset = 0;
  uint64_t expected_original = 0;  // fetch-add
};

// One QP pair and its memory. A sends; B is the target.
struct Lane {
  QueuePair* qa = nullptr;
  QueuePair* qb = nullptr;
  std::vector<uint8_t> a_mem, b_mem, b_recv;
  MrKeys a_keys, b_keys, b_recv_keys;
  std::deque<Pending> in_flight;         // in posting order (RC completes in order)
  std::deque<Pending> expected_recvs;    // SEND / *_WITH_IMM, in order
  uint32_t next_slot = 0;
  uint32_t next_recv_slot = 0;
  uint64_t counter = 0;  // the fetch-add word's expected value
};

}  // namespace

StatusOr<unsigned> ParseSoakOps(const std::string& list) {
  unsigned ops = 0;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "send") ops |= kSoakSend;
    else if (item == "write") ops |= kSoakWrite;
    else if (item == "read") ops |= kSoakRead;
    else if (item == "atomic") ops |= kSoakAtomic;
    else if (item == "imm") ops |= kSoakImm;
    else if (item == "all") ops |= kSoakAllOps;
    else return InvalidArgument("unknown operation '" + item + "' (send, write, read, atomic, imm)");
  }
  if (ops == 0) return InvalidArgument("no operation given");
  return ops;
}

StatusOr<SoakResult> RunSoak(const SoakOptions& o, const std::function<void(const SoakProgress&)>& progress) {
  if (o.qps == 0 || o.qps > 256) return InvalidArgument("--qps must be 1..256");
  if (o.max_size > (1u << 22)) return InvalidArgument("--max-size must be at most 4 MiB");
  if (o.outstanding_per_qp == 0 || o.outstanding_per_qp > 128) return InvalidArgument("outstanding must be 1..128");
  EnginePairOptions pair_options;
  pair_options.seed = o.seed;
  pair_options.dpdk_ring = o.dpdk_ring;
  if (o.dpdk_ring && (o.impairments.loss > 0 || o.impairments.duplicate > 0 || o.impairments.reorder > 0 ||
                      o.impairments.corrupt > 0 || o.impairments.max_delay > 0)) {
    return InvalidArgument("link impairments apply to the in-memory link only, not to --port ring");
  }
  if (o.host_ports && (o.dpdk_ring || o.impairments.loss > 0 || o.impairments.duplicate > 0 ||
                       o.impairments.reorder > 0 || o.impairments.corrupt > 0 || o.impairments.max_delay > 0)) {
    return InvalidArgument("link impairments apply to the in-memory link only, not to a local link");
  }
  pair_options.host_ports = o.host_ports;
  pair_options.engine_template.pull_min_bytes = o.pull_min_bytes;
  pair_options.impairments = o.impairments;
  pair_options.port_mtu = o.path_mtu_bytes + 100;
  pair_options.selective_a = o.selective_a;
  pair_options.selective_b = o.selective_b;
  auto pair_or = EnginePair::Create(pair_options);
  if (!pair_or.ok()) return pair_or.status();
  std::unique_ptr<EnginePair> pair = std::move(*pair_or);
  std::mt19937_64 random(o.seed ^ 0x5EED5EED);

  RcConnectOptions connect;
  connect.mtu = MtuEnum(o.path_mtu_bytes);
  connect.timeout = 8;  // ~1 ms of virtual time
  connect.retry_cnt = 7;
  connect.rnr_retry = 7;
  connect.max_send_wr = o.outstanding_per_qp * 2;
  connect.max_recv_wr = o.outstanding_per_qp * 2;
  const uint32_t slot_bytes = (o.max_size + 64 + 7) & ~7u;
  std::vector<Lane> lanes(o.qps);
  for (uint32_t q = 0; q < o.qps; ++q) {
    Lane& lane = lanes[q];
    connect.psn_a = static_cast<uint32_t>(random() & 0xFFFFFF);
    connect.psn_b = static_cast<uint32_t>(random() & 0xFFFFFF);
    auto qps = pair->ConnectQps(connect);
    if (!qps.ok()) return qps.status();
    lane.qa = qps->first;
    lane.qb = qps->second;
    lane.a_mem.assign(size_t(slot_bytes) * o.outstanding_per_qp + 8, 0);
    lane.b_mem.assign(size_t(slot_bytes) * o.outstanding_per_qp + 8, 0);
    lane.b_recv.assign(size_t(slot_bytes) * o.outstanding_per_qp * 2, 0);
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC;
    auto ka = pair->a().engine->RegMr(pair->a().pd, lane.a_mem.data(), lane.a_mem.size(),
                                      reinterpret_cast<uint64_t>(lane.a_mem.data()), all);
    auto kb = pair->b().engine->RegMr(pair->b().pd, lane.b_mem.data(), lane.b_mem.size(),
                                      reinterpret_cast<uint64_t>(lane.b_mem.data()), all);
    auto kr = pair->b().engine->RegMr(pair->b().pd, lane.b_recv.data(), lane.b_recv.size(),
                                      reinterpret_cast<uint64_t>(lane.b_recv.data()), all);
    if (!ka.ok() || !kb.ok() || !kr.ok()) return Internal("memory registration failed");
    lane.a_keys = *ka;
    lane.b_keys = *kb;
    lane.b_recv_keys = *kr;
    // Keep B's receive queue full: one buffer per receive slot.
    for (uint32_t r = 0; r < o.outstanding_per_qp * 2; ++r) {
      ibv_sge sge{reinterpret_cast<uint64_t>(lane.b_recv.data()) + uint64_t(r) * slot_bytes, slot_bytes,
                  lane.b_recv_keys.lkey};
      ibv_recv_wr wr = RecvWr(r, &sge);
      const ibv_recv_wr* bad = nullptr;
      if (pair->b().engine->PostRecv(lane.qb, &wr, &bad) != 0) return Internal("post_recv failed");
    }
  }

  std::vector<Kind> kinds;
  if (o.ops & kSoakSend) kinds.push_back(Kind::kSend);
  if (o.ops & kSoakWrite) kinds.push_back(Kind::kWrite);
  if (o.ops & kSoakRead) kinds.push_back(Kind::kRead);
  if (o.ops & kSoakAtomic) kinds.push_back(Kind::kFetchAdd);
  if (o.ops & kSoakImm) {
    kinds.push_back(Kind::kSendImm);
    kinds.push_back(Kind::kWriteImm);
  }

  SoakResult result;
  result.messages = o.messages;
  uint64_t next_id = 0;
  auto fail = [&](const std::string& what) {
    ++result.errors;
    if (result.first_error.empty()) result.first_error = what;
  };

  // Posts one random operation on `lane`.
  auto post = [&](Lane& lane) -> bool {
    Pending p;
    p.id = next_id;
    p.kind = kinds[random() % kinds.size()];
    p.slot = lane.next_slot++ % o.outstanding_per_qp;
    p.length = o.max_size == 0 ? 0 : static_cast<uint32_t>(random() % (o.max_size + 1));
    p.offset = static_cast<uint32_t>(random() % 64);  // random alignment inside the slot
    if (p.offset + p.length > slot_bytes) p.offset = 0;
    uint8_t* local = lane.a_mem.data() + size_t(p.slot) * slot_bytes + p.offset;
    uint8_t* remote = lane.b_mem.data() + size_t(p.slot) * slot_bytes + p.offset;
    ibv_sge sge{reinterpret_cast<uint64_t>(local), p.length, lane.a_keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = p.id;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote);
    wr.wr.rdma.rkey = lane.b_keys.rkey;
    switch (p.kind) {
      case Kind::kSend:
      case Kind::kSendImm:
        FillPattern(local, p.id, p.length);
        wr.opcode = p.kind == Kind::kSend ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(p.id));
        break;
      case Kind::kWrite:
      case Kind::kWriteImm:
        FillPattern(local, p.id, p.length);
        wr.opcode = p.kind == Kind::kWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(p.id));
        break;
      case Kind::kRead:
        FillPattern(remote, p.id, p.length);
        std::memset(local, 0, p.length);
        wr.opcode = IBV_WR_RDMA_READ;
        break;
      case Kind::kFetchAdd: {
        // The lane's counter word sits after the slots, 8-byte aligned.
        const size_t word = lane.b_mem.size() - 8;
        p.length = 8;
        p.offset = 0;
        // The original value lands at the start of the slot (8-byte aligned).
        sge.addr = reinterpret_cast<uint64_t>(lane.a_mem.data() + size_t(p.slot) * slot_bytes);
        sge.length = 8;
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(lane.b_mem.data() + word);
        wr.wr.atomic.rkey = lane.b_keys.rkey;
        wr.wr.atomic.compare_add = p.id + 1;
        p.expected_original = lane.counter;
        lane.counter += p.id + 1;
        break;
      }
    }
    const ibv_send_wr* bad = nullptr;
    if (pair->a().engine->PostSend(lane.qa, &wr, &bad) != 0) return false;
    lane.in_flight.push_back(p);
    if (p.kind == Kind::kSend || p.kind == Kind::kSendImm || p.kind == Kind::kWriteImm) {
      lane.expected_recvs.push_back(p);
    }
    ++next_id;
    return true;
  };

  auto lane_of = [&](uint32_t qpn, bool on_a) -> Lane* {
    for (Lane& lane : lanes) {
      if ((on_a ? lane.qa : lane.qb)->qpn == qpn) return &lane;
    }
    return nullptr;
  };

  uint64_t polls = 0;
  uint64_t completed = 0;
  ibv_wc wcs[32];
  while (completed < o.messages && polls < o.max_polls) {
    for (Lane& lane : lanes) {
      while (next_id < o.messages && lane.in_flight.size() < o.outstanding_per_qp) {
        if (!post(lane)) break;
      }
    }
    pair->PollOnce();
    ++polls;
    // Requester completions.
    int n = pair->a().cq->Poll(32, wcs);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      Lane* lane = lane_of(wc.qp_num, true);
      if (lane == nullptr || lane->in_flight.empty()) {
        fail("completion for an unknown QP or nothing outstanding");
        continue;
      }
      Pending p = lane->in_flight.front();
      lane->in_flight.pop_front();
      ++completed;
      if (wc.status != IBV_WC_SUCCESS) {
        fail("message " + std::to_string(p.id) + " completed with status " + std::to_string(wc.status));
        continue;
      }
      if (wc.wr_id != p.id) {
        fail("completion out of order: wr_id " + std::to_string(wc.wr_id) + ", expected " + std::to_string(p.id));
        continue;
      }
      const uint8_t* local = lane->a_mem.data() + size_t(p.slot) * slot_bytes + p.offset;
      const uint8_t* remote = lane->b_mem.data() + size_t(p.slot) * slot_bytes + p.offset;
      bool good = true;
      switch (p.kind) {
        case Kind::kWrite:
        case Kind::kWriteImm:
          good = CheckPattern(remote, p.id, p.length);
          break;
        case Kind::kRead:
          good = CheckPattern(local, p.id, p.length);
          break;
        case Kind::kFetchAdd: {
          uint64_t original;
          std::memcpy(&original, lane->a_mem.data() + size_t(p.slot) * slot_bytes, 8);
          good = original == p.expected_original;
          break;
        }
        default:
          break;  // SENDs are checked at the receiver
      }
      if (!good) {
        fail("message " + std::to_string(p.id) + ": data mismatch");
        continue;
      }
      if (p.kind == Kind::kWrite || p.kind == Kind::kRead || p.kind == Kind::kFetchAdd) ++result.verified;
    }
    // Receiver completions: SENDs and immediates, in order per QP.
    n = pair->b().cq->Poll(32, wcs);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      Lane* lane = lane_of(wc.qp_num, false);
      if (lane == nullptr || lane->expected_recvs.empty()) {
        fail("unexpected receive completion (duplicate delivered to the application?)");
        continue;
      }
      Pending p = lane->expected_recvs.front();
      lane->expected_recvs.pop_front();
      const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
      const uint8_t* buf = lane->b_recv.data() + size_t(slot) * slot_bytes;
      bool good = wc.status == IBV_WC_SUCCESS;
      if (p.kind == Kind::kWriteImm) {
        good = good && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
               ntohl(wc.imm_data) == static_cast<uint32_t>(p.id) && wc.byte_len == p.length;
      } else {
        good = good && wc.opcode == IBV_WC_RECV && wc.byte_len == p.length && CheckPattern(buf, p.id, p.length);
        if (p.kind == Kind::kSendImm) {
          good = good && (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == static_cast<uint32_t>(p.id);
        }
      }
      if (!good) {
        fail("receive for message " + std::to_string(p.id) + " wrong (status " + std::to_string(wc.status) + ")");
      } else {
        ++result.verified;
      }
      // Give the buffer back.
      ibv_sge sge{reinterpret_cast<uint64_t>(buf), slot_bytes, lane->b_recv_keys.lkey};
      ibv_recv_wr wr = RecvWr(slot, &sge);
      const ibv_recv_wr* bad = nullptr;
      if (pair->b().engine->PostRecv(lane->qb, &wr, &bad) != 0) fail("re-posting a receive failed");
    }
    if (progress && (polls & 0xFFFF) == 0) {
      SoakProgress sp;
      sp.posted = next_id;
      sp.verified = result.verified;
      sp.errors = result.errors;
      sp.retransmits = pair->a().engine->counters().retransmits;
      progress(sp);
    }
  }
  // Receives still expected were never delivered.
  for (Lane& lane : lanes) {
    if (!lane.expected_recvs.empty()) fail(std::to_string(lane.expected_recvs.size()) + " receives never arrived");
  }
  if (completed < o.messages) fail("gave up after " + std::to_string(polls) + " polls");
  // Final counter values must equal the sum of the adds.
  for (Lane& lane : lanes) {
    uint64_t word;
    std::memcpy(&word, lane.b_mem.data() + lane.b_mem.size() - 8, 8);
    if (word != lane.counter) fail("fetch-add target holds the wrong value");
  }
  const EngineCounters ca = pair->a().engine->counters();
  const EngineCounters cb = pair->b().engine->counters();
  result.retransmits = ca.retransmits + cb.retransmits;
  result.icrc_drops = ca.rx_icrc_errors + cb.rx_icrc_errors;
  result.pulls = ca.pulls_received + cb.pulls_received;
  result.staged = ca.staged_received + cb.staged_received;
  result.link_acks_sent = ca.link_acks_sent + cb.link_acks_sent;
  result.link_acks_received = ca.link_acks_received + cb.link_acks_received;
  if (pair->has_link()) {
    result.link_dropped = pair->link().counters().dropped;
    result.link_duplicated = pair->link().counters().duplicated;
    result.link_reordered = pair->link().counters().reordered;
    result.link_corrupted = pair->link().counters().corrupted;
    result.link_overflowed = pair->link().counters().overflowed;
  }
  result.tx_alloc_failures = ca.tx_alloc_failures + cb.tx_alloc_failures;
  result.timeouts = ca.timeouts + cb.timeouts;
  result.rto_expiries = ca.rto_expiries + cb.rto_expiries;
  result.tail_probes = ca.tail_probes + cb.tail_probes;
  result.held_packets = ca.held_packets + cb.held_packets;
  result.placed_ahead = ca.placed_ahead + cb.placed_ahead;
  result.selective_resends = ca.selective_resends + cb.selective_resends;
  // Teardown: every packet buffer must come home.
  result.mbufs_all_returned = pair->ShutDownAndCheckMbufs();
  if (!result.mbufs_all_returned) fail("packet buffers leaked");
  return result;
}

}  // namespace uroce::transport
