#include "tools/perf_side.h"

#include <rte_cycles.h>
#include <rte_random.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "cq/wc_mapping.h"
#include "runtime/config.h"
#include "transport/address_text.h"
#include "transport/verbs_wr.h"

namespace uroce::tools {
namespace {

constexpr int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kLatencyRecvsPerQp = 8;

// wr_id: the slot in the low 32 bits, the QP index above it.
uint64_t WrId(uint32_t qp, uint32_t slot) { return (uint64_t{qp} << 32) | slot; }
uint32_t WrSlot(uint64_t wr_id) { return static_cast<uint32_t>(wr_id); }
uint32_t WrQp(uint64_t wr_id) { return static_cast<uint32_t>(wr_id >> 32); }

// write_lat's flag byte for iteration i: never 0 (the buffer's first
// content), never the previous iteration's.
uint8_t Tag(uint64_t i) { return static_cast<uint8_t>(i % 255 + 1); }

// A message's bytes: its index, little-endian, in the first (up to) 8 bytes,
// then a pattern derived from it, so a receiver can check any message alone.
void Fill(uint8_t* p, uint32_t size, uint64_t index) {
  const uint32_t head = std::min<uint32_t>(size, 8);
  for (uint32_t i = 0; i < head; ++i) p[i] = static_cast<uint8_t>(index >> (8 * i));
  // xorshift64 (Marsaglia), eight bytes a step: cheap enough that --verify
  // does not dominate a 64 KiB message.
  uint64_t x = (index + 1) * 0x9E3779B97F4A7C15ull;
  uint32_t i = head;
  for (; i + 8 <= size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  x ^= x << 13;
  for (; i < size; ++i) p[i] = static_cast<uint8_t>(x >> (8 * (i & 7)));
}

ibv_mtu IbMtuFor(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

// write_lat polls a byte the engine writes with memcpy, as RDMA programs
// poll memory a NIC writes: outside C++'s memory model. Under
// ThreadSanitizer the read is left uninstrumented, and a match is followed by
// SyncWithEngine, whose happens-before edge covers the rest of the message.
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize_thread))
#endif
uint8_t LoadAcquire(const uint8_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

}  // namespace

std::string PrintableLine(const std::string& line) {
  constexpr size_t kShown = 200;
  std::string out;
  for (size_t i = 0; i < line.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  if (line.size() > kShown) out += "... (" + std::to_string(line.size()) + " bytes)";
  return out;
}

const char* PerfTestName(PerfTest t) {
  switch (t) {
    case PerfTest::kSendLat: return "send_lat";
    case PerfTest::kWriteLat: return "write_lat";
    case PerfTest::kReadLat: return "read_lat";
    case PerfTest::kAtomicLat: return "atomic_lat";
    case PerfTest::kSendBw: return "send_bw";
    case PerfTest::kWriteBw: return "write_bw";
    case PerfTest::kReadBw: return "read_bw";
    case PerfTest::kIncast: return "incast";
  }
  return "?";
}

bool ParsePerfTest(const std::string& name, PerfTest* t) {
  for (PerfTest x : {PerfTest::kSendLat, PerfTest::kWriteLat, PerfTest::kReadLat, PerfTest::kAtomicLat,
                     PerfTest::kSendBw, PerfTest::kWriteBw, PerfTest::kReadBw, PerfTest::kIncast}) {
    if (name == PerfTestName(x)) {
      *t = x;
      return true;
    }
  }
  return false;
}

bool IsLatencyTest(PerfTest t) {
  return t == PerfTest::kSendLat || t == PerfTest::kWriteLat || t == PerfTest::kReadLat || t == PerfTest::kAtomicLat;
}

uint32_t RunSpec::DefaultWindow(PerfTest t, uint32_t size) {
  if (IsLatencyTest(t)) return 1;
  const uint64_t by_memory = (16ull << 20) / std::max<uint32_t>(size, 1);
  return static_cast<uint32_t>(std::clamp<uint64_t>(by_memory, 2, 128));
}

std::string RunSpec::Encode() const {
  std::ostringstream o;
  o << "RUN test=" << PerfTestName(test) << " size=" << size << " iters=" << iters << " qps=" << qps
    << " window=" << window << " verify=" << (verify ? 1 : 0) << " idle_qps=" << idle_qps;
  return o.str();
}

namespace {

// "WORD k=v k=v ...": the value of k.
bool Field(const std::string& line, const std::string& key, std::string* value) {
  std::istringstream in(line);
  std::string word;
  in >> word;  // the message name
  while (in >> word) {
    if (word.rfind(key + "=", 0) == 0) {
      *value = word.substr(key.size() + 1);
      return true;
    }
  }
  return false;
}

bool FieldU64(const std::string& line, const std::string& key, uint64_t* out) {
  std::string v;
  if (!Field(line, key, &v) || v.empty()) return false;
  char* end = nullptr;
  *out = std::strtoull(v.c_str(), &end, 0);
  return *end == '\0';
}

}  // namespace

RunSpec::Layout RunSpec::BufferLayout() const {
  Layout l;
  const uint64_t qp_count = std::max<uint32_t>(qps, 1);
  const uint32_t per_qp_window = static_cast<uint32_t>((uint64_t{window} + qp_count - 1) / qp_count);
  switch (test) {
    case PerfTest::kSendLat:
      l.out_slots = 2;
      l.rq_per_qp = kLatencyRecvsPerQp;
      l.in_slots = l.rq_per_qp * qps;
      break;
    case PerfTest::kWriteLat:
      l.out_slots = 2;
      l.in_slots = 1;
      break;
    case PerfTest::kReadLat:
    case PerfTest::kAtomicLat:
      l.out_slots = 1;
      l.in_slots = 1;
      break;
    case PerfTest::kSendBw:
      l.out_slots = window;
      // Twice what one QP can have in flight, so a slot is posted again only
      // after its message was checked.
      l.rq_per_qp = std::clamp<uint32_t>(2 * per_qp_window, 16, 1024);
      l.in_slots = l.rq_per_qp * qps;
      break;
    case PerfTest::kWriteBw:
    case PerfTest::kReadBw:
    case PerfTest::kIncast:  // the probe READs into in slot 0 (client) from out slot 0 (server)
      l.out_slots = window;
      l.in_slots = window;
      break;
  }
  // Atomics move 8 bytes whatever size says (PerfSide's constructor).
  const uint64_t slot = test == PerfTest::kAtomicLat ? 8 : size;
  l.buffer_bytes = (uint64_t{l.out_slots} + l.in_slots) * slot;
  return l;
}

Status RunSpec::Validate() const {
  auto over = [](const char* what, uint64_t v, uint64_t low, uint64_t high) {
    return InvalidArgument(std::string(what) + " " + std::to_string(v) + " is out of range " + std::to_string(low) +
                           ".." + std::to_string(high));
  };
  if (size == 0 || size > kMaxSize) return over("size", size, 1, kMaxSize);
  if (iters > kMaxIters) return over("iters", iters, 0, kMaxIters);
  if (qps == 0 || qps > kMaxQps) return over("qps", qps, 1, kMaxQps);
  if (window == 0 || window > kMaxWindow) return over("window", window, 1, kMaxWindow);
  if (idle_qps > kMaxIdleQps) return over("idle_qps", idle_qps, 0, kMaxIdleQps);
  const Layout l = BufferLayout();
  if (l.buffer_bytes > kMaxBufferBytes) {
    return InvalidArgument(std::string(PerfTestName(test)) + " with size " + std::to_string(size) + ", window " +
                           std::to_string(window) + " and " + std::to_string(qps) + " QPs needs " +
                           std::to_string(l.buffer_bytes) + " bytes of registered buffer, more than the limit of " +
                           std::to_string(kMaxBufferBytes) + " (lower the size, --window or --qps)");
  }
  return Status::Ok();
}

StatusOr<RunSpec> RunSpec::Decode(const std::string& line) {
  RunSpec s;
  std::string name;
  uint64_t size = 0, iters = 0, qps = 0, window = 0, verify = 0, idle_qps = 0;
  if (line.rfind("RUN ", 0) != 0 || !Field(line, "test", &name) || !ParsePerfTest(name, &s.test) ||
      !FieldU64(line, "size", &size) || !FieldU64(line, "iters", &iters) || !FieldU64(line, "qps", &qps) ||
      !FieldU64(line, "window", &window) || !FieldU64(line, "verify", &verify) || verify > 1 ||
      !FieldU64(line, "idle_qps", &idle_qps)) {
    return InvalidArgument("malformed RUN message: " + PrintableLine(line));
  }
  // Checked before narrowing, so 2^32 + 64 is not taken for 64.
  if (size > kMaxSize || qps > kMaxQps || window > kMaxWindow || idle_qps > kMaxIdleQps) {
    return InvalidArgument("refused RUN message (size, qps or window over its limit: " + std::to_string(kMaxSize) +
                           ", " + std::to_string(kMaxQps) + ", " + std::to_string(kMaxWindow) + "): " + PrintableLine(line));
  }
  s.size = static_cast<uint32_t>(size);
  s.iters = iters;
  s.qps = static_cast<uint32_t>(qps);
  s.window = static_cast<uint32_t>(window);
  s.verify = verify != 0;
  s.idle_qps = static_cast<uint32_t>(idle_qps);
  if (Status v = s.Validate(); !v.ok()) return InvalidArgument("refused RUN message: " + v.message());
  return s;
}

std::string SideInfo::Encode() const {
  std::ostringstream o;
  o << "INFO gid=" << transport::GidToString(gid) << " addr=0x" << std::hex << addr << " rkey=0x" << rkey << std::dec
    << " out=" << out_slots << " in=" << in_slots << " slot=" << slot_size << " mtu=" << mtu_bytes << " qps=";
  for (size_t i = 0; i < qps.size(); ++i) o << (i ? "," : "") << qps[i].first << ":" << qps[i].second;
  return o.str();
}

StatusOr<SideInfo> SideInfo::Decode(const std::string& line) {
  SideInfo s;
  std::string gid, qps;
  uint64_t addr = 0, rkey = 0, out = 0, in = 0, slot = 0, mtu = 0;
  if (line.rfind("INFO ", 0) != 0 || !Field(line, "gid", &gid) || !transport::ParseIpAddress(gid, &s.gid) ||
      !FieldU64(line, "addr", &addr) || !FieldU64(line, "rkey", &rkey) || !FieldU64(line, "out", &out) ||
      !FieldU64(line, "in", &in) || !FieldU64(line, "slot", &slot) || !FieldU64(line, "mtu", &mtu) ||
      !Field(line, "qps", &qps)) {
    return InvalidArgument("malformed INFO message: " + PrintableLine(line));
  }
  for (uint64_t v : {rkey, out, in, slot, mtu}) {
    if (v > UINT32_MAX) return InvalidArgument("malformed INFO message (a field over 32 bits): " + PrintableLine(line));
  }
  s.addr = addr;
  s.rkey = static_cast<uint32_t>(rkey);
  s.out_slots = static_cast<uint32_t>(out);
  s.in_slots = static_cast<uint32_t>(in);
  s.slot_size = static_cast<uint32_t>(slot);
  s.mtu_bytes = static_cast<uint32_t>(mtu);
  std::istringstream list(qps);
  std::string item;
  while (std::getline(list, item, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return InvalidArgument("malformed qps in INFO: " + PrintableLine(qps));
    s.qps.emplace_back(static_cast<uint32_t>(std::strtoul(item.c_str(), nullptr, 0)),
                       static_cast<uint32_t>(std::strtoul(item.c_str() + colon + 1, nullptr, 0)));
  }
  if (s.qps.empty()) return InvalidArgument("INFO without QPs: " + PrintableLine(line));
  return s;
}

PerfSide::PerfSide(runtime::Runtime::Device& endpoint, bool client, const RunSpec& spec)
    : ep_(endpoint), engine_(*endpoint.side.engine), client_(client), spec_(spec) {
  if (spec_.test == PerfTest::kAtomicLat) spec_.size = 8;  // IBTA 9.4.5: atomics move 8 bytes
}

PerfSide::~PerfSide() { Teardown(); }

Status PerfSide::Prepare() {
  // The peer's RUN was checked by Decode, the command line's by perf.cc;
  // once more here, as this is where the memory is taken.
  UROCE_RETURN_IF_ERROR(spec_.Validate());
  const RunSpec::Layout layout = spec_.BufferLayout();
  out_slots_ = layout.out_slots;
  in_slots_ = layout.in_slots;
  rq_per_qp_ = layout.rq_per_qp;
  buffer_bytes_ = (uint64_t(out_slots_) + in_slots_) * spec_.size;
  const size_t rounded = (buffer_bytes_ + 4095) & ~size_t{4095};
  buffer_ = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (buffer_ == nullptr) return ResourceExhausted("cannot allocate " + std::to_string(rounded) + " bytes");
  std::memset(buffer_, 0, rounded);
  // What READs read: out slot s holds message s.
  for (uint32_t s = 0; s < out_slots_; ++s) Fill(out_slot(s), spec_.size, s);
  auto keys = engine_.RegMr(ep_.side.pd, buffer_, buffer_bytes_, addr_of(buffer_), kAccess);
  if (!keys.ok()) return keys.status();
  keys_ = *keys;
  registered_ = true;

  const uint32_t cq_entries = 2 * (spec_.window + in_slots_) + 64;
  auto cq = engine_.CreateCq(cq_entries);
  if (!cq.ok()) return cq.status();
  cq_ = *cq;
  slot_busy_.assign(std::max(out_slots_, in_slots_), 0);
  // incast: one more QP on each side, the probe's.
  const uint32_t qp_count = spec_.qps + (spec_.test == PerfTest::kIncast ? 1 : 0);
  for (uint32_t i = 0; i < qp_count; ++i) {
    auto qp = CreateRcQp(cq_, std::min<uint32_t>(spec_.window + 8, 16384), std::max<uint32_t>(rq_per_qp_, 4));
    if (!qp.ok()) return qp.status();
    qps_.push_back(*qp);
    psns_.push_back(static_cast<uint32_t>(rte_rand() & 0xFFFFFF));
  }
  if (spec_.idle_qps != 0) {
    auto idle_cq = engine_.CreateCq(16);
    if (!idle_cq.ok()) return idle_cq.status();
    idle_cq_ = *idle_cq;
    idle_qps_.reserve(spec_.idle_qps);
  }
  for (uint32_t i = 0; i < spec_.idle_qps; ++i) {
    auto qp = CreateRcQp(idle_cq_, 1, 1);
    if (!qp.ok()) {
      return Status(qp.status().code(), "idle QP " + std::to_string(i + 1) + " of " +
                                            std::to_string(spec_.idle_qps) + ": " + qp.status().message() +
                                            " (--set engine.max_qps=N raises the engine's limit)");
    }
    idle_qps_.push_back(*qp);
  }
  return Status::Ok();
}

StatusOr<transport::QueuePair*> PerfSide::CreateRcQp(transport::CompletionQueue* cq, uint32_t send_wr,
                                                     uint32_t recv_wr) {
  transport::QpInitAttr init;
  init.type = IBV_QPT_RC;
  init.pd = ep_.side.pd;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  auto qp = engine_.CreateQp(init);
  if (!qp.ok()) return qp.status();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = kAccess;
  Status s = engine_.ModifyQp(*qp, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (!s.ok()) {
    (void)engine_.DestroyQp(*qp);
    return s;
  }
  return *qp;
}

SideInfo PerfSide::Local() const {
  SideInfo s;
  s.gid = ep_.side.gid;
  s.addr = reinterpret_cast<uint64_t>(buffer_);
  s.rkey = keys_.rkey;
  s.out_slots = out_slots_;
  s.in_slots = in_slots_;
  s.slot_size = spec_.size;
  s.mtu_bytes = transport::MtuBytes(engine_.limits().max_mtu);
  for (size_t i = 0; i < qps_.size(); ++i) s.qps.emplace_back(qps_[i]->qpn, psns_[i]);
  return s;
}

Status PerfSide::Connect(const SideInfo& remote) {
  if (remote.qps.size() != qps_.size()) {
    return InvalidArgument("the peer has " + std::to_string(remote.qps.size()) + " QPs, this side " +
                           std::to_string(qps_.size()));
  }
  if (remote.slot_size != spec_.size || remote.in_slots != in_slots_ || remote.out_slots != out_slots_) {
    return InvalidArgument("the peer's buffer layout differs from this side's");
  }
  remote_ = remote;
  // The local GID of the peer's IP version.
  const std::optional<size_t> source = transport::SourceGidFor(ep_.config.gids, remote.gid);
  if (!source) return InvalidArgument("no local GID of the peer's IP version (" + transport::GidToString(remote.gid) + ")");
  const ibv_mtu mtu = IbMtuFor(std::min<uint32_t>(remote.mtu_bytes, transport::MtuBytes(engine_.limits().max_mtu)));
  // Idle QPs: connected to the peer's address, at QPNs counted down from
  // the top of the space (nothing is ever sent to them).
  std::vector<std::pair<transport::QueuePair*, uint32_t>> all;
  for (size_t i = 0; i < qps_.size(); ++i) all.emplace_back(qps_[i], static_cast<uint32_t>(i));
  for (size_t i = 0; i < idle_qps_.size(); ++i) all.emplace_back(idle_qps_[i], UINT32_MAX);
  for (size_t n = 0; n < all.size(); ++n) {
    const bool idle = all[n].second == UINT32_MAX;
    const size_t i = idle ? 0 : all[n].second;
    transport::QueuePair* const qp = all[n].first;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = mtu;
    attr.dest_qp_num = idle ? 0xFFFFFF - static_cast<uint32_t>(n - qps_.size()) : remote.qps[i].first;
    attr.rq_psn = idle ? 0 : remote.qps[i].second;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 1;  // 0.01 ms: a receiver that fell behind is asked again soon
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(*source);
    attr.ah_attr.grh.hop_limit = 64;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    UROCE_RETURN_IF_ERROR(engine_.ModifyQp(qp, attr,
                                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = idle ? 0 : psns_[i];
    attr.timeout = 14;  // 4.096 us * 2^14 = 67 ms
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;  // infinite (IBTA 9.7.5.2.8)
    attr.max_rd_atomic = 16;
    UROCE_RETURN_IF_ERROR(engine_.ModifyQp(qp, attr,
                                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
  }
  return Status::Ok();
}

Status PerfSide::PostRecv(uint32_t qp, uint32_t slot) {
  ibv_sge sge{addr_of(in_slot(slot)), spec_.size, keys_.lkey};
  ibv_recv_wr wr = transport::RecvWr(WrId(qp, slot), &sge);
  const ibv_recv_wr* bad = nullptr;
  const int rc = engine_.PostRecv(qps_[qp], &wr, &bad);
  if (rc != 0) return Internal("post_recv failed: " + std::string(std::strerror(rc)));
  return Status::Ok();
}

Status PerfSide::PostSend(uint32_t qp, ibv_wr_opcode op, uint32_t slot, uint64_t remote, uint64_t wr_id,
                          uint64_t add) {
  // READ and atomic results land in an in slot; everything else leaves from an out slot.
  const bool into_local = op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
  ibv_sge sge{addr_of(into_local ? in_slot(slot) : out_slot(slot)), spec_.size, keys_.lkey};
  ibv_send_wr wr = transport::SignaledSendWr(wr_id, op, &sge);
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = remote_.rkey;
    wr.wr.atomic.compare_add = add;
  } else {
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = remote_.rkey;
  }
  const ibv_send_wr* bad = nullptr;
  const int rc = engine_.PostSend(qps_[qp], &wr, &bad);
  if (rc != 0) return Internal("post_send failed: " + std::string(std::strerror(rc)));
  return Status::Ok();
}

Status PerfSide::Arm() {
  if (spec_.test == PerfTest::kSendLat || spec_.test == PerfTest::kSendBw) {
    for (uint32_t q = 0; q < spec_.qps; ++q) {
      for (uint32_t k = 0; k < rq_per_qp_; ++k) UROCE_RETURN_IF_ERROR(PostRecv(q, q * rq_per_qp_ + k));
    }
  }
  return Status::Ok();
}

Status PerfSide::PollCompletions(int* got, ibv_wc* wcs, int max) {
  *got = cq_->Poll(max, wcs);
  for (int i = 0; i < *got; ++i) {
    if (wcs[i].status != IBV_WC_SUCCESS) {
      return IoError(std::string(PerfTestName(spec_.test)) + ": completion failed on QP " +
                     std::to_string(wcs[i].qp_num) + ": " + cq::CompletionStatusText(wcs[i].status) +
                     " (is the peer still running?)");
    }
  }
  return Status::Ok();
}

Status PerfSide::CheckMessage(const uint8_t* data, uint32_t length, uint64_t index, const char* what) const {
  if (!spec_.verify) return Status::Ok();
  thread_local std::vector<uint8_t> want;
  want.resize(spec_.size);
  Fill(want.data(), spec_.size, index);
  if (length != spec_.size || std::memcmp(data, want.data(), spec_.size) != 0) {
    size_t at = 0;
    while (at < std::min(length, spec_.size) && data[at] == want[at]) ++at;
    return IoError(std::string("verification failed: ") + what + " " + std::to_string(index) + " differs at byte " +
                   std::to_string(at) + " (length " + std::to_string(length) + ")");
  }
  return Status::Ok();
}

void PerfSide::Sample(uint64_t start_cycles, bool half) {
  const uint64_t d = rte_get_tsc_cycles() - start_cycles;
  samples_.push_back(half ? d / 2 : d);
}

Status PerfSide::Start() {
  start_cycles_ = rte_get_tsc_cycles();
  iter_start_ = start_cycles_;
  if (spec_.iters == 0) {
    done_ = true;
    end_cycles_ = start_cycles_;
    return Status::Ok();
  }
  samples_.reserve(IsLatencyTest(spec_.test) ? spec_.iters : 0);
  return IssueNext();
}

// Client: posts what the test allows now.
Status PerfSide::IssueNext() {
  switch (spec_.test) {
    case PerfTest::kSendLat: {
      if (posted_ > completed_ || posted_ >= spec_.iters) return Status::Ok();
      const uint32_t slot = posted_ % 2;
      if (spec_.verify) Fill(out_slot(slot), spec_.size, posted_);
      iter_start_ = rte_get_tsc_cycles();
      UROCE_RETURN_IF_ERROR(PostSend(posted_ % spec_.qps, IBV_WR_SEND, slot, 0, posted_));
      ++posted_;
      return Status::Ok();
    }
    case PerfTest::kWriteLat: {
      if (posted_ > completed_ || posted_ >= spec_.iters) return Status::Ok();
      const uint32_t slot = posted_ % 2;
      if (spec_.verify) Fill(out_slot(slot), spec_.size, posted_);
      out_slot(slot)[spec_.size - 1] = Tag(posted_);
      iter_start_ = rte_get_tsc_cycles();
      UROCE_RETURN_IF_ERROR(PostSend(posted_ % spec_.qps, IBV_WR_RDMA_WRITE, slot, remote_.in_addr(), posted_));
      ++posted_;
      return Status::Ok();
    }
    case PerfTest::kReadLat:
    case PerfTest::kAtomicLat: {
      if (posted_ > completed_ || posted_ >= spec_.iters) return Status::Ok();
      iter_start_ = rte_get_tsc_cycles();
      const bool read = spec_.test == PerfTest::kReadLat;
      UROCE_RETURN_IF_ERROR(PostSend(posted_ % spec_.qps, read ? IBV_WR_RDMA_READ : IBV_WR_ATOMIC_FETCH_AND_ADD, 0,
                                     read ? remote_.addr : remote_.in_addr(), posted_, 1));
      ++posted_;
      return Status::Ok();
    }
    case PerfTest::kSendBw:
    case PerfTest::kWriteBw:
    case PerfTest::kReadBw: {
      while (posted_ < spec_.iters && posted_ - completed_ < spec_.window) {
        // A free slot: never reuse memory a request in flight still reads
        // from or writes to.
        const uint32_t slots = spec_.window;
        while (slot_busy_[slot_cursor_]) slot_cursor_ = (slot_cursor_ + 1) % slots;
        const uint32_t slot = slot_cursor_;
        slot_cursor_ = (slot_cursor_ + 1) % slots;
        slot_busy_[slot] = 1;
        const uint32_t qp = posted_ % spec_.qps;
        if (spec_.test == PerfTest::kReadBw) {
          UROCE_RETURN_IF_ERROR(PostSend(qp, IBV_WR_RDMA_READ, slot, remote_.addr + uint64_t(slot) * spec_.size,
                                         WrId(qp, slot)));
        } else {
          if (spec_.verify) Fill(out_slot(slot), spec_.size, posted_);
          const bool send = spec_.test == PerfTest::kSendBw;
          UROCE_RETURN_IF_ERROR(PostSend(qp, send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, slot,
                                         send ? 0 : remote_.in_addr() + uint64_t(slot) * spec_.size, WrId(qp, slot)));
        }
        ++posted_;
      }
      return Status::Ok();
    }
    case PerfTest::kIncast:
      return IssueIncast();
  }
  return Status::Ok();
}

// incast: every flow keeps its share of the window full, and the probe one
// 64 B READ outstanding, until the last message is posted.
Status PerfSide::IssueIncast() {
  constexpr uint32_t kProbeBytes = 64;
  if (flow_outstanding_.size() != spec_.qps) {
    flow_outstanding_.assign(spec_.qps, 0);
    flow_completed_.assign(spec_.qps, 0);
  }
  const uint32_t per_flow = std::max<uint32_t>(spec_.window / spec_.qps, 1);
  for (bool more = true; more && posted_ < spec_.iters;) {
    more = false;
    for (uint32_t q = 0; q < spec_.qps && posted_ < spec_.iters; ++q) {
      if (flow_outstanding_[q] >= per_flow) continue;
      while (slot_busy_[slot_cursor_]) slot_cursor_ = (slot_cursor_ + 1) % spec_.window;
      const uint32_t slot = slot_cursor_;
      slot_cursor_ = (slot_cursor_ + 1) % spec_.window;
      slot_busy_[slot] = 1;
      if (spec_.verify) Fill(out_slot(slot), spec_.size, posted_);
      UROCE_RETURN_IF_ERROR(
          PostSend(q, IBV_WR_RDMA_WRITE, slot, remote_.in_addr() + uint64_t(slot) * spec_.size, WrId(q, slot)));
      ++flow_outstanding_[q];
      ++posted_;
      more = true;
    }
  }
  if (!probe_outstanding_ && completed_ < spec_.iters) {
    ibv_sge sge{addr_of(in_slot(0)), std::min(kProbeBytes, spec_.size), keys_.lkey};
    ibv_send_wr wr = transport::SignaledSendWr(WrId(spec_.qps, 0), IBV_WR_RDMA_READ, &sge);
    wr.wr.rdma.remote_addr = remote_.addr;
    wr.wr.rdma.rkey = remote_.rkey;
    const ibv_send_wr* bad = nullptr;
    probe_start_ = rte_get_tsc_cycles();
    const int rc = engine_.PostSend(qps_[spec_.qps], &wr, &bad);
    if (rc != 0) return Internal("post_send (probe) failed: " + std::string(std::strerror(rc)));
    probe_outstanding_ = true;
  }
  return Status::Ok();
}

Status PerfSide::Step() { return client_ ? StepClient() : StepServer(); }

// Waits for the engine's current poll to end (Engine::counters takes the
// progress token, which every poll releases): whatever that poll placed in
// memory is then visible to this thread in the C++ sense too.
void PerfSide::SyncWithEngine() { (void)engine_.counters(); }

Status PerfSide::StepClient() {
  if (done_) return Status::Ok();
  ibv_wc wcs[32];
  int n = 0;
  UROCE_RETURN_IF_ERROR(PollCompletions(&n, wcs, 32));
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs[i];
    switch (spec_.test) {
      case PerfTest::kSendLat:
        if (wc.opcode != IBV_WC_RECV) break;  // our SEND's completion: nothing to do
        UROCE_RETURN_IF_ERROR(CheckMessage(in_slot(WrSlot(wc.wr_id)), wc.byte_len, completed_, "answer"));
        UROCE_RETURN_IF_ERROR(PostRecv(WrQp(wc.wr_id), WrSlot(wc.wr_id)));
        Sample(iter_start_, true);
        ++completed_;
        break;
      case PerfTest::kWriteLat:
        break;  // completions only retire the WRITEs; the flag byte says when the answer came
      case PerfTest::kReadLat:
        Sample(iter_start_, false);
        UROCE_RETURN_IF_ERROR(CheckMessage(in_slot(0), spec_.size, 0, "READ of message"));
        ++completed_;
        break;
      case PerfTest::kAtomicLat: {
        Sample(iter_start_, false);
        uint64_t original = 0;
        std::memcpy(&original, in_slot(0), 8);
        if (spec_.verify && original != completed_) {
          return IoError("verification failed: fetch-and-add " + std::to_string(completed_) + " returned " +
                         std::to_string(original));
        }
        ++completed_;
        break;
      }
      case PerfTest::kSendBw:
      case PerfTest::kWriteBw:
        slot_busy_[WrSlot(wc.wr_id)] = 0;
        ++completed_;
        break;
      case PerfTest::kReadBw: {
        const uint32_t slot = WrSlot(wc.wr_id);
        UROCE_RETURN_IF_ERROR(CheckMessage(in_slot(slot), spec_.size, slot, "READ of message"));
        slot_busy_[slot] = 0;
        ++completed_;
        break;
      }
      case PerfTest::kIncast: {
        const uint32_t q = WrQp(wc.wr_id);
        if (q == spec_.qps) {  // the probe
          Sample(probe_start_, false);
          probe_outstanding_ = false;
          break;
        }
        slot_busy_[WrSlot(wc.wr_id)] = 0;
        --flow_outstanding_[q];
        ++flow_completed_[q];
        ++completed_;
        if (flow_snapshot_.empty() && completed_ * 10 >= spec_.iters * 9) flow_snapshot_ = flow_completed_;
        break;
      }
    }
  }
  if (spec_.test == PerfTest::kWriteLat && posted_ > completed_ &&
      LoadAcquire(in_slot(0) + spec_.size - 1) == Tag(completed_)) {
    Sample(iter_start_, true);
#if defined(__SANITIZE_THREAD__)
    SyncWithEngine();
#endif
    ++completed_;
  }
  // incast: the clock stops with the last WRITE; the run ends once the
  // probe's READ is back too (nothing is left in flight at teardown).
  if (completed_ >= spec_.iters && end_cycles_ == 0) end_cycles_ = rte_get_tsc_cycles();
  if (completed_ >= spec_.iters && !probe_outstanding_) {
    done_ = true;
    return Status::Ok();
  }
  return IssueNext();
}

Status PerfSide::StepServer() {
  ibv_wc wcs[32];
  int n = 0;
  UROCE_RETURN_IF_ERROR(PollCompletions(&n, wcs, 32));
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs[i];
    if (wc.opcode != IBV_WC_RECV) continue;  // our answers' completions
    const uint32_t qp = WrQp(wc.wr_id), slot = WrSlot(wc.wr_id);
    if (spec_.test == PerfTest::kSendLat) {
      UROCE_RETURN_IF_ERROR(CheckMessage(in_slot(slot), wc.byte_len, received_, "message"));
      const uint32_t out = received_ % 2;
      if (spec_.verify) Fill(out_slot(out), spec_.size, received_);
      UROCE_RETURN_IF_ERROR(PostRecv(qp, slot));
      UROCE_RETURN_IF_ERROR(PostSend(qp, IBV_WR_SEND, out, 0, received_));
      ++received_;
    } else {
      // On QP q the j-th message is message j * qps + q: the client deals
      // messages round-robin and one QP delivers in order.
      if (per_qp_received_.size() != spec_.qps) per_qp_received_.assign(spec_.qps, 0);
      const uint64_t index = per_qp_received_[qp]++ * spec_.qps + qp;
      UROCE_RETURN_IF_ERROR(CheckMessage(in_slot(slot), wc.byte_len, index, "message"));
      UROCE_RETURN_IF_ERROR(PostRecv(qp, slot));
      ++received_;
    }
  }
  if (spec_.test == PerfTest::kWriteLat && LoadAcquire(in_slot(0) + spec_.size - 1) == expect_tag_) {
#if defined(__SANITIZE_THREAD__)
    SyncWithEngine();
#endif
    const uint32_t out = echo_count_ % 2;
    if (spec_.verify) Fill(out_slot(out), spec_.size, echo_count_);
    out_slot(out)[spec_.size - 1] = expect_tag_;
    UROCE_RETURN_IF_ERROR(
        PostSend(static_cast<uint32_t>(echo_count_ % spec_.qps), IBV_WR_RDMA_WRITE, out, remote_.in_addr(), echo_count_));
    ++echo_count_;
    expect_tag_ = Tag(echo_count_);
  }
  return Status::Ok();
}

bool PerfSide::Settled() const {
  if (client_) return true;
  switch (spec_.test) {
    case PerfTest::kSendLat:
    case PerfTest::kSendBw:
      return received_ >= spec_.iters;
    case PerfTest::kWriteLat:
      return echo_count_ >= spec_.iters;
    default:
      return true;
  }
}

Status PerfSide::Verify() {
  if (!spec_.verify) return Status::Ok();
  // WRITEs landed without a completion here: see the engine's last poll.
  SyncWithEngine();
  std::vector<uint8_t> want(spec_.size);
  switch (spec_.test) {
    case PerfTest::kWriteLat: {
      // Both sides hold the last message the other wrote.
      if (spec_.iters == 0) return Status::Ok();
      Fill(want.data(), spec_.size, spec_.iters - 1);
      want[spec_.size - 1] = Tag(spec_.iters - 1);
      if (std::memcmp(in_slot(0), want.data(), spec_.size) != 0) {
        return IoError("verification failed: write_lat's last message differs");
      }
      return Status::Ok();
    }
    case PerfTest::kAtomicLat: {
      if (client_) return Status::Ok();
      uint64_t value = 0;
      std::memcpy(&value, in_slot(0), 8);
      if (value != spec_.iters) {
        return IoError("verification failed: the counter holds " + std::to_string(value) + " after " +
                       std::to_string(spec_.iters) + " fetch-and-adds of 1");
      }
      return Status::Ok();
    }
    case PerfTest::kWriteBw:
    case PerfTest::kIncast: {
      if (client_) return Status::Ok();
      // Each slot holds some message whole (the one written last there), or
      // nothing when fewer messages than slots were sent.
      uint32_t written = 0;
      for (uint32_t s = 0; s < in_slots_; ++s) {
        const uint8_t* p = in_slot(s);
        if (std::all_of(p, p + spec_.size, [](uint8_t b) { return b == 0; })) continue;
        uint64_t index = 0;
        for (uint32_t i = 0; i < std::min<uint32_t>(spec_.size, 8); ++i) index |= uint64_t{p[i]} << (8 * i);
        if (spec_.size >= 8 && index >= spec_.iters) {
          return IoError("verification failed: slot " + std::to_string(s) + " holds message " +
                         std::to_string(index) + " of " + std::to_string(spec_.iters));
        }
        UROCE_RETURN_IF_ERROR(CheckMessage(p, spec_.size, index, "written message"));
        ++written;
      }
      if (spec_.iters > 0 && written == 0) return IoError("verification failed: no WRITE landed");
      return Status::Ok();
    }
    case PerfTest::kSendLat:
    case PerfTest::kSendBw:
      if (!client_ && received_ != spec_.iters) {
        return IoError("verification failed: received " + std::to_string(received_) + " of " +
                       std::to_string(spec_.iters) + " messages");
      }
      return Status::Ok();
    default:
      return Status::Ok();
  }
}

PerfResult PerfSide::Result() const {
  PerfResult r;
  r.spec = spec_;
  r.completed = completed_;
  const double hz = double(rte_get_tsc_hz());
  r.seconds = double(end_cycles_ - start_cycles_) / hz;
  r.lat_us.reserve(samples_.size());
  for (uint64_t c : samples_) r.lat_us.push_back(double(c) * 1e6 / hz);
  r.flow_messages = flow_snapshot_.empty() ? flow_completed_ : flow_snapshot_;
  r.jain = JainIndex(r.flow_messages);
  Summarize(&r);
  return r;
}

double JainIndex(const std::vector<uint64_t>& x) {
  double sum = 0, squares = 0;
  for (uint64_t v : x) {
    sum += double(v);
    squares += double(v) * double(v);
  }
  return squares == 0 ? 0 : sum * sum / (double(x.size()) * squares);
}

void Summarize(PerfResult* r) {
  if (!r->lat_us.empty()) {
    std::vector<double> v = r->lat_us;
    std::sort(v.begin(), v.end());
    r->median_us = v[v.size() / 2];
    r->p99_us = v[std::min(v.size() - 1, static_cast<size_t>(double(v.size()) * 0.99))];
    double sum = 0;
    for (double x : v) sum += x;
    r->mean_us = sum / double(v.size());
  }
  if (r->seconds > 0) {
    const double bytes = double(r->completed) * r->spec.size;
    r->mb_per_s = bytes / r->seconds / 1e6;
    r->gbit_per_s = bytes * 8 / r->seconds / 1e9;
    r->mmsg_per_s = double(r->completed) / r->seconds / 1e6;
  }
}

void PerfSide::Teardown() {
  for (transport::QueuePair* qp : qps_) (void)engine_.DestroyQp(qp);
  qps_.clear();
  for (transport::QueuePair* qp : idle_qps_) (void)engine_.DestroyQp(qp);
  idle_qps_.clear();
  if (idle_cq_ != nullptr) (void)engine_.DestroyCq(idle_cq_);
  idle_cq_ = nullptr;
  if (cq_ != nullptr) (void)engine_.DestroyCq(cq_);
  cq_ = nullptr;
  if (registered_) (void)engine_.DeregMr(keys_.lkey);
  registered_ = false;
  std::free(buffer_);
  buffer_ = nullptr;
}

}  // namespace uroce::tools
