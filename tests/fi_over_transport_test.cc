// The engine's completions flowing through the libfabric-semantics cq layer:
// an RC exchange whose completions the application reads with fi_cq_read /
// fi_cq_sread and waits for with fi_cntr_wait, while another thread drives
// the engines (as an engine lcore would).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "api/uroce_cq.h"
#include "cq/counter.h"
#include "cq/fabric_cq.h"
#include "testing/engine_pair.h"
#include "transport/verbs_wr.h"

namespace uroce::transport {
namespace {

constexpr int kMessages = 200;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(FiOverTransportTest, RcCompletionsReadWithFiCqReadAndCountedWithFiCntrWait) {
  auto pair_or = EnginePair::Create({});
  ASSERT_TRUE(pair_or.ok()) << pair_or.status().ToString();
  std::unique_ptr<EnginePair> pair = std::move(*pair_or);
  auto qps = pair->ConnectQps({});
  ASSERT_TRUE(qps.ok()) << qps.status().ToString();
  auto [qa, qb] = *qps;

  // A's send completions feed a counter; B's receive completions a CQ.
  fi_cntr_attr cntr_attr{};
  cntr_attr.events = FI_CNTR_EVENTS_COMP;
  cntr_attr.wait_obj = FI_WAIT_UNSPEC;
  fid_cntr* counter = nullptr;
  ASSERT_EQ(uroce_cntr_open(&cntr_attr, &counter, nullptr), 0);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  cq_attr.size = 64;  // smaller than the burst: back-pressure must hold
  fid_cq* recv_cq = nullptr;
  ASSERT_EQ(uroce_cq_open(&cq_attr, &recv_cq, nullptr), 0);
  ASSERT_TRUE(pair->a().engine->AttachCompletionSinks(pair->a().cq, nullptr, cq::Counter::FromFid(counter)).ok());
  ASSERT_TRUE(pair->b().engine->AttachCompletionSinks(pair->b().cq, cq::FabricCq::FromFid(recv_cq), nullptr).ok());

  std::vector<uint8_t> src(256 * kMessages), dst(256 * kMessages);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  auto ka = pair->a().engine->RegMr(pair->a().pd, src.data(), src.size(), reinterpret_cast<uint64_t>(src.data()), kAll);
  auto kb = pair->b().engine->RegMr(pair->b().pd, dst.data(), dst.size(), reinterpret_cast<uint64_t>(dst.data()), kAll);
  ASSERT_TRUE(ka.ok() && kb.ok());
  for (int i = 0; i < kMessages; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(dst.data()) + 256u * i, 256, kb->lkey};
    ibv_recv_wr wr = RecvWr(1000 + i, &sge);
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(pair->b().engine->PostRecv(qb, &wr, &bad), 0);
  }

  // The "engine lcore": drives both engines until told to stop.
  std::atomic<bool> stop{false};
  std::thread engine_thread([&] {
    while (!stop.load(std::memory_order_acquire)) pair->PollOnce();
  });

  // The application posts from its own thread, in small batches (the send
  // queue holds 256), and waits on the counter.
  for (int i = 0; i < kMessages; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(src.data()) + 256u * i, 256, ka->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(0xC0DE0000u + i);
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(pair->a().engine->PostSend(qa, &wr, &bad), 0);
  }
  EXPECT_EQ(fi_cntr_wait(counter, kMessages, 60000), 0);
  EXPECT_EQ(fi_cntr_read(counter), uint64_t(kMessages));
  EXPECT_EQ(fi_cntr_readerr(counter), 0u);

  // Receives, in order, through fi_cq_sread (blocking) and fi_cq_read.
  int received = 0;
  while (received < kMessages) {
    fi_cq_data_entry entries[16];
    ssize_t n = fi_cq_sread(recv_cq, entries, 16, nullptr, 60000);
    ASSERT_GT(n, 0) << "fi_cq_sread returned " << n;
    for (ssize_t k = 0; k < n; ++k, ++received) {
      const fi_cq_data_entry& e = entries[k];
      EXPECT_EQ(e.op_context, reinterpret_cast<void*>(uintptr_t(1000 + received)));
      EXPECT_EQ(e.flags & (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA), FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
      EXPECT_EQ(e.len, 256u);
      EXPECT_EQ(e.data, 0xC0DE0000u + received) << "immediate data in host order";
    }
  }
  stop.store(true, std::memory_order_release);
  engine_thread.join();
  EXPECT_EQ(src, dst);
  fi_cq_data_entry extra;
  EXPECT_EQ(fi_cq_read(recv_cq, &extra, 1), -FI_EAGAIN);

  // Detach before closing: the engine must not push to closed objects.
  ASSERT_TRUE(pair->a().engine->AttachCompletionSinks(pair->a().cq, nullptr, nullptr).ok());
  ASSERT_TRUE(pair->b().engine->AttachCompletionSinks(pair->b().cq, nullptr, nullptr).ok());
  EXPECT_EQ(fi_close(&recv_cq->fid), 0);
  EXPECT_EQ(fi_close(&counter->fid), 0);
  EXPECT_TRUE(pair->ShutDownAndCheckMbufs());
}

}  // namespace
}  // namespace uroce::transport
