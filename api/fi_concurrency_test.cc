// A producer thread (standing in for the engine's poll thread) against
// application threads that read, block in fi_cq_sread / fi_cntr_wait /
// fi_eq_sread, or wait on the native wait object with poll(2), epoll(7) or
// pthread_cond_wait after fi_trywait. Every completion must arrive exactly
// once, in order per reader, and no waiter may sleep through one: a wait that
// ends by its (very long) timeout counts as a lost wake-up.
//
// Run under ThreadSanitizer as well:
//   bazel test --config=tsan //api:fi_concurrency_test
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "api/fi_test_util.h"
#include "api/uroce_cq.h"

namespace uroce::testing {
namespace {

constexpr uint64_t kCompletions = 20000;

// Pushes wr_ids 0..count-1 in bursts of 1..16, retrying what a full CQ did
// not take (back-pressure) and pausing now and then so readers go to sleep.
void ProduceCompletions(fid_cq* cq, uint64_t count) {
  uint64_t next = 0;
  unsigned burst_seed = 1;
  std::vector<ibv_wc> burst;
  while (next < count) {
    burst_seed = burst_seed * 1103515245u + 12345u;
    const uint64_t size = std::min<uint64_t>(1 + (burst_seed >> 16) % 16,
                                             count - next);
    burst.clear();
    for (uint64_t i = 0; i < size; ++i) burst.push_back(SuccessWc(next + i));
    size_t done = 0;
    while (done < burst.size()) {
      const ssize_t taken =
          uroce_cq_push_wc(cq, burst.data() + done, burst.size() - done);
      ASSERT_GE(taken, 0);
      done += static_cast<size_t>(taken);
      if (done < burst.size()) std::this_thread::yield();
    }
    next += size;
    if ((burst_seed >> 8) % 64 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

// What the readers saw, checked once they are done.
struct Received {
  std::mutex mutex;
  std::vector<uint64_t> ids;
  std::atomic<uint64_t> count{0};
  std::atomic<int> lost_wakeups{0};
  std::atomic<int> out_of_order{0};

  void Add(const fi_cq_data_entry* entries, ssize_t n, uint64_t* last_seen) {
    std::lock_guard<std::mutex> lock(mutex);
    for (ssize_t i = 0; i < n; ++i) {
      const auto id =
          static_cast<uint64_t>(reinterpret_cast<uintptr_t>(entries[i].op_context));
      // The ring is FIFO and readers take turns, so each reader sees
      // increasing ids.
      if (*last_seen != UINT64_MAX && id <= *last_seen) ++out_of_order;
      *last_seen = id;
      ids.push_back(id);
    }
    count += static_cast<uint64_t>(n);
  }

  void ExpectEveryIdOnce(uint64_t total) {
    std::sort(ids.begin(), ids.end());
    ASSERT_EQ(ids.size(), total);
    for (uint64_t i = 0; i < total; ++i) ASSERT_EQ(ids[i], i);
    EXPECT_EQ(out_of_order.load(), 0);
    EXPECT_EQ(lost_wakeups.load(), 0);
  }
};

TEST(Concurrency, SeveralReadersPollingOneCq) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE, 64));
  Received received;
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      uint64_t last = UINT64_MAX;
      fi_cq_data_entry entries[8];
      while (received.count.load() < kCompletions) {
        const ssize_t n = fi_cq_read(cq.get(), entries, 8);
        if (n > 0) {
          received.Add(entries, n, &last);
        } else {
          ASSERT_EQ(n, -FI_EAGAIN);
          std::this_thread::yield();
        }
      }
    });
  }
  ProduceCompletions(cq.get(), kCompletions);
  for (auto& reader : readers) reader.join();
  received.ExpectEveryIdOnce(kCompletions);
}

class BlockedReaders : public ::testing::TestWithParam<fi_wait_obj> {};

TEST_P(BlockedReaders, ProducerWakesEveryBlockedReader) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam(), 64));
  ASSERT_TRUE(cq);
  Received received;
  std::atomic<bool> producer_done{false};
  std::atomic<int> readers_done{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      uint64_t last = UINT64_MAX;
      fi_cq_data_entry entries[8];
      while (received.count.load() < kCompletions) {
        const ssize_t n =
            fi_cq_sread(cq.get(), entries, 8, nullptr, kHangGuardMs);
        if (n > 0) {
          received.Add(entries, n, &last);
        } else if (n == -FI_EAGAIN && !producer_done.load()) {
          // Neither signalled nor done: the timeout expired while the
          // producer was still producing.
          ++received.lost_wakeups;
        }
      }
      ++readers_done;
    });
  }
  ProduceCompletions(cq.get(), kCompletions);
  producer_done = true;
  // Readers still blocked when the last completion was taken by another one
  // are released by fi_cq_signal.
  while (readers_done.load() < 3) {
    EXPECT_EQ(fi_cq_signal(cq.get()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& reader : readers) reader.join();
  received.ExpectEveryIdOnce(kCompletions);
}

INSTANTIATE_TEST_SUITE_P(AllBlockingKinds, BlockedReaders,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD));

// fi_poll(3): fi_trywait, then block in poll(2) on the FI_GETWAIT fd.
TEST(Concurrency, PollOnTheWaitFdAfterTryWait) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_FD, 64));
  int fd = -1;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  Received received;
  std::thread reader([&] {
    uint64_t last = UINT64_MAX;
    fi_cq_data_entry entries[8];
    while (received.count.load() < kCompletions) {
      if (uroce_trywait(&cq->fid) == 0) {
        pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, kHangGuardMs) == 0) ++received.lost_wakeups;
      }
      ssize_t n;
      while ((n = fi_cq_read(cq.get(), entries, 8)) > 0) {
        received.Add(entries, n, &last);
      }
      ASSERT_EQ(n, -FI_EAGAIN);
    }
  });
  ProduceCompletions(cq.get(), kCompletions);
  reader.join();
  received.ExpectEveryIdOnce(kCompletions);
}

TEST(Concurrency, EpollOnTheWaitFdAfterTryWait) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_FD, 64));
  int fd = -1;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll_fd, 0);
  epoll_event registration = {};
  registration.events = EPOLLIN;
  registration.data.ptr = cq.get();
  ASSERT_EQ(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &registration), 0);
  Received received;
  std::thread reader([&] {
    uint64_t last = UINT64_MAX;
    fi_cq_data_entry entries[8];
    while (received.count.load() < kCompletions) {
      if (uroce_trywait(&cq->fid) == 0) {
        epoll_event ready;
        const int n = epoll_wait(epoll_fd, &ready, 1, kHangGuardMs);
        if (n == 0) ++received.lost_wakeups;
        if (n == 1) {
          EXPECT_EQ(ready.data.ptr, cq.get());
        }
      }
      ssize_t n;
      while ((n = fi_cq_read(cq.get(), entries, 8)) > 0) {
        received.Add(entries, n, &last);
      }
    }
  });
  ProduceCompletions(cq.get(), kCompletions);
  reader.join();
  close(epoll_fd);
  received.ExpectEveryIdOnce(kCompletions);
}

// FI_WAIT_MUTEX_COND used natively: fi_trywait under the mutex, then
// pthread_cond_timedwait on the condition variable from FI_GETWAIT.
TEST(Concurrency, PthreadCondWaitOnTheWaitObjectAfterTryWait) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_MUTEX_COND, 64));
  fi_mutex_cond mutex_cond;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &mutex_cond), 0);
  Received received;
  std::thread reader([&] {
    uint64_t last = UINT64_MAX;
    fi_cq_data_entry entries[8];
    while (received.count.load() < kCompletions) {
      pthread_mutex_lock(mutex_cond.mutex);
      if (uroce_trywait(&cq->fid) == 0) {
        timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const int64_t nanoseconds =
            until.tv_nsec + int64_t{kHangGuardMs} * 1000000;
        until.tv_sec += static_cast<time_t>(nanoseconds / 1000000000);
        until.tv_nsec = static_cast<long>(nanoseconds % 1000000000);
        if (pthread_cond_timedwait(mutex_cond.cond, mutex_cond.mutex,
                                   &until) == ETIMEDOUT) {
          ++received.lost_wakeups;
        }
      }
      pthread_mutex_unlock(mutex_cond.mutex);
      ssize_t n;
      while ((n = fi_cq_read(cq.get(), entries, 8)) > 0) {
        received.Add(entries, n, &last);
      }
    }
  });
  ProduceCompletions(cq.get(), kCompletions);
  reader.join();
  received.ExpectEveryIdOnce(kCompletions);
}

// Failed completions from the producer thread arrive in order among the
// successful ones, through fi_cq_readerr.
TEST(Concurrency, FailedCompletionsKeepTheirPlace) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC, 32));
  constexpr uint64_t kTotal = 5000;
  std::thread producer([&] {
    for (uint64_t id = 0; id < kTotal;) {
      ibv_wc wc = id % 7 == 3 ? FailedWc(id, IBV_WC_WR_FLUSH_ERR)
                              : SuccessWc(id);
      if (uroce_cq_push_wc(cq.get(), &wc, 1) == 1) {
        ++id;
      } else {
        std::this_thread::yield();
      }
    }
  });
  uint64_t expected = 0;
  int lost_wakeups = 0;
  while (expected < kTotal) {
    fi_cq_data_entry entries[8];
    const ssize_t n = fi_cq_sread(cq.get(), entries, 8, nullptr, kHangGuardMs);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        ASSERT_EQ(entries[i].op_context,
                  reinterpret_cast<void*>(static_cast<uintptr_t>(expected)));
        ASSERT_NE(expected % 7, 3u);
        ++expected;
      }
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err = {};
      ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
      ASSERT_EQ(err.op_context,
                reinterpret_cast<void*>(static_cast<uintptr_t>(expected)));
      ASSERT_EQ(err.err, FI_ECANCELED);
      ++expected;
    } else {
      ++lost_wakeups;
    }
  }
  producer.join();
  EXPECT_EQ(lost_wakeups, 0);
}

class CounterWaiters : public ::testing::TestWithParam<fi_wait_obj> {};

TEST_P(CounterWaiters, WaitersForRisingThresholdsAllReturn) {
  CntrPtr cntr = OpenCntr(CntrAttr(GetParam()));
  std::atomic<int> failures{0};
  std::vector<std::thread> waiters;
  for (uint64_t w = 1; w <= 4; ++w) {
    waiters.emplace_back([&, w] {
      for (uint64_t step = 1; step <= 50; ++step) {
        const uint64_t threshold = step * 100 * w;
        if (threshold > kCompletions) break;
        if (fi_cntr_wait(cntr.get(), threshold, kHangGuardMs) != 0) {
          ++failures;
        }
        if (fi_cntr_read(cntr.get()) < threshold) ++failures;
      }
    });
  }
  for (uint64_t id = 0; id < kCompletions; id += 10) {
    ibv_wc wcs[10];
    for (uint64_t i = 0; i < 10; ++i) wcs[i] = SuccessWc(id + i);
    ASSERT_EQ(uroce_cntr_push_wc(cntr.get(), wcs, 10), 10);
    if (id % 1000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fi_cntr_read(cntr.get()), kCompletions);
}

INSTANTIATE_TEST_SUITE_P(AllBlockingKinds, CounterWaiters,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD));

TEST(Concurrency, EventQueueWritersAgainstABlockedReader) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_FD, 4096));
  constexpr uint64_t kPerWriter = 1000;
  std::vector<std::thread> writers;
  for (uint64_t w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t i = 0; i < kPerWriter; ++i) {
        fi_eq_entry entry = {nullptr, nullptr, w * kPerWriter + i};
        while (fi_eq_write(eq.get(), FI_NOTIFY, &entry, sizeof(entry), 0) < 0) {
          std::this_thread::yield();
        }
      }
    });
  }
  std::vector<uint64_t> last = {UINT64_MAX, UINT64_MAX};
  int lost_wakeups = 0;
  for (uint64_t got = 0; got < 2 * kPerWriter;) {
    uint32_t event;
    fi_eq_entry entry;
    const ssize_t n =
        fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), kHangGuardMs, 0);
    if (n != static_cast<ssize_t>(sizeof(entry))) {
      ++lost_wakeups;
      continue;
    }
    const uint64_t writer = entry.data / kPerWriter;
    ASSERT_LT(writer, 2u);
    // Each writer's events come out in the order it wrote them.
    if (last[writer] != UINT64_MAX) {
      EXPECT_GT(entry.data, last[writer]);
    }
    last[writer] = entry.data;
    ++got;
  }
  for (auto& writer : writers) writer.join();
  EXPECT_EQ(lost_wakeups, 0);
}

}  // namespace
}  // namespace uroce::testing
