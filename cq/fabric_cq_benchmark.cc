// fi_cq_read throughput: entries per second through a push (as the engine
// does) and an fi_cq_read (as the application does).
//
//   bazel run //cq:fabric_cq_benchmark
//
// BM_PushThenRead: one thread pushes a burst and reads it back; the cost of
// both sides without cache-line transfers. BM_ProducerThread: the engine's
// side on its own thread, the reader in the benchmark loop; every entry
// crosses between cores.
#include <infiniband/verbs.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "cq/fabric_cq.h"

namespace uroce::cq {
namespace {

std::unique_ptr<FabricCq> OpenCq(fi_wait_obj wait_obj) {
  fi_cq_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = 1024;
  attr.format = FI_CQ_FORMAT_DATA;
  attr.wait_obj = wait_obj;
  return FabricCq::Open(attr, nullptr).value();
}

std::vector<ibv_wc> Completions(size_t count) {
  std::vector<ibv_wc> wcs(count);
  for (size_t i = 0; i < count; ++i) {
    std::memset(&wcs[i], 0, sizeof(ibv_wc));
    wcs[i].wr_id = i;
    wcs[i].opcode = IBV_WC_RECV;
    wcs[i].byte_len = 64;
  }
  return wcs;
}

void BM_PushThenRead(benchmark::State& state) {
  const size_t burst = static_cast<size_t>(state.range(0));
  auto cq = OpenCq(state.range(1) ? FI_WAIT_FD : FI_WAIT_NONE);
  std::vector<ibv_wc> wcs = Completions(burst);
  std::vector<fi_cq_data_entry> entries(burst);
  for (auto _ : state) {
    cq->PushCompletions(wcs.data(), burst);
    benchmark::DoNotOptimize(fi_cq_read(cq->fid(), entries.data(), burst));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(burst));
}
BENCHMARK(BM_PushThenRead)
    ->ArgNames({"burst", "wait_fd"})
    ->Args({1, 0})
    ->Args({16, 0})
    ->Args({64, 0})
    ->Args({16, 1});

void BM_ProducerThread(benchmark::State& state) {
  const size_t burst = 16;
  auto cq = OpenCq(FI_WAIT_NONE);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    std::vector<ibv_wc> wcs = Completions(burst);
    while (!stop.load(std::memory_order_relaxed)) {
      if (cq->PushCompletions(wcs.data(), burst) == 0) std::this_thread::yield();
    }
  });
  std::vector<fi_cq_data_entry> entries(64);
  int64_t read = 0;
  for (auto _ : state) {
    const ssize_t n = fi_cq_read(cq->fid(), entries.data(), entries.size());
    if (n > 0) read += n;
  }
  stop = true;
  producer.join();
  state.SetItemsProcessed(read);
}
BENCHMARK(BM_ProducerThread)->UseRealTime();

}  // namespace
}  // namespace uroce::cq
