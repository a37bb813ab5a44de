// The connection manager between two engines over the in-memory LossyLink,
// on the pair's virtual clock: connect, accept, reject, disconnect, and every
// CM MAD lost once or at random.
#include "cm/connection_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/cm_test_frames.h"
#include "testing/engine_pair.h"
#include "transport/packet_parser.h"
#include "transport/verbs_wr.h"
#include "transport/wire_types.h"

namespace uroce::cm {

using transport::EngineSide;
using transport::EnginePair;
using transport::EnginePairOptions;
using transport::Gid;
using transport::Ipv4MappedGid;
using transport::LoadBe16;
using transport::LoadBe32;
using transport::LoadBe64;
using transport::MacAddress;
using transport::MrKeys;
using transport::PacketView;
using transport::ParseError;
using transport::ParseOptions;
using transport::ParsePacket;
using transport::QpInitAttr;
using transport::QueuePair;
using transport::StoreBe32;
using transport::StoreBe64;

namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint64_t kResponseTimeoutNs = 1'000'000;  // 1000 polls of virtual time
constexpr unsigned kMaxRetries = 15;

struct Buffer {
  std::vector<uint8_t> bytes;
  MrKeys keys;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

// The CM attribute of a frame, 0 if it is not a MAD to QP 1.
uint16_t CmAttributeOf(const rte_mbuf* m) {
  PacketView view;
  if (ParsePacket(m, ParseOptions{}, &view) != ParseError::kOk) return 0;
  if (view.fields.bth.dest_qp != kGsiQpn || view.fields.payload_length < kMadBytes) return 0;
  return LoadBe16(view.payload + 16);
}

class ConnectionManagerTest : public ::testing::Test {
 protected:
  void Start(const EnginePairOptions& options = {}) {
    auto pair = EnginePair::Create(options);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = std::move(*pair);
    EngineSide* sides[2] = {&pair_->a(), &pair_->b()};
    for (int i = 0; i < 2; ++i) {
      ConnectionManager::Options o;
      o.local_gid = sides[i]->gid;
      o.response_timeout_ns = kResponseTimeoutNs;
      o.max_retries = kMaxRetries;
      o.max_response_timeout_ns = kResponseTimeoutNs;  // flat, unless a test backs off
      o.clock_ns = [p = pair_.get()] { return p->now_ns(); };
      o.random_seed = 100 + i;
      if (tweak_) tweak_(o);
      auto cm = ConnectionManager::Create(sides[i]->engine.get(), sides[i]->pd, o);
      ASSERT_TRUE(cm.ok()) << cm.status().ToString();
      cm_[i] = std::move(*cm);
    }
  }

  void TearDown() override {
    if (!pair_) return;
    cm_[0].reset();
    cm_[1].reset();
    EXPECT_TRUE(pair_->ShutDownAndCheckMbufs()) << "packet buffers leaked";
    pair_.reset();
  }

  EngineSide& side(int i) { return i == 0 ? pair_->a() : pair_->b(); }
  ConnectionManager& cm(int i) { return *cm_[i]; }

  void PollOnce() {
    pair_->PollOnce();
    for (int i = 0; i < 2; ++i) {
      cm_[i]->Poll();
      CmEvent e;
      while (cm_[i]->NextEvent(&e)) events_[i].push_back(e);
    }
  }

  // Polls until side `i` has an event of `type` (taken out of the list).
  bool WaitEvent(int i, CmEventType type, CmEvent* out, uint64_t max_polls = 200'000) {
    for (uint64_t n = 0; n <= max_polls; ++n) {
      for (auto it = events_[i].begin(); it != events_[i].end(); ++it) {
        if (it->type == type) {
          if (out) *out = *it;
          events_[i].erase(it);
          return true;
        }
      }
      PollOnce();
    }
    return false;
  }

  void Settle(uint64_t polls) {
    for (uint64_t n = 0; n < polls; ++n) PollOnce();
  }

  // Side 1 accepts `request` (with a QP of its own); both sides must then be
  // established, the caller's QP (`caller_qp`, connection `caller_id`) in RTS.
  void AcceptAndExpectEstablished(const CmEvent& request, CmConnectionId caller_id, QueuePair* caller_qp) {
    CmAcceptParams accept;
    accept.qp = NewRcQp(1);
    ASSERT_TRUE(cm(1).Accept(request.id, accept, 2).ok());
    CmEvent e;
    ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e));
    EXPECT_EQ(e.id, caller_id);
    ASSERT_TRUE(WaitEvent(1, CmEventType::kEstablished, &e));
    EXPECT_EQ(StateOf(0, caller_qp), IBV_QPS_RTS);
  }

  QueuePair* NewRcQp(int i) {
    QpInitAttr init = OneCqQpInit(IBV_QPT_RC, side(i).pd, side(i).cq, 64, 2);
    auto qp = side(i).engine->CreateQp(init);
    EXPECT_TRUE(qp.ok()) << qp.status().ToString();
    return qp.ok() ? *qp : nullptr;
  }

  Buffer Register(int i, size_t size, uint8_t fill) {
    Buffer b;
    b.bytes.assign(size, fill);
    auto keys = side(i).engine->RegMr(side(i).pd, b.bytes.data(), size, b.addr(), kAllAccess);
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    if (keys.ok()) b.keys = *keys;
    return b;
  }

  void PostRecv(int i, QueuePair* qp, Buffer& b, uint64_t wr_id) {
    ibv_sge sge{b.addr(), static_cast<uint32_t>(b.bytes.size()), b.keys.lkey};
    ibv_recv_wr wr = transport::RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(side(i).engine->PostRecv(qp, &wr, &bad), 0);
  }

  int PostSend(int i, QueuePair* qp, ibv_wr_opcode op, Buffer& b, uint32_t length, uint64_t wr_id,
               uint64_t remote_addr = 0, uint32_t rkey = 0) {
    ibv_sge sge{b.addr(), length, b.keys.lkey};
    ibv_send_wr wr = transport::SignaledSendWr(wr_id, op, &sge);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    const ibv_send_wr* bad = nullptr;
    return side(i).engine->PostSend(qp, &wr, &bad);
  }

  std::vector<ibv_wc> WaitCompletions(int i, size_t count) {
    std::vector<ibv_wc> out;
    for (int n = 0; n < 500'000 && out.size() < count; ++n) {
      ibv_wc wc[16];
      const int got = side(i).cq->Poll(16, wc);
      out.insert(out.end(), wc, wc + got);
      if (out.size() < count) PollOnce();
    }
    return out;
  }

  ibv_qp_state StateOf(int i, QueuePair* qp) {
    ibv_qp_attr attr{};
    EXPECT_TRUE(side(i).engine->QueryQp(qp, &attr, nullptr).ok());
    return attr.qp_state;
  }

  struct Connected {
    QueuePair* qp[2] = {nullptr, nullptr};
    CmConnectionId id[2] = {0, 0};
  };

  // A connects to B's `port` (listened on already) and B accepts.
  Connected ConnectAndAccept(uint16_t port, uint8_t tag_base = 0) {
    Connected c;
    c.qp[0] = NewRcQp(0);
    c.qp[1] = NewRcQp(1);
    CmConnectParams params;
    params.qp = c.qp[0];
    params.remote = {side(1).gid, port};
    params.local_ack_timeout = 10;
    auto id = cm(0).Connect(params, 1000 + tag_base);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return c;
    c.id[0] = *id;
    CmEvent request;
    EXPECT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
    c.id[1] = request.id;
    CmAcceptParams accept;
    accept.qp = c.qp[1];
    accept.local_ack_timeout = 10;
    EXPECT_TRUE(cm(1).Accept(request.id, accept, 2000 + tag_base).ok());
    CmEvent e;
    EXPECT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e));
    EXPECT_EQ(e.id, c.id[0]);
    EXPECT_TRUE(WaitEvent(1, CmEventType::kEstablished, &e));
    EXPECT_EQ(e.id, c.id[1]);
    return c;
  }

  // `from` disconnects; both sides end with kDisconnected and QPs in ERR.
  void DisconnectBoth(const Connected& c, int from) {
    ASSERT_TRUE(cm(from).Disconnect(c.id[from]).ok());
    CmEvent e;
    ASSERT_TRUE(WaitEvent(from, CmEventType::kDisconnected, &e));
    EXPECT_EQ(e.id, c.id[from]);
    ASSERT_TRUE(WaitEvent(1 - from, CmEventType::kDisconnected, &e));
    EXPECT_EQ(e.id, c.id[1 - from]);
    EXPECT_EQ(StateOf(0, c.qp[0]), IBV_QPS_ERR);
    EXPECT_EQ(StateOf(1, c.qp[1]), IBV_QPS_ERR);
  }

  // Queues `mad` on side `wire`'s port, towards the other side, as sent from
  // `from`: a frame any host could send.
  void Inject(int wire, const MadFrom& from, const CmMad& mad, bool ipv6 = false) {
    EngineSide& to = side(1 - wire);
    ASSERT_TRUE(InjectMad(*side(wire).engine, pair_->pool(), from, to.mac, ipv6 ? to.gid6 : to.gid, mad));
  }

  std::function<void(ConnectionManager::Options&)> tweak_;
  std::unique_ptr<EnginePair> pair_;
  std::unique_ptr<ConnectionManager> cm_[2];
  std::vector<CmEvent> events_[2];
};

// A MAD seen on the wire and where it went.
struct SeenMad {
  MacAddress dst_mac{};
  Gid dst_gid{};
  CmMad mad;
};

// Records the CM MADs `sender_mac` sends (from the link's drop filter).
std::function<bool(const rte_mbuf*)> RecordMadsFrom(const MacAddress& sender_mac, std::vector<SeenMad>* seen) {
  return [sender_mac, seen](const rte_mbuf* m) {
    PacketView view;
    if (ParsePacket(m, ParseOptions{}, &view) != ParseError::kOk || view.fields.bth.dest_qp != kGsiQpn ||
        view.fields.src_mac != sender_mac) {
      return false;
    }
    SeenMad s;
    s.dst_mac = view.fields.dst_mac;
    s.dst_gid = view.fields.dst_gid;
    if (DecodeCmMad(view.payload, view.fields.payload_length, &s.mad) == CmMadError::kOk) seen->push_back(s);
    return false;
  };
}

Gid Ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const uint8_t ip[4] = {a, b, c, d};
  return Ipv4MappedGid(ip);
}

TEST_F(ConnectionManagerTest, ConnectAcceptThenSendAndWriteBothWays) {
  Start();
  auto port = cm(1).Listen(7174, 77);
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(*port, 7174);
  EXPECT_EQ(cm(1).Listen(7174, 78).status().code(), StatusCode::kAlreadyExists);

  QueuePair* qa = NewRcQp(0);
  QueuePair* qb = NewRcQp(1);
  Buffer mem_a = Register(0, 4096, 0xAA);
  Buffer mem_b = Register(1, 4096, 0xBB);
  // Each side tells the other where to write, in the private data.
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 7174};
  params.local_port = 40000;
  params.local_ack_timeout = 10;
  params.private_data.resize(kCmReqUserDataSize);
  StoreBe64(params.private_data.data(), mem_a.addr());
  StoreBe32(params.private_data.data() + 8, mem_a.keys.rkey);
  params.private_data.back() = 0x5A;
  auto id_a = cm(0).Connect(params, 11);
  ASSERT_TRUE(id_a.ok()) << id_a.status().ToString();

  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(request.listen_tag, 77u);
  EXPECT_EQ(request.peer.gid, side(0).gid);
  EXPECT_EQ(request.peer.port, 40000);
  EXPECT_EQ(request.local.gid, side(1).gid);
  EXPECT_EQ(request.local.port, 7174);
  EXPECT_EQ(request.private_data, params.private_data);
  EXPECT_EQ(request.peer_responder_resources, 16);
  EXPECT_EQ(request.peer_initiator_depth, 16);
  const uint64_t remote_a = LoadBe64(request.private_data.data());
  const uint32_t rkey_a = LoadBe32(request.private_data.data() + 8);

  CmAcceptParams accept;
  accept.qp = qb;
  accept.local_ack_timeout = 10;
  accept.responder_resources = 4;
  accept.private_data.resize(kCmRepPrivateDataSize);
  StoreBe64(accept.private_data.data(), mem_b.addr());
  StoreBe32(accept.private_data.data() + 8, mem_b.keys.rkey);
  accept.private_data.back() = 0xA5;
  ASSERT_TRUE(cm(1).Accept(request.id, accept, 22).ok());
  EXPECT_EQ(cm(1).Accept(request.id, accept, 22).code(), StatusCode::kFailedPrecondition);

  CmEvent established;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &established));
  EXPECT_EQ(established.id, *id_a);
  EXPECT_EQ(established.tag, 11u);
  EXPECT_EQ(established.private_data, accept.private_data);
  EXPECT_EQ(established.peer.port, 7174);
  const uint64_t remote_b = LoadBe64(established.private_data.data());
  const uint32_t rkey_b = LoadBe32(established.private_data.data() + 8);
  ASSERT_TRUE(WaitEvent(1, CmEventType::kEstablished, &established));
  EXPECT_EQ(established.id, request.id);
  EXPECT_EQ(established.tag, 22u);

  // The QPs were set up from the exchange: each aims at the other, the PSNs
  // match, the read depths are the minimum of the offers.
  ibv_qp_attr attr_a{}, attr_b{};
  ASSERT_TRUE(side(0).engine->QueryQp(qa, &attr_a, nullptr).ok());
  ASSERT_TRUE(side(1).engine->QueryQp(qb, &attr_b, nullptr).ok());
  EXPECT_EQ(attr_a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr_b.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr_a.dest_qp_num, qb->qpn);
  EXPECT_EQ(attr_b.dest_qp_num, qa->qpn);
  EXPECT_EQ(attr_a.sq_psn, attr_b.rq_psn);
  EXPECT_EQ(attr_b.sq_psn, attr_a.rq_psn);
  EXPECT_EQ(attr_a.path_mtu, attr_b.path_mtu);
  EXPECT_EQ(attr_a.path_mtu, IBV_MTU_1024);  // the port's (Ethernet MTU 1500)
  EXPECT_EQ(attr_b.max_dest_rd_atomic, 4);
  EXPECT_EQ(attr_a.max_rd_atomic, 4);
  EXPECT_EQ(attr_a.max_dest_rd_atomic, 16);
  EXPECT_EQ(attr_b.max_rd_atomic, 16);
  EXPECT_EQ(attr_a.qp_access_flags, static_cast<unsigned>(kAllAccess));

  // SEND both ways.
  Buffer msg_a = Register(0, 256, 0);
  Buffer msg_b = Register(1, 256, 0);
  for (size_t k = 0; k < 256; ++k) msg_a.bytes[k] = uint8_t(k), msg_b.bytes[k] = uint8_t(255 - k);
  Buffer in_a = Register(0, 256, 0);
  Buffer in_b = Register(1, 256, 0);
  PostRecv(0, qa, in_a, 1);
  PostRecv(1, qb, in_b, 2);
  ASSERT_EQ(PostSend(0, qa, IBV_WR_SEND, msg_a, 200, 3), 0);
  ASSERT_EQ(PostSend(1, qb, IBV_WR_SEND, msg_b, 100, 4), 0);
  auto wc_a = WaitCompletions(0, 2);
  auto wc_b = WaitCompletions(1, 2);
  ASSERT_EQ(wc_a.size(), 2u);
  ASSERT_EQ(wc_b.size(), 2u);
  for (const auto& wc : wc_a) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  for (const auto& wc : wc_b) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(in_b.bytes.data(), msg_a.bytes.data(), 200));
  EXPECT_EQ(0, std::memcmp(in_a.bytes.data(), msg_b.bytes.data(), 100));

  // RDMA WRITE both ways, to the addresses from the private data.
  ASSERT_EQ(PostSend(0, qa, IBV_WR_RDMA_WRITE, msg_a, 256, 5, remote_b + 1000, rkey_b), 0);
  ASSERT_EQ(PostSend(1, qb, IBV_WR_RDMA_WRITE, msg_b, 256, 6, remote_a + 2000, rkey_a), 0);
  wc_a = WaitCompletions(0, 1);
  wc_b = WaitCompletions(1, 1);
  ASSERT_EQ(wc_a.size(), 1u);
  ASSERT_EQ(wc_b.size(), 1u);
  EXPECT_EQ(wc_a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc_b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(mem_b.bytes.data() + 1000, msg_a.bytes.data(), 256));
  EXPECT_EQ(0, std::memcmp(mem_a.bytes.data() + 2000, msg_b.bytes.data(), 256));
  EXPECT_EQ(mem_b.bytes[999], 0xBB);
  EXPECT_EQ(mem_b.bytes[1256], 0xBB);

  // Disconnect from A; B's posted receive is flushed.
  Buffer spare = Register(1, 64, 0);
  PostRecv(1, qb, spare, 9);
  Connected c;
  c.qp[0] = qa;
  c.qp[1] = qb;
  c.id[0] = *id_a;
  c.id[1] = request.id;
  DisconnectBoth(c, 0);
  auto flushed = WaitCompletions(1, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 9u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(cm(0).counters().retransmits, 0u);
  EXPECT_EQ(cm(1).counters().retransmits, 0u);
  cm(0).Release(c.id[0]);
  cm(1).Release(c.id[1]);
}

// The MADs on the wire look like the kernel's (rping_rdma_cm.pcap): CM class
// Send MADs from QP 1 with Q_Key 0x80010000, one transaction ID for the
// connection, RoCE path fields as rdma_cm fills them, the IP CM header.
TEST_F(ConnectionManagerTest, MadsOnTheWireAreWhatRdmaCmSends) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7174, 1).ok());
  std::vector<std::vector<uint8_t>> mads;
  std::vector<uint32_t> src_qps, qkeys;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    PacketView view;
    if (ParsePacket(m, ParseOptions{}, &view) == ParseError::kOk && view.fields.bth.dest_qp == kGsiQpn) {
      mads.emplace_back(view.payload, view.payload + view.fields.payload_length);
      src_qps.push_back(view.fields.deth.src_qp);
      qkeys.push_back(view.fields.deth.qkey);
    }
    return false;
  });
  Connected c = ConnectAndAccept(7174);
  ASSERT_NE(c.id[0], 0u);
  ibv_qp_attr active{}, passive{};
  ASSERT_TRUE(side(0).engine->QueryQp(c.qp[0], &active, nullptr).ok());
  ASSERT_TRUE(side(1).engine->QueryQp(c.qp[1], &passive, nullptr).ok());
  DisconnectBoth(c, 0);
  ASSERT_EQ(mads.size(), 5u);
  const CmAttribute order[] = {CmAttribute::kReq, CmAttribute::kRep, CmAttribute::kRtu, CmAttribute::kDreq,
                               CmAttribute::kDrep};
  uint64_t tid = 0;
  for (size_t i = 0; i < mads.size(); ++i) {
    EXPECT_EQ(mads[i].size(), kMadBytes);
    EXPECT_EQ(src_qps[i], 1u);
    EXPECT_EQ(qkeys[i], kGsiQkey);
    CmMad mad;
    ASSERT_EQ(DecodeCmMad(mads[i].data(), mads[i].size(), &mad), CmMadError::kOk);
    EXPECT_EQ(AttributeOf(mad.message), order[i]);
    if (i == 0) tid = mad.header.transaction_id;
    EXPECT_EQ(mad.header.transaction_id, tid);
  }
  CmMad mad;
  ASSERT_EQ(DecodeCmMad(mads[0].data(), kMadBytes, &mad), CmMadError::kOk);
  const CmReq& req = std::get<CmReq>(mad.message);
  const uint32_t req_starting_psn = req.starting_psn;  // `mad` is reused below
  EXPECT_EQ(req.local_comm_id, c.id[0]);
  EXPECT_EQ(static_cast<uint32_t>(tid), c.id[0]) << "low half of the TID: the comm ID, as the kernel makes it";
  EXPECT_EQ(req.service_id, 0x0000000001061c06ull);
  // EUI-64 of 02:00:00:00:00:01.
  EXPECT_EQ(req.local_ca_guid, 0x000000fffe000001ull);
  EXPECT_EQ(req.local_qpn, c.qp[0]->qpn);
  EXPECT_EQ(req.transport_service_type, 0);
  EXPECT_EQ(req.partition_key, 0xffff);
  EXPECT_EQ(req.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(req.max_cm_retries, 15);
  EXPECT_EQ(req.remote_cm_response_timeout, 8);  // 4.096 us * 2^8 >= 1 ms
  EXPECT_EQ(req.primary.local_lid, 0xffff);
  EXPECT_EQ(req.primary.remote_lid, 0xffff);
  EXPECT_EQ(req.primary.local_gid, side(0).gid);
  EXPECT_EQ(req.primary.remote_gid, side(1).gid);
  EXPECT_EQ(req.primary.hop_limit, 64);
  EXPECT_EQ(req.primary.local_ack_timeout, 10);
  IpCmHeader ip;
  ASSERT_EQ(DecodeIpCmHeader(req.private_data.data(), req.private_data.size(), &ip), CmMadError::kOk);
  EXPECT_EQ(ip.ip_version, 4);
  EXPECT_EQ(ip.source_ip, side(0).gid);
  EXPECT_EQ(ip.destination_ip, side(1).gid);
  EXPECT_EQ(req.private_data[4], 0) << "IPv4 in the last 4 bytes, after 12 zero bytes";
  ASSERT_EQ(DecodeCmMad(mads[1].data(), kMadBytes, &mad), CmMadError::kOk);
  const CmRep& rep = std::get<CmRep>(mad.message);
  EXPECT_EQ(rep.local_comm_id, c.id[1]);
  EXPECT_EQ(rep.remote_comm_id, c.id[0]);
  EXPECT_EQ(rep.local_qpn, c.qp[1]->qpn);
  EXPECT_EQ(rep.local_ca_guid, 0x000000fffe000002ull);
  // The Linux kernel's CM (rping_rdma_cm.pcap): the REQ's Starting PSN is the
  // first PSN the active side receives (the passive side's first send), the
  // REP's the first the passive side receives.
  EXPECT_EQ(active.rq_psn, req_starting_psn);
  EXPECT_EQ(passive.sq_psn, req_starting_psn);
  EXPECT_EQ(active.sq_psn, rep.starting_psn);
  EXPECT_EQ(passive.rq_psn, rep.starting_psn);
  ASSERT_EQ(DecodeCmMad(mads[3].data(), kMadBytes, &mad), CmMadError::kOk);
  EXPECT_EQ(std::get<CmDreq>(mad.message).remote_qpn, c.qp[1]->qpn);
}

// Each engine has an IPv4 (index 0) and an IPv6 GID (index 1): a connection
// to the peer's IPv6 address is made from ours, MADs and QPs alike, and data
// moves over it.
TEST_F(ConnectionManagerTest, ConnectOverIpv6UsesThePortsIpv6Address) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7200, 1).ok());
  QueuePair* qa = NewRcQp(0);
  QueuePair* qb = NewRcQp(1);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid6, 7200};
  params.local_gid = side(0).gid;  // IPv4 towards an IPv6 peer: refused
  EXPECT_EQ(cm(0).Connect(params, 3).status().code(), StatusCode::kInvalidArgument);
  params.local_gid = Gid{};  // the port's address of the peer's version
  auto id = cm(0).Connect(params, 3);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(request.peer.gid, side(0).gid6);
  EXPECT_EQ(request.local.gid, side(1).gid6);
  CmAcceptParams accept;
  accept.qp = qb;
  ASSERT_TRUE(cm(1).Accept(request.id, accept, 4).ok());
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e));
  EXPECT_EQ(e.local.gid, side(0).gid6);
  EXPECT_EQ(e.peer.gid, side(1).gid6);
  ASSERT_TRUE(WaitEvent(1, CmEventType::kEstablished, &e));

  for (int i = 0; i < 2; ++i) {
    ibv_qp_attr attr{};
    ASSERT_TRUE(side(i).engine->QueryQp(i == 0 ? qa : qb, &attr, nullptr).ok());
    EXPECT_EQ(attr.ah_attr.grh.sgid_index, 1) << "side " << i;
    EXPECT_EQ(0, std::memcmp(attr.ah_attr.grh.dgid.raw, side(1 - i).gid6.data(), 16)) << "side " << i;
  }
  Buffer to = Register(1, 256, 0);
  Buffer from = Register(0, 256, 0x66);
  PostRecv(1, qb, to, 9);
  ASSERT_EQ(PostSend(0, qa, IBV_WR_SEND, from, 256, 8), 0);
  ASSERT_EQ(WaitCompletions(1, 1).size(), 1u);
  EXPECT_EQ(to.bytes, from.bytes);
}

// Loopback: a connection manager connects to its own listener through its
// own address (rdma_cm clients and servers in one process, UCX's self
// checks), IPv4 and IPv6, and nothing reaches the port.
TEST_F(ConnectionManagerTest, ConnectsToItsOwnListenerThroughItsOwnAddress) {
  Start();
  ASSERT_TRUE(cm(0).Listen(7300, 5).ok());
  for (int round = 0; round < 2; ++round) {
    QueuePair* client = NewRcQp(0);
    QueuePair* server = NewRcQp(0);
    CmConnectParams params;
    params.qp = client;
    params.remote = {round == 0 ? side(0).gid : side(0).gid6, 7300};
    params.local_ack_timeout = 10;
    auto id = cm(0).Connect(params, 30 + round);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    CmEvent request;
    ASSERT_TRUE(WaitEvent(0, CmEventType::kConnectRequest, &request));
    EXPECT_EQ(request.listen_tag, 5u);
    EXPECT_EQ(request.peer.gid, params.remote.gid);
    CmAcceptParams accept;
    accept.qp = server;
    accept.local_ack_timeout = 10;
    ASSERT_TRUE(cm(0).Accept(request.id, accept, 40 + round).ok());
    CmEvent e1, e2;
    ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e1));
    ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e2));
    EXPECT_TRUE((e1.id == *id && e2.id == request.id) || (e2.id == *id && e1.id == request.id));

    Buffer to = Register(0, 512, 0);
    Buffer from = Register(0, 512, static_cast<uint8_t>(0x70 + round));
    PostRecv(0, server, to, 9);
    ASSERT_EQ(PostSend(0, client, IBV_WR_SEND, from, 512, 8), 0);
    ASSERT_EQ(WaitCompletions(0, 2).size(), 2u);
    EXPECT_EQ(to.bytes, from.bytes);

    ASSERT_TRUE(cm(0).Disconnect(*id).ok());
    ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, &e1));
    ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, &e2));
    EXPECT_EQ(StateOf(0, client), IBV_QPS_ERR);
    EXPECT_EQ(StateOf(0, server), IBV_QPS_ERR);
  }
  EXPECT_GT(side(0).engine->counters().loopback_frames, 0u);
  EXPECT_EQ(side(1).engine->counters().rx_frames, 0u) << "a frame to our own address reached the wire";
}

TEST_F(ConnectionManagerTest, RejectCarriesReasonAndPrivateData) {
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5000};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  const uint8_t why[] = {'n', 'o', ' ', 't', 'h', 'a', 'n', 'k', 's'};
  ASSERT_TRUE(cm(1).Reject(request.id, why, sizeof why).ok());
  EXPECT_EQ(cm(1).Reject(request.id, why, sizeof why).code(), StatusCode::kFailedPrecondition);
  CmEvent rejected;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kRejected, &rejected));
  EXPECT_EQ(rejected.id, *id);
  EXPECT_EQ(rejected.tag, 5u);
  EXPECT_EQ(rejected.reject_reason, 28);
  ASSERT_EQ(rejected.private_data.size(), kCmRejPrivateDataSize);
  EXPECT_EQ(0, std::memcmp(rejected.private_data.data(), why, sizeof why));
  EXPECT_EQ(rejected.private_data[sizeof why], 0);
  EXPECT_EQ(StateOf(0, qa), IBV_QPS_ERR);
  Settle(5 * kResponseTimeoutNs / 1000);
  EXPECT_TRUE(events_[0].empty());
  EXPECT_TRUE(events_[1].empty());
  EXPECT_EQ(cm(0).counters().retransmits, 0u);
}

TEST_F(ConnectionManagerTest, ConnectToAPortNobodyListensOnIsInvalidServiceId) {
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5001};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  CmEvent rejected;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kRejected, &rejected));
  EXPECT_EQ(rejected.reject_reason, 8);
  EXPECT_TRUE(events_[1].empty()) << "the listener on 5000 saw nothing";
  // After StopListening, port 5000 is the same.
  ASSERT_TRUE(cm(1).StopListening(5000).ok());
  EXPECT_EQ(cm(1).StopListening(5000).code(), StatusCode::kNotFound);
  params.qp = NewRcQp(0);
  params.remote.port = 5000;
  ASSERT_TRUE(cm(0).Connect(params, 6).ok());
  ASSERT_TRUE(WaitEvent(0, CmEventType::kRejected, &rejected));
  EXPECT_EQ(rejected.reject_reason, 8);
  EXPECT_EQ(rejected.tag, 6u);
}

// Claiming a port from the host's daemon (listen_hook) can take seconds when
// the daemon gets no CPU. Meanwhile the CM goes on: a request to another
// listener is answered and connects, and the port being claimed refuses
// requests until its claim is granted. (With the CM's mutex held across the
// claim, side 1 would answer nothing until the hook gave up waiting, 5 s.)
TEST_F(ConnectionManagerTest, ASlowPortClaimDoesNotHoldUpTheConnectionManager) {
  std::mutex claim_mutex;
  std::condition_variable claim_changed;
  bool claim_waiting = false, claim_released = false;
  tweak_ = [&](ConnectionManager::Options& o) {
    o.listen_hook = [&](uint16_t port, bool listen) {
      if (port != 5200 || !listen) return Status::Ok();
      std::unique_lock<std::mutex> lock(claim_mutex);
      claim_waiting = true;
      claim_changed.notify_all();
      claim_changed.wait_for(lock, std::chrono::seconds(5), [&] { return claim_released; });
      return Status::Ok();
    };
  };
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  const auto release = [&] {
    std::lock_guard<std::mutex> lock(claim_mutex);
    claim_released = true;
    claim_changed.notify_all();
  };
  StatusOr<uint16_t> slow_listen = InvalidArgument("not run");
  std::thread listener([&] { slow_listen = cm(1).Listen(5200, 2); });
  struct ReleaseAndJoin {  // on every way out, failed assertions too
    const std::function<void()> release;
    std::thread& thread;
    ~ReleaseAndJoin() {
      release();
      if (thread.joinable()) thread.join();
    }
  } release_and_join{release, listener};
  {
    std::unique_lock<std::mutex> lock(claim_mutex);
    ASSERT_TRUE(claim_changed.wait_for(lock, std::chrono::seconds(5), [&] { return claim_waiting; }));
  }

  // While the claim waits, port 5200 is not listened on yet.
  CmConnectParams params;
  params.qp = NewRcQp(0);
  params.remote = {side(1).gid, 5200};
  ASSERT_TRUE(cm(0).Connect(params, 5).ok());
  CmEvent rejected;
  EXPECT_TRUE(WaitEvent(0, CmEventType::kRejected, &rejected));
  EXPECT_EQ(rejected.reject_reason, kRejInvalidServiceId);
  // A connection to the listener on 5000 is made meanwhile.
  QueuePair* qa = NewRcQp(0);
  params.qp = qa;
  params.remote.port = 5000;
  auto id = cm(0).Connect(params, 6);
  ASSERT_TRUE(id.ok());
  CmEvent request;
  EXPECT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(request.listen_tag, 1u);
  {
    std::lock_guard<std::mutex> lock(claim_mutex);
    EXPECT_FALSE(claim_released) << "the CM waited for the claim";
  }
  if (request.type == CmEventType::kConnectRequest) AcceptAndExpectEstablished(request, *id, qa);

  release();
  listener.join();
  ASSERT_TRUE(slow_listen.ok()) << slow_listen.status().ToString();
  EXPECT_EQ(*slow_listen, 5200);
  // Granted: 5200 is listened on now.
  params.qp = NewRcQp(0);
  params.remote.port = 5200;
  ASSERT_TRUE(cm(0).Connect(params, 7).ok());
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(request.listen_tag, 2u);
}

TEST_F(ConnectionManagerTest, CallerGivingUpWithdrawsTheRequest) {
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5000};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  ASSERT_TRUE(cm(0).Disconnect(*id).ok());
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, &e));
  EXPECT_EQ(e.id, *id);
  EXPECT_EQ(StateOf(0, qa), IBV_QPS_ERR);
  ASSERT_TRUE(WaitEvent(1, CmEventType::kRejected, &e));
  EXPECT_EQ(e.id, request.id);
  EXPECT_EQ(e.reject_reason, kRejTimeout);
  CmAcceptParams accept;
  accept.qp = NewRcQp(1);
  EXPECT_EQ(cm(1).Accept(request.id, accept, 1).code(), StatusCode::kFailedPrecondition);
}

// The user takes longer to accept than the caller's REQ retries last (16 ms
// here): the caller's duplicate REQ draws an MRA (IBTA 12.6.6, as the kernel's
// rdma_cm sends), the caller waits, and the late accept still connects.
TEST_F(ConnectionManagerTest, SlowAcceptIsCoveredByAnMra) {
  Start();
  ASSERT_TRUE(cm(1).Listen(5100, 1).ok());
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5100};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  Settle(3 * (kMaxRetries + 1) * kResponseTimeoutNs / 1000);  // three times the caller's patience
  EXPECT_GE(cm(1).counters().mras_sent, 1u);
  for (const CmEvent& e : events_[0]) EXPECT_NE(e.type, CmEventType::kUnreachable) << "the caller gave up";
  AcceptAndExpectEstablished(request, *id, qa);
}

TEST_F(ConnectionManagerTest, PeerThatNeverAnswersIsUnreachableAfterEveryRetry) {
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  uint64_t reqs_on_wire = 0;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    const uint16_t attribute = CmAttributeOf(m);
    if (attribute == static_cast<uint16_t>(CmAttribute::kReq)) ++reqs_on_wire;
    return attribute != 0;  // every MAD lost
  });
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5000};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  const uint64_t start = pair_->now_ns();
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kUnreachable, &e, 100'000));
  EXPECT_EQ(e.id, *id);
  // The first REQ and max_retries resends, a response timeout apart.
  EXPECT_EQ(reqs_on_wire, 1u + kMaxRetries);
  EXPECT_EQ(cm(0).counters().retransmits, kMaxRetries);
  EXPECT_GE(pair_->now_ns() - start, (kMaxRetries + 1) * kResponseTimeoutNs);
  EXPECT_EQ(StateOf(0, qa), IBV_QPS_ERR);
  EXPECT_TRUE(events_[1].empty());
  EXPECT_EQ(cm(0).Disconnect(*id).code(), StatusCode::kFailedPrecondition);
}

// Resends back off: each wait twice the last, up to max_response_timeout_ns
// (8 ms here), and the REQ tells the passive side that longest wait.
TEST_F(ConnectionManagerTest, ResendsBackOffUpToTheLongestWait) {
  tweak_ = [](ConnectionManager::Options& o) { o.max_response_timeout_ns = 8 * kResponseTimeoutNs; };
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  std::vector<uint64_t> req_times;
  CmReq first_req;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    if (CmAttributeOf(m) == static_cast<uint16_t>(CmAttribute::kReq)) {
      if (req_times.empty()) {
        PacketView view;
        CmMad mad;
        if (ParsePacket(m, ParseOptions{}, &view) == ParseError::kOk &&
            DecodeCmMad(view.payload, view.fields.payload_length, &mad) == CmMadError::kOk) {
          first_req = std::get<CmReq>(mad.message);
        }
      }
      req_times.push_back(pair_->now_ns());
    }
    return CmAttributeOf(m) != 0;  // every MAD lost
  });
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5000};
  ASSERT_TRUE(cm(0).Connect(params, 5).ok());
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kUnreachable, &e, 1'000'000));
  ASSERT_EQ(req_times.size(), 1u + kMaxRetries);
  uint64_t want = kResponseTimeoutNs;
  for (size_t i = 1; i < req_times.size(); ++i) {
    const uint64_t gap = req_times[i] - req_times[i - 1];
    EXPECT_GE(gap, want) << "resend " << i;
    EXPECT_LE(gap, want + 20'000) << "resend " << i;  // a poll's granularity
    want = std::min(want * 2, 8 * kResponseTimeoutNs);
  }
  // 4.096 us * 2^11 = 8.4 ms: the first exponent that covers 8 ms.
  EXPECT_EQ(first_req.remote_cm_response_timeout, 11);
  EXPECT_EQ(first_req.local_cm_response_timeout, 11);
}

// The peer's CM hears nothing for 40 ms, longer than a flat schedule's whole
// patience (16 tries of 1 ms): with resends backing off to 8 ms, the
// caller is still trying when the path comes back, and the connection is
// made.
TEST_F(ConnectionManagerTest, ABackedOffCallerOutlastsAStall) {
  tweak_ = [](ConnectionManager::Options& o) { o.max_response_timeout_ns = 8 * kResponseTimeoutNs; };
  Start();
  ASSERT_TRUE(cm(1).Listen(5000, 1).ok());
  const uint64_t stall_end = pair_->now_ns() + 40 * kResponseTimeoutNs;
  pair_->link().set_drop_filter(
      [&](const rte_mbuf* m) { return CmAttributeOf(m) != 0 && pair_->now_ns() < stall_end; });
  QueuePair* qa = NewRcQp(0);
  CmConnectParams params;
  params.qp = qa;
  params.remote = {side(1).gid, 5000};
  auto id = cm(0).Connect(params, 5);
  ASSERT_TRUE(id.ok());
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request, 1'000'000));
  EXPECT_GE(pair_->now_ns(), stall_end);
  AcceptAndExpectEstablished(request, *id, qa);
  EXPECT_GE(cm(0).counters().retransmits, 5u);
  for (const CmEvent& ev : events_[0]) EXPECT_NE(ev.type, CmEventType::kUnreachable);
}

// Each CM MAD of a connection's life lost once: still connects, still
// disconnects (both sides hear of it).
class LostMadTest : public ConnectionManagerTest, public ::testing::WithParamInterface<CmAttribute> {};

TEST_P(LostMadTest, AnySingleLostMadIsSurvived) {
  Start();
  ASSERT_TRUE(cm(1).Listen(6000, 1).ok());
  const uint16_t victim = static_cast<uint16_t>(GetParam());
  int dropped = 0;
  pair_->link().set_drop_filter([&](const rte_mbuf* m) {
    if (dropped == 0 && CmAttributeOf(m) == victim) {
      ++dropped;
      return true;
    }
    return false;
  });
  Connected c = ConnectAndAccept(6000);
  ASSERT_NE(c.id[0], 0u);
  DisconnectBoth(c, 0);
  Settle(3 * kResponseTimeoutNs / 1000);
  EXPECT_EQ(dropped, 1);
  EXPECT_GE(cm(0).counters().retransmits + cm(1).counters().retransmits, 1u);
  // Nothing else happened: no second connection, no extra events.
  EXPECT_TRUE(events_[0].empty());
  EXPECT_TRUE(events_[1].empty());
}

INSTANTIATE_TEST_SUITE_P(EachMad, LostMadTest,
                         ::testing::Values(CmAttribute::kReq, CmAttribute::kRep, CmAttribute::kRtu,
                                           CmAttribute::kDreq, CmAttribute::kDrep),
                         [](const ::testing::TestParamInfo<CmAttribute>& param_info) {
                           switch (param_info.param) {
                             case CmAttribute::kReq: return std::string("Req");
                             case CmAttribute::kRep: return std::string("Rep");
                             case CmAttribute::kRtu: return std::string("Rtu");
                             case CmAttribute::kDreq: return std::string("Dreq");
                             case CmAttribute::kDrep: return std::string("Drep");
                             default: return std::string("Other");
                           }
                         });

// rdma_destroy_id(3) has applications destroy their QP first: the peer's
// DREQ then finds the connection's QP gone. The CM must not touch it, nor a
// new QP the engine made in its place (often at the same address).
TEST_F(ConnectionManagerTest, QpDestroyedWhileConnectedIsNeverTouched) {
  Start();
  ASSERT_TRUE(cm(1).Listen(6003, 1).ok());
  Connected c = ConnectAndAccept(6003);
  ASSERT_NE(c.id[0], 0u);
  ASSERT_TRUE(side(0).engine->DestroyQp(c.qp[0]).ok());
  QueuePair* fresh = NewRcQp(0);
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(cm(1).Disconnect(c.id[1]).ok());
  CmEvent e;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kDisconnected, &e));
  ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, &e));
  EXPECT_EQ(e.id, c.id[0]);
  EXPECT_EQ(StateOf(0, fresh), IBV_QPS_RESET);
  // And the engine refuses the stale pointer itself.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(side(0).engine->ModifyQp(fresh, attr, IBV_QP_STATE, fresh->qpn + 1).code(), StatusCode::kInvalidArgument);
}

TEST_F(ConnectionManagerTest, DisconnectFromThePassiveSide) {
  Start();
  ASSERT_TRUE(cm(1).Listen(6001, 1).ok());
  Connected c = ConnectAndAccept(6001);
  ASSERT_NE(c.id[0], 0u);
  Buffer in_a = Register(0, 64, 0);
  PostRecv(0, c.qp[0], in_a, 31);
  DisconnectBoth(c, 1);
  auto flushed = WaitCompletions(0, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 31u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(cm(1).Disconnect(c.id[1]).code(), StatusCode::kFailedPrecondition);
}

// A uroce daemon saw the peer's process end: this side's connection ends at
// once with kDisconnected (its QP in ERR, its work flushed), as if the
// peer's kernel had sent DREQ on its way out; nothing goes on the wire.
TEST_F(ConnectionManagerTest, PeerGoneEndsTheConnectionAtOnce) {
  Start();
  ASSERT_TRUE(cm(1).Listen(6003, 1).ok());
  Connected c = ConnectAndAccept(6003);
  ASSERT_NE(c.id[0], 0u);
  Buffer in_a = Register(0, 64, 0);
  PostRecv(0, c.qp[0], in_a, 41);
  // Another pair of QPNs names no connection of ours.
  EXPECT_FALSE(cm(0).PeerGone(c.qp[0]->qpn, c.qp[1]->qpn + 1));
  const uint64_t sent = cm(0).counters().mads_sent;
  ASSERT_TRUE(cm(0).PeerGone(c.qp[0]->qpn, c.qp[1]->qpn));
  ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, nullptr));
  auto flushed = WaitCompletions(0, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 41u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(cm(0).counters().mads_sent, sent);  // no DREQ to a peer that is gone
  EXPECT_FALSE(cm(0).PeerGone(c.qp[0]->qpn, c.qp[1]->qpn));  // once
  EXPECT_EQ(cm(0).Disconnect(c.id[0]).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ConnectionManagerTest, BothSidesDisconnectingAtOnceEndOnce) {
  Start();
  ASSERT_TRUE(cm(1).Listen(6002, 1).ok());
  Connected c = ConnectAndAccept(6002);
  ASSERT_NE(c.id[0], 0u);
  ASSERT_TRUE(cm(0).Disconnect(c.id[0]).ok());
  ASSERT_TRUE(cm(1).Disconnect(c.id[1]).ok());
  ASSERT_TRUE(WaitEvent(0, CmEventType::kDisconnected, nullptr));
  ASSERT_TRUE(WaitEvent(1, CmEventType::kDisconnected, nullptr));
  Settle(20 * kResponseTimeoutNs / 1000);
  EXPECT_TRUE(events_[0].empty());
  EXPECT_TRUE(events_[1].empty());
}

TEST_F(ConnectionManagerTest, SecondManagerOnOneEngineIsRefused) {
  Start();
  ConnectionManager::Options o;
  o.local_gid = side(0).gid;
  auto again = ConnectionManager::Create(side(0).engine.get(), side(0).pd, o);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
}

// Many connections one after another over a link that loses, duplicates and
// reorders frames (MADs and data alike): every one connects, carries a
// message and ends on both sides. Replays from its seed.
TEST_F(ConnectionManagerTest, SeededRandomLossOverManyConnections) {
  EnginePairOptions options;
  options.seed = 4242;
  options.impairments.loss = 0.15;
  options.impairments.duplicate = 0.05;
  options.impairments.reorder = 0.05;
  Start(options);
  ASSERT_TRUE(cm(1).Listen(7000, 1).ok());
  Buffer src = Register(0, 512, 0x33);
  Buffer dst = Register(1, 512, 0);
  for (int round = 0; round < 30; ++round) {
    SCOPED_TRACE(round);
    Connected c = ConnectAndAccept(7000, static_cast<uint8_t>(round));
    ASSERT_NE(c.id[0], 0u);
    src.bytes[0] = static_cast<uint8_t>(round);
    PostRecv(1, c.qp[1], dst, 100 + round);
    ASSERT_EQ(PostSend(0, c.qp[0], IBV_WR_SEND, src, 512, 200 + round), 0);
    auto recv = WaitCompletions(1, 1);
    ASSERT_EQ(recv.size(), 1u);
    EXPECT_EQ(recv[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(dst.bytes[0], round);
    auto sent = WaitCompletions(0, 1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
    DisconnectBoth(c, round % 2);
    cm(0).Release(c.id[0]);
    cm(1).Release(c.id[1]);
    ASSERT_TRUE(side(0).engine->DestroyQp(c.qp[0]).ok());
    ASSERT_TRUE(side(1).engine->DestroyQp(c.qp[1]).ok());
  }
  EXPECT_GT(pair_->link().counters().dropped, 0u);
  EXPECT_GT(cm(0).counters().retransmits + cm(1).counters().retransmits, 0u);
  EXPECT_GT(cm(0).counters().duplicates + cm(1).counters().duplicates, 0u);
}

// ---- Hostile peers ----

// 2,000 REQs with distinct communication IDs against a listener with a
// backlog of 16: 16 wait for an answer, every other one is refused with REJ
// "no resources" (IBTA 12.6.7 table 112, reason 3) and leaves no state. The
// 16 nobody answers expire (REJ "timeout", reason 4) and are forgotten,
// events included; a real connection works afterwards.
TEST_F(ConnectionManagerTest, ReqStormBeyondTheBacklogIsRefusedAndExpires) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7300, 1, 16).ok());
  std::vector<SeenMad> seen;
  pair_->link().set_drop_filter(RecordMadsFrom(side(1).mac, &seen));
  const MadFrom attacker{side(0).mac, side(0).gid};
  constexpr uint32_t kStorm = 2000;
  // Each REQ says its caller waits 4.096 us * 2^4 three times: expired after
  // the CM's floor (one response timeout, 1 ms here).
  for (uint32_t i = 0; i < kStorm; ++i) {
    Inject(0, attacker, ForgedReq(0x10000 + i, side(0).gid, side(1).gid, 7300, 4, 2));
    if (i % 16 == 15) {
      PollOnce();
      PollOnce();
    }
    const CmStateSizes sizes = cm(1).state_sizes();
    ASSERT_LE(sizes.pending_requests, 16u);
    ASSERT_LE(sizes.connections, 16u);
  }
  Settle(200);
  const CmCounters counters = cm(1).counters();
  EXPECT_EQ(counters.mads_received, kStorm);
  EXPECT_GE(counters.backlog_rejects + counters.requests_expired, kStorm - 16);
  size_t no_resources = 0;
  for (const SeenMad& s : seen) {
    if (const auto* rej = std::get_if<CmRej>(&s.mad.message); rej != nullptr && rej->reason == 3) ++no_resources;
  }
  EXPECT_EQ(no_resources, counters.backlog_rejects);
  // Nobody answers: every request expires and is forgotten.
  Settle(3000);
  CmStateSizes sizes = cm(1).state_sizes();
  EXPECT_EQ(sizes.pending_requests, 0u);
  EXPECT_EQ(sizes.connections, 0u);
  EXPECT_EQ(sizes.events, 0u);
  EXPECT_EQ(cm(1).counters().requests_expired + cm(1).counters().backlog_rejects, kStorm);
  size_t timeouts = 0;
  for (const SeenMad& s : seen) {
    if (const auto* rej = std::get_if<CmRej>(&s.mad.message); rej != nullptr && rej->reason == kRejTimeout) {
      ++timeouts;
    }
  }
  EXPECT_EQ(timeouts, cm(1).counters().requests_expired);
  // The request events the storm made (taken by the fixture): answering one
  // now finds nothing.
  size_t requests = 0;
  for (const CmEvent& e : events_[1]) {
    if (e.type != CmEventType::kConnectRequest) continue;
    ++requests;
    EXPECT_EQ(cm(1).Reject(e.id, nullptr, 0).code(), StatusCode::kNotFound);
  }
  EXPECT_EQ(requests, cm(1).counters().requests_expired);
  events_[1].clear();
  Connected c = ConnectAndAccept(7300);
  ASSERT_NE(c.id[0], 0u);
  DisconnectBoth(c, 0);
}

// A request taken by the application but not answered in time is gone from
// the backlog: the next one is accepted.
TEST_F(ConnectionManagerTest, UnansweredRequestFreesItsBacklogPlace) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7301, 1, 1).ok());
  Inject(0, {side(0).mac, side(0).gid}, ForgedReq(0x777, side(0).gid, side(1).gid, 7301, 4, 2));
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(cm(1).state_sizes().pending_requests, 1u);
  Settle(2000);
  EXPECT_EQ(cm(1).state_sizes().connections, 0u);
  EXPECT_EQ(cm(1).counters().requests_expired, 1u);
  CmAcceptParams accept;
  accept.qp = NewRcQp(1);
  EXPECT_EQ(cm(1).Accept(request.id, accept, 5).code(), StatusCode::kNotFound);
  Connected c = ConnectAndAccept(7301);
  ASSERT_NE(c.id[0], 0u);
}

// A REQ whose caller claims to wait for hours (timeout 31, 15 retries) is
// kept no longer than Options::max_request_lifetime_ns.
TEST_F(ConnectionManagerTest, RequestLifetimeIsBoundedWhateverTheReqSays) {
  tweak_ = [](ConnectionManager::Options& o) { o.max_request_lifetime_ns = 5'000'000; };
  Start();
  ASSERT_TRUE(cm(1).Listen(7302, 1).ok());
  Inject(0, {side(0).mac, side(0).gid}, ForgedReq(0x778, side(0).gid, side(1).gid, 7302, 31, 15));
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, nullptr));
  Settle(4000);
  EXPECT_EQ(cm(1).state_sizes().connections, 1u);
  Settle(2000);
  EXPECT_EQ(cm(1).state_sizes().connections, 0u);
}

// MADs from a source the neighbour table does not know (a spoofed IP) are
// answered to their frame's Ethernet source: REJ for a port nobody listens
// on, REJ for a REP of an unknown ID, DREP for a DREQ of an unknown ID. The
// engine's resolver (ARP/ND, up to seconds) is never asked.
TEST_F(ConnectionManagerTest, SpoofedMadsAreAnsweredToTheirSourceMacWithoutResolving) {
  EnginePairOptions options;
  int resolver_calls = 0;
  options.engine_template.resolve_neighbor = [&resolver_calls](const Gid&) {
    ++resolver_calls;
    return Unavailable("nobody answers ARP here");
  };
  Start(options);
  std::vector<SeenMad> seen;
  pair_->link().set_drop_filter(RecordMadsFrom(side(1).mac, &seen));
  const MacAddress spoofed_mac = {0x02, 0xee, 0, 0, 0, 0x63};
  const MadFrom spoofed{spoofed_mac, Ipv4(10, 0, 0, 99)};
  Inject(0, spoofed, ForgedReq(0x4242, spoofed.gid, side(1).gid, 9999));
  CmMad rep_mad;
  CmRep rep;
  rep.local_comm_id = 0x5151;
  rep.remote_comm_id = 0x6161;
  rep_mad.message = rep;
  Inject(0, spoofed, rep_mad);
  CmMad dreq_mad;
  CmDreq dreq;
  dreq.local_comm_id = 0x7171;
  dreq.remote_comm_id = 0x8181;
  dreq_mad.message = dreq;
  Inject(0, spoofed, dreq_mad);
  Settle(50);
  EXPECT_EQ(resolver_calls, 0);
  EXPECT_EQ(cm(1).counters().send_failures, 0u);
  ASSERT_EQ(seen.size(), 3u);
  for (const SeenMad& s : seen) {
    EXPECT_EQ(s.dst_mac, spoofed_mac);
    EXPECT_EQ(s.dst_gid, spoofed.gid);
  }
  EXPECT_EQ(std::get<CmRej>(seen[0].mad.message).reason, kRejInvalidServiceId);
  EXPECT_EQ(std::get<CmRej>(seen[1].mad.message).reason, kRejInvalidCommId);
  EXPECT_TRUE(std::holds_alternative<CmDrep>(seen[2].mad.message));
  // A real connection still works, and its MADs never needed the resolver.
  ASSERT_TRUE(cm(1).Listen(7303, 1).ok());
  Connected c = ConnectAndAccept(7303);
  ASSERT_NE(c.id[0], 0u);
  EXPECT_EQ(resolver_calls, 0);
}

// An active Connect to a peer the neighbour table lacks resolves in the
// caller's thread; one that does not resolve fails at once, with nothing
// left for Poll to resolve.
TEST_F(ConnectionManagerTest, ConnectResolvesInTheCallersThreadNotInPoll) {
  EnginePairOptions options;
  int resolver_calls = 0;
  bool in_poll = false;
  int calls_in_poll = 0;
  options.engine_template.resolve_neighbor = [&](const Gid&) {
    ++resolver_calls;
    if (in_poll) ++calls_in_poll;
    return Unavailable("nobody answers ARP here");
  };
  Start(options);
  CmConnectParams params;
  params.qp = NewRcQp(0);
  params.remote = {Ipv4(10, 0, 0, 77), 7304};
  EXPECT_EQ(cm(0).Connect(params, 1).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(resolver_calls, 1);
  in_poll = true;
  Settle(3000);
  EXPECT_EQ(calls_in_poll, 0);
  EXPECT_EQ(cm(0).state_sizes().connections, 0u);
}

// Address handles for answers are a bounded cache: 300 spoofed sources leave
// at most max_address_handles, and idle ones age out.
TEST_F(ConnectionManagerTest, AddressHandleCacheIsBoundedAndAges) {
  tweak_ = [](ConnectionManager::Options& o) {
    o.max_address_handles = 64;
    o.address_handle_idle_ns = 2'000'000;
  };
  Start();
  for (uint32_t i = 0; i < 300; ++i) {
    const MadFrom from{{0x02, 0xee, 0, 0, uint8_t(i >> 8), uint8_t(i)}, Ipv4(10, 1, uint8_t(i >> 8), uint8_t(i))};
    Inject(0, from, ForgedReq(0x9000 + i, from.gid, side(1).gid, 9998));
    if (i % 16 == 15) Settle(2);
    ASSERT_LE(cm(1).state_sizes().address_handles, 64u);
  }
  Settle(50);
  EXPECT_EQ(cm(1).counters().mads_received, 300u);
  EXPECT_GE(cm(1).counters().address_handles_evicted, 300u - 64u);
  Settle(5000);
  EXPECT_EQ(cm(1).state_sizes().address_handles, 0u);
}

// An IPv6 peer whose source address has 0x4_ in byte 12 (fd00::4000:2: byte
// 20 of the GRH) is IPv6, not "IPv4 ::ffff:0.0.0.0" (IBTA A17.4.5.2: the IP
// version decides).
TEST_F(ConnectionManagerTest, Ipv6SourceThatLooksLikeIpv4InGrhByte20IsAnswered) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7305, 1).ok());
  std::vector<SeenMad> seen;
  pair_->link().set_drop_filter(RecordMadsFrom(side(1).mac, &seen));
  Gid odd{0xfd, 0x00};
  odd[12] = 0x40;
  odd[15] = 0x02;  // fd00::4000:2
  const MadFrom from{side(0).mac, odd};
  Inject(0, from, ForgedReq(0x6000, odd, side(1).gid6, 7305), true);
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  EXPECT_EQ(request.peer.gid, odd);
  EXPECT_EQ(request.local.gid, side(1).gid6);
  // And an unlistened port is answered, to that address.
  Inject(0, from, ForgedReq(0x6001, odd, side(1).gid6, 9997), true);
  Settle(50);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].dst_gid, odd);
  EXPECT_EQ(std::get<CmRej>(seen[0].mad.message).reason, kRejInvalidServiceId);
}

// An MRA (IBTA 12.6.6) asks the waiting side for 4.096 us * 2^service_timeout
// more: 2^31 is 2.4 hours. One from anyone but the peer is ignored; the
// peer's are bounded (max_mra_extension_ns in all, max_mras of them).
TEST_F(ConnectionManagerTest, MraIsBoundedAndTakenOnlyFromThePeer) {
  tweak_ = [](ConnectionManager::Options& o) { o.max_mra_extension_ns = 5'000'000; };
  Start();
  ASSERT_TRUE(cm(1).Listen(7306, 1).ok());
  // B's own MADs never reach A: A's REQ is never answered.
  const MacAddress b_mac = side(1).mac;
  pair_->link().set_drop_filter([b_mac](const rte_mbuf* m) {
    PacketView view;
    return ParsePacket(m, ParseOptions{}, &view) == ParseError::kOk && view.fields.bth.dest_qp == kGsiQpn &&
           view.fields.src_mac == b_mac;
  });
  CmConnectParams params;
  params.qp = NewRcQp(0);
  params.remote = {side(1).gid, 7306};
  auto id = cm(0).Connect(params, 1);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const uint64_t start = pair_->now_ns();
  auto mra = [&](const Gid& from_gid) {
    CmMad mad;
    CmMra m;
    m.local_comm_id = 0;
    m.remote_comm_id = *id;
    m.message_mraed = CmMessageKind::kReq;
    m.service_timeout = 31;
    mad.message = m;
    Inject(1, {{0x02, 0xee, 0, 0, 0, 0x42}, from_gid}, mad);
  };
  Settle(10);
  mra(Ipv4(10, 0, 0, 99));  // not the peer
  Settle(10);
  EXPECT_EQ(cm(0).counters().mras_ignored, 1u);
  for (int i = 0; i < 10; ++i) {
    mra(side(1).gid);  // the peer's address, 2.4 hours each
    Settle(500);
  }
  // The first asks for 2.4 hours and gets the whole 5 ms; the rest get nothing.
  EXPECT_EQ(cm(0).counters().mras_ignored, 1u + 9u);
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kUnreachable, &e, 100'000));
  // 16 tries of 1 ms, plus at most 5 ms of MRA, plus the polls' granularity.
  EXPECT_LE(pair_->now_ns() - start, 16'000'000u + 5'000'000u + 2'000'000u);
}

// A REP, REJ, RTU, DREQ or DREP for a connection is taken only from its
// peer's address, and once the peer's ID is known, naming it: a host that
// guessed a 32-bit communication ID cannot pick the QP a connection talks
// to, reject it or tear it down.
TEST_F(ConnectionManagerTest, ForgedAnswersFromAnotherSourceAreIgnored) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7307, 1).ok());
  CmConnectParams params;
  params.qp = NewRcQp(0);
  params.remote = {side(1).gid, 7307};
  params.local_ack_timeout = 10;
  auto id = cm(0).Connect(params, 1);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  CmEvent request;
  ASSERT_TRUE(WaitEvent(1, CmEventType::kConnectRequest, &request));
  const MadFrom stranger{{0x02, 0xee, 0, 0, 0, 0x43}, Ipv4(10, 0, 0, 99)};
  {
    CmMad mad;
    CmRep rep;
    rep.local_comm_id = 0x0bad0001;
    rep.remote_comm_id = *id;
    rep.local_qpn = 0xbad01;
    rep.starting_psn = 1;
    mad.message = rep;
    Inject(1, stranger, mad);
  }
  {
    CmMad mad;
    CmRej rej;
    rej.local_comm_id = 0;
    rej.remote_comm_id = *id;
    rej.reason = kRejConsumer;
    mad.message = rej;
    Inject(1, stranger, mad);
  }
  Settle(50);
  EXPECT_EQ(cm(0).counters().mads_forged, 2u);
  for (const CmEvent& e : events_[0]) {
    EXPECT_NE(e.type, CmEventType::kEstablished) << "a forged REP established the connection";
    EXPECT_NE(e.type, CmEventType::kRejected) << "a forged REJ rejected it";
  }
  // The real answer still establishes it, with the listener's QP.
  QueuePair* qp1 = NewRcQp(1);
  CmAcceptParams accept;
  accept.qp = qp1;
  accept.local_ack_timeout = 10;
  ASSERT_TRUE(cm(1).Accept(request.id, accept, 2).ok());
  CmEvent e;
  ASSERT_TRUE(WaitEvent(0, CmEventType::kEstablished, &e));
  ASSERT_TRUE(WaitEvent(1, CmEventType::kEstablished, &e));
  EXPECT_EQ(StateOf(0, params.qp), IBV_QPS_RTS);
  // Now the peer's ID is known: a REJ or DREQ from its own address that
  // does not name it, and a DREQ from elsewhere that does, change nothing.
  const MadFrom peer{side(1).mac, side(1).gid};
  {
    CmMad mad;
    CmRej rej;
    rej.local_comm_id = 0;
    rej.remote_comm_id = *id;
    rej.reason = kRejConsumer;
    mad.message = rej;
    Inject(1, peer, mad);
    CmDreq dreq;
    dreq.local_comm_id = request.id;
    dreq.remote_comm_id = *id;
    mad.message = dreq;
    Inject(1, stranger, mad);
  }
  Settle(50);
  EXPECT_EQ(cm(0).counters().mads_forged, 4u);
  EXPECT_EQ(StateOf(0, params.qp), IBV_QPS_RTS);
  for (const CmEvent& ev : events_[0]) EXPECT_NE(ev.type, CmEventType::kDisconnected);
}

// Starting PSNs (IBTA 9.7.1: chosen by each side) come from the CM's random
// generator over the whole 24 bits, on both sides (QPNs and starting PSNs
// are random, so that a stale or forged packet is unlikely to fit).
TEST_F(ConnectionManagerTest, StartingPsnsAreRandomOverAll24Bits) {
  Start();
  ASSERT_TRUE(cm(1).Listen(7307, 1).ok());
  std::vector<SeenMad> from_a, from_b;
  auto record_a = RecordMadsFrom(side(0).mac, &from_a);
  auto record_b = RecordMadsFrom(side(1).mac, &from_b);
  pair_->link().set_drop_filter([&](const rte_mbuf* m) { return record_a(m) || record_b(m); });
  for (int i = 0; i < 24; ++i) {
    Connected c = ConnectAndAccept(7307, static_cast<uint8_t>(i));
    ASSERT_NE(c.id[0], 0u);
  }
  for (auto* seen : {&from_a, &from_b}) {
    std::vector<uint32_t> psns;
    for (const SeenMad& s : *seen) {
      if (const auto* req = std::get_if<CmReq>(&s.mad.message)) psns.push_back(req->starting_psn);
      if (const auto* rep = std::get_if<CmRep>(&s.mad.message)) psns.push_back(rep->starting_psn);
    }
    ASSERT_EQ(psns.size(), 24u);
    uint32_t any = 0, all = 0xFFFFFF;
    for (uint32_t psn : psns) {
      EXPECT_LE(psn, 0xFFFFFFu);
      any |= psn;
      all &= psn;
    }
    std::sort(psns.begin(), psns.end());
    EXPECT_EQ(std::unique(psns.begin(), psns.end()), psns.end()) << "no PSN twice";
    // Every one of the 24 bits is set in some PSN and clear in another.
    EXPECT_EQ(any, 0xFFFFFFu);
    EXPECT_EQ(all, 0u);
  }
}

}  // namespace
}  // namespace uroce::cm
