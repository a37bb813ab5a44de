// The fixture of the engine's end-to-end tests (engine_*_test.cc): two engines over the
// in-memory link (EnginePair), and registered buffers to post from and into. One header so
// that each stage's test file starts its engines and checks its packet buffers the same way.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "testing/engine_pair.h"
#include "transport/engine.h"
#include "transport/engine_side.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

struct Buffer {
  std::vector<uint8_t> bytes;
  MrKeys keys;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
};

class EngineTest : public ::testing::Test {
 protected:
  void Start(const EnginePairOptions& options = {}) {
    auto pair = EnginePair::Create(options);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    pair_ = std::move(*pair);
  }
  void TearDown() override {
    if (!pair_) return;
    // No more polls: the test's buffers are gone. Whatever is still staged or
    // on the wire must go back to the pool when the engines and link go.
    EXPECT_TRUE(pair_->ShutDownAndCheckMbufs()) << "packet buffers leaked";
    pair_.reset();
  }

  Buffer Register(EngineSide& side, size_t size, uint8_t fill, int access = kAllAccess) {
    Buffer b;
    b.bytes.assign(size, fill);
    auto keys = side.engine->RegMr(side.pd, b.bytes.data(), size, b.addr(), access);
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    if (keys.ok()) b.keys = *keys;
    return b;
  }

  static void Pattern(Buffer& b, uint32_t seed) {
    std::mt19937 gen(seed);
    for (auto& x : b.bytes) x = static_cast<uint8_t>(gen());
  }

  void PostRecv(EngineSide& side, QueuePair* qp, Buffer& b, uint64_t wr_id, uint32_t offset = 0,
                uint32_t length = UINT32_MAX) {
    ibv_sge sge{b.addr() + offset, length == UINT32_MAX ? uint32_t(b.bytes.size() - offset) : length,
                b.keys.lkey};
    ibv_recv_wr wr = RecvWr(wr_id, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(side.engine->PostRecv(qp, &wr, &bad), 0);
  }

  int PostSend(EngineSide& side, QueuePair* qp, ibv_wr_opcode op, Buffer& local, uint32_t length, uint64_t wr_id,
               uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t flags = IBV_SEND_SIGNALED) {
    ibv_sge sge{local.addr(), length, local.keys.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    const ibv_send_wr* bad = nullptr;
    return side.engine->PostSend(qp, &wr, &bad);
  }

  // A receive of several SGEs.
  int PostRecvSges(EngineSide& side, QueuePair* qp, uint64_t wr_id, std::vector<ibv_sge> sges) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    const ibv_recv_wr* bad = nullptr;
    return side.engine->PostRecv(qp, &wr, &bad);
  }
  // A signaled send of several SGEs; `imm_data` in network order (SEND or
  // WRITE with immediate).
  int PostSendSges(EngineSide& side, QueuePair* qp, ibv_wr_opcode op, uint64_t wr_id, std::vector<ibv_sge> sges,
                   uint32_t imm_data = 0) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = imm_data;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    const ibv_send_wr* bad = nullptr;
    return side.engine->PostSend(qp, &wr, &bad);
  }

  std::unique_ptr<EnginePair> pair_;
};

}  // namespace uroce::transport
