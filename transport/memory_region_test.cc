#include "transport/memory_region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "transport/on_demand_memory.h"

namespace uroce::transport {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

TEST(MemoryRegionTest, RemoteAccessInsideRegionSucceeds) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> buf(4096);
  auto keys = table.Register(1, buf.data(), buf.size(), 0x10000, kAll);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 100, 200, IBV_ACCESS_REMOTE_WRITE, &host, 0), MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 100);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000, 4096, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOk);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, reinterpret_cast<uint64_t>(buf.data()) + 4095, 1,
                             IBV_ACCESS_LOCAL_WRITE, &host),
            MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 4095);
}

TEST(MemoryRegionTest, BoundsAreExact) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> buf(4096);
  auto keys = table.Register(1, buf.data(), buf.size(), 0x10000, kAll);
  ASSERT_TRUE(keys.ok());
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 1, 4096, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 - 1, 1, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 4096, 1, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOutOfRange);
  // An enormous length must not wrap around the check.
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 8, ~uint64_t(0), IBV_ACCESS_REMOTE_READ, &host, 0),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 4096, 0, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOk);
}

TEST(MemoryRegionTest, AccessFlagsAndPdAreEnforced) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> buf(64);
  auto keys = table.Register(7, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(keys.ok());
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 7, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host, 0), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 7, 0, 8, IBV_ACCESS_REMOTE_ATOMIC, &host, 0), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 8, 0, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kWrongPd);
}

// ibv_rereg_mr(3): same keys, new PD, range and access; a bad request or a
// stale key changes nothing.
TEST(MemoryRegionTest, ReregisterKeepsTheKeysAndChangesTheRest) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> first(64), second(256);
  auto keys = table.Register(1, first.data(), first.size(), 0x1000, kAll);
  ASSERT_TRUE(keys.ok());
  ASSERT_TRUE(table.Reregister(keys->lkey, 2, second.data(), second.size(), 0x9000, IBV_ACCESS_LOCAL_WRITE).ok());
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 2, 0x9000, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, reinterpret_cast<uint64_t>(second.data()), 8, 0, &host),
            MrCheck::kWrongPd);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 2, reinterpret_cast<uint64_t>(first.data()), 8, 0, &host),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 2, reinterpret_cast<uint64_t>(second.data()) + 248, 8,
                             IBV_ACCESS_LOCAL_WRITE, &host),
            MrCheck::kOk);
  EXPECT_EQ(host, second.data() + 248);
  // Remote write without local write is refused here too, and changes nothing.
  EXPECT_FALSE(table.Reregister(keys->lkey, 2, first.data(), first.size(), 0, IBV_ACCESS_REMOTE_WRITE).ok());
  EXPECT_EQ(table.CheckLocal(keys->lkey, 2, reinterpret_cast<uint64_t>(second.data()), 8, 0, &host), MrCheck::kOk);
  ASSERT_TRUE(table.Deregister(keys->lkey).ok());
  EXPECT_FALSE(table.Reregister(keys->lkey, 2, first.data(), first.size(), 0, kAll).ok()) << "stale key";
}

TEST(MemoryRegionTest, RemoteWriteWithoutLocalWriteIsRefused) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> buf(64);
  auto keys = table.Register(1, buf.data(), buf.size(), 0, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().ToErrno(), EINVAL);
}

TEST(MemoryRegionTest, StaleKeyFailsAfterSlotIsReused) {
  MemoryRegionTable table(4);
  std::vector<uint8_t> a(64), b(64);
  auto first = table.Register(1, a.data(), a.size(), 0, kAll);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(table.Deregister(first->lkey).ok());
  auto second = table.Register(1, b.data(), b.size(), 0, kAll);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(first->rkey, second->rkey);
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(first->rkey, 1, 0, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kBadKey);
  EXPECT_EQ(table.CheckRemote(second->rkey, 1, 0, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOk);
  EXPECT_FALSE(table.Deregister(first->lkey).ok());
}

TEST(MemoryRegionTest, GarbageKeysAreRejected) {
  MemoryRegionTable table(16);
  uint8_t* host = nullptr;
  for (uint32_t key : {0u, 1u, 0xffffffffu, 0x12345678u, 16u << 8}) {
    EXPECT_EQ(table.CheckRemote(key, 0, 0, 0, 0, &host, 0), MrCheck::kBadKey) << key;
  }
}

TEST(MemoryRegionTest, TableFullIsResourceExhausted) {
  MemoryRegionTable table(3);  // slot 0 is never used: 2 usable
  std::vector<uint8_t> buf(8);
  ASSERT_TRUE(table.Register(1, buf.data(), 8, 0, 0).ok());
  ASSERT_TRUE(table.Register(1, buf.data(), 8, 0, 0).ok());
  auto third = table.Register(1, buf.data(), 8, 0, 0);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
}

// ibv_reg_dm_mr(3): a zero-based region is addressed by offset, by its own
// SGEs as by its peers; its host address means nothing to the check.
TEST(MemoryRegionTest, ZeroBasedRegionIsAddressedByOffsetLocallyToo) {
  MemoryRegionTable table(8);
  std::vector<uint8_t> buf(256);
  auto keys = table.Register(1, buf.data() + 64, 128, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, 0, 128, IBV_ACCESS_LOCAL_WRITE, &host), MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 64);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, 120, 8, IBV_ACCESS_LOCAL_WRITE, &host), MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 184);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, 121, 8, IBV_ACCESS_LOCAL_WRITE, &host), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, reinterpret_cast<uint64_t>(buf.data() + 64), 1, IBV_ACCESS_LOCAL_WRITE,
                             &host),
            MrCheck::kOutOfRange)
      << "the host address is not the region's address";
}

// IBTA 10.6.7: a type 2 window grants its access to its range, through the
// QP it was bound through, until it is invalidated; every check is a
// region's check, then its region's.
TEST(MemoryRegionTest, Type2WindowGrantsItsRangeOnItsQpUntilInvalidated) {
  MemoryRegionTable table(16);
  std::vector<uint8_t> buf(4096);
  auto mr = table.Register(1, buf.data(), buf.size(), 0x10000,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_TRUE(mr.ok());
  auto mw = table.AllocateWindow(1, IBV_MW_TYPE_2);
  ASSERT_TRUE(mw.ok()) << mw.status().ToString();
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(*mw, 1, 0x10000, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kBadKey)
      << "unbound";
  uint32_t rkey = 0;
  ASSERT_TRUE(table.BindWindow(*mw, 1, 5, *mw + 1, mr->lkey, 0x10000 + 64, 128, IBV_ACCESS_REMOTE_WRITE, &rkey));
  EXPECT_EQ(rkey >> 8, *mw >> 8) << "the window's index stays";
  EXPECT_EQ(rkey & 0xff, (*mw + 1) & 0xff) << "the binder's key";
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 64, 128, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 64);
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 63, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 64, 129, IBV_ACCESS_REMOTE_WRITE, &host, 5),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 64, 8, IBV_ACCESS_REMOTE_READ, &host, 5), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 64, 8, IBV_ACCESS_REMOTE_WRITE, &host, 6), MrCheck::kWrongPd)
      << "another QP";
  if (rkey != *mw) {
    EXPECT_EQ(table.CheckRemote(*mw, 1, 0x10000 + 64, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kBadKey)
        << "the rkey before the bind";
  }
  EXPECT_EQ(table.CheckLocal(rkey, 1, 0x10000 + 64, 8, 0, &host), MrCheck::kBadKey) << "not an lkey";
  EXPECT_FALSE(table.BindWindow(rkey, 1, 5, rkey + 1, mr->lkey, 0x10000, 8, IBV_ACCESS_REMOTE_WRITE, &rkey))
      << "a bound type 2 window is not bound again (o10-37.2.30)";
  EXPECT_FALSE(table.InvalidateWindow(rkey, 1, 6, /*remote=*/true)) << "not bound through QP 6";
  EXPECT_FALSE(table.InvalidateWindow(rkey ^ 0x80, 1, 5, /*remote=*/true)) << "another key";
  EXPECT_FALSE(table.Deregister(rkey).ok()) << "a window is not a region";
  EXPECT_TRUE(table.InvalidateWindow(rkey, 1, 5, /*remote=*/true));
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000 + 64, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kBadKey);
  EXPECT_FALSE(table.InvalidateWindow(rkey, 1, 5, /*remote=*/false)) << "already free";
  // Bound again, then the window goes.
  ASSERT_TRUE(table.BindWindow(rkey, 1, 5, rkey + 1, mr->lkey, 0x10000, 8, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000, 8, IBV_ACCESS_REMOTE_READ, &host, 5), MrCheck::kOk);
  EXPECT_TRUE(table.DeallocateWindow(rkey).ok());
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x10000, 8, IBV_ACCESS_REMOTE_READ, &host, 5), MrCheck::kBadKey);
  EXPECT_FALSE(table.DeallocateWindow(mr->lkey).ok()) << "a region is not a window";
}

// A window never outlives its region, nor a destroyed QP's QPN.
TEST(MemoryRegionTest, WindowDiesWithItsRegionAndItsQp) {
  MemoryRegionTable table(16);
  std::vector<uint8_t> buf(256);
  const int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
  auto mr = table.Register(1, buf.data(), buf.size(), 0, mr_access);
  ASSERT_TRUE(mr.ok());
  auto mw = table.AllocateWindow(1, IBV_MW_TYPE_2);
  ASSERT_TRUE(mw.ok());
  uint32_t rkey = 0;
  ASSERT_TRUE(table.BindWindow(*mw, 1, 5, *mw, mr->lkey, 0, 256, IBV_ACCESS_REMOTE_WRITE, &rkey));
  uint8_t* host = nullptr;
  ASSERT_EQ(table.CheckRemote(rkey, 1, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kOk);
  ASSERT_TRUE(table.Deregister(mr->lkey).ok());
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kBadKey);
  // A new region in the same slot is not the window's region either.
  auto again = table.Register(1, buf.data(), buf.size(), 0, mr_access);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kBadKey);

  auto mw2 = table.AllocateWindow(1, IBV_MW_TYPE_2);
  ASSERT_TRUE(mw2.ok());
  ASSERT_TRUE(table.BindWindow(*mw2, 1, 9, *mw2, again->lkey, 0, 256, IBV_ACCESS_REMOTE_WRITE, &rkey));
  table.InvalidateWindowsOfQp(9);
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host, 9), MrCheck::kBadKey);
}

// What a bind refuses (IBTA 10.6.7.2): a region without MW_BIND, remote
// write over a region without local write (C10-74), a range outside the
// region (C10-75), another PD (C10-72), a type 2 bind to nothing.
TEST(MemoryRegionTest, BindRefusesWhatIbtaRefuses) {
  MemoryRegionTable table(16);
  std::vector<uint8_t> buf(256);
  auto plain = table.Register(1, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE);
  auto read_only = table.Register(1, buf.data(), buf.size(), 0, IBV_ACCESS_MW_BIND);
  auto good = table.Register(1, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  auto mw = table.AllocateWindow(1, IBV_MW_TYPE_2);
  ASSERT_TRUE(plain.ok() && read_only.ok() && good.ok() && mw.ok());
  uint32_t rkey = 0;
  EXPECT_FALSE(table.BindWindow(*mw, 1, 5, *mw, plain->lkey, 0, 8, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_FALSE(table.BindWindow(*mw, 1, 5, *mw, read_only->lkey, 0, 8, IBV_ACCESS_REMOTE_WRITE, &rkey));
  EXPECT_FALSE(table.BindWindow(*mw, 1, 5, *mw, good->lkey, 250, 8, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_FALSE(table.BindWindow(*mw, 2, 5, *mw, good->lkey, 0, 8, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_FALSE(table.BindWindow(*mw, 1, 5, *mw, good->lkey, 0, 0, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_FALSE(table.BindWindow(*mw, 1, 5, *mw, good->lkey, 0, 8, IBV_ACCESS_ZERO_BASED, &rkey));
  EXPECT_FALSE(table.BindWindow(plain->lkey, 1, 5, plain->lkey, good->lkey, 0, 8, IBV_ACCESS_REMOTE_READ, &rkey))
      << "a region is not a window";
  EXPECT_TRUE(table.BindWindow(*mw, 1, 5, *mw, read_only->lkey, 0, 8, IBV_ACCESS_REMOTE_READ, &rkey));
}

// Type 1: bound in its PD (any QP of it), bound again at will, unbound by a
// zero-length bind, never invalidated by LOCAL_INV or SEND with invalidate.
TEST(MemoryRegionTest, Type1WindowServesItsPdAndUnbindsWithZeroLength) {
  MemoryRegionTable table(16);
  std::vector<uint8_t> buf(256);
  auto mr = table.Register(1, buf.data(), buf.size(), 0x1000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  auto mw = table.AllocateWindow(1, IBV_MW_TYPE_1);
  ASSERT_TRUE(mr.ok() && mw.ok());
  EXPECT_FALSE(table.AllocateWindow(1, 3).ok());
  uint32_t rkey = 0;
  ASSERT_TRUE(table.BindWindow(*mw, 1, 5, *mw + 1, mr->lkey, 0x1000, 256, IBV_ACCESS_REMOTE_WRITE, &rkey));
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, &host, 77), MrCheck::kOk) << "any QP";
  EXPECT_EQ(table.CheckRemote(rkey, 2, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, &host, 5), MrCheck::kWrongPd);
  EXPECT_FALSE(table.InvalidateWindow(rkey, 1, 5, /*remote=*/false));
  ASSERT_TRUE(table.BindWindow(rkey, 1, 5, rkey + 1, mr->lkey, 0x1000, 16, IBV_ACCESS_REMOTE_READ, &rkey));
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_READ, &host, 5), MrCheck::kOk);
  ASSERT_TRUE(table.BindWindow(rkey, 1, 5, rkey + 1, mr->lkey, 0x1000, 0, 0, &rkey));
  EXPECT_EQ(table.CheckRemote(rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_READ, &host, 5), MrCheck::kBadKey);
}

// An implicit on-demand region (ibv_reg_mr(pd, NULL, SIZE_MAX,
// ON_DEMAND|...)): the whole address space at iova 0, granted as
// kOkOnDemand (never kOk: a caller that only knows kOk refuses it), within
// its PD and access; ranges that wrap are refused. It is not re-registered
// and no window binds to it; zero-based or with an iova it is refused.
TEST(MemoryRegionTest, ImplicitOnDemandRegionGrantsTheAddressSpaceOnDemand) {
  MemoryRegionTable table(64);
  ASSERT_TRUE(OnDemandMemoryAvailable());
  auto keys = table.Register(1, nullptr, UINT64_MAX, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                                              IBV_ACCESS_ON_DEMAND);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x1234, 100, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kOkOnDemand);
  EXPECT_EQ(host, reinterpret_cast<uint8_t*>(0x1234));
  EXPECT_EQ(table.CheckLocal(keys->lkey, 1, 0, 8, IBV_ACCESS_LOCAL_WRITE, &host), MrCheck::kOkOnDemand);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, UINT64_MAX - 7, 8, IBV_ACCESS_REMOTE_READ, &host, 0),
            MrCheck::kOkOnDemand);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, UINT64_MAX - 7, 9, IBV_ACCESS_REMOTE_READ, &host, 0),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x1000, UINT64_MAX, IBV_ACCESS_REMOTE_READ, &host, 0),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, &host, 0), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 2, 0x1000, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kWrongPd);
  EXPECT_FALSE(table.Reregister(keys->lkey, 1, nullptr, UINT64_MAX, 0, IBV_ACCESS_ON_DEMAND).ok());
  std::vector<uint8_t> buf(64);
  EXPECT_FALSE(table.Reregister(keys->lkey, 1, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE).ok());
  auto explicit_keys = table.Register(1, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(explicit_keys.ok());
  EXPECT_FALSE(table.Reregister(explicit_keys->lkey, 1, nullptr, UINT64_MAX, 0, IBV_ACCESS_ON_DEMAND).ok())
      << "an explicit region does not become implicit";
  EXPECT_FALSE(table.Register(1, nullptr, UINT64_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND).ok());
  EXPECT_FALSE(table.Register(1, nullptr, UINT64_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED).ok());
  EXPECT_FALSE(table.Register(1, nullptr, UINT64_MAX, 0x1000, IBV_ACCESS_ON_DEMAND).ok());
  EXPECT_FALSE(table.Register(1, nullptr, UINT64_MAX, 0, IBV_ACCESS_LOCAL_WRITE).ok()) << "not ON_DEMAND";
  EXPECT_TRUE(table.Deregister(keys->lkey).ok());
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x1234, 8, IBV_ACCESS_REMOTE_READ, &host, 0), MrCheck::kBadKey);
}

// The fault-free copies: mapped memory is copied, an unmapped or (for
// writes and atomics) read-only page is an error, never a signal.
TEST(OnDemandMemoryTest, UnmappedOrReadOnlyPagesFailWithoutAFault) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* base = static_cast<uint8_t*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  std::memset(base, 0x11, 3 * page);
  ASSERT_EQ(munmap(base + page, page), 0);
  ASSERT_EQ(mprotect(base + 2 * page, page, PROT_READ), 0);
  uint8_t* const hole = base + page;
  uint8_t* const read_only = base + 2 * page;

  uint8_t out[16] = {};
  const uint8_t in[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_TRUE(OnDemandRead(out, base, 16));
  EXPECT_EQ(out[15], 0x11);
  EXPECT_TRUE(OnDemandWrite(base, in, 16));
  EXPECT_EQ(base[15], 16);
  EXPECT_TRUE(OnDemandRead(out, read_only, 16));
  EXPECT_FALSE(OnDemandRead(out, hole, 16));
  EXPECT_FALSE(OnDemandRead(out, hole - 8, 16)) << "half mapped";
  EXPECT_FALSE(OnDemandRead(out, nullptr, 16));
  EXPECT_FALSE(OnDemandWrite(hole, in, 16));
  EXPECT_FALSE(OnDemandWrite(read_only, in, 16));
  EXPECT_EQ(read_only[0], 0x11);

  uint64_t original = 0;
  auto* word = reinterpret_cast<uint64_t*>(base + 64);
  *word = 7;
  EXPECT_TRUE(OnDemandAtomic(word, /*compare_swap=*/false, 0, 3, &original));
  EXPECT_EQ(original, 7u);
  EXPECT_EQ(*word, 10u);
  EXPECT_TRUE(OnDemandAtomic(word, /*compare_swap=*/true, 10, 99, &original));
  EXPECT_EQ(original, 10u);
  EXPECT_EQ(*word, 99u);
  EXPECT_TRUE(OnDemandAtomic(word, /*compare_swap=*/true, 10, 5, &original));
  EXPECT_EQ(original, 99u) << "no swap on a mismatch";
  EXPECT_EQ(*word, 99u);
  EXPECT_FALSE(OnDemandAtomic(reinterpret_cast<uint64_t*>(hole), false, 0, 1, &original));
  EXPECT_FALSE(OnDemandAtomic(reinterpret_cast<uint64_t*>(read_only), false, 0, 1, &original));
  EXPECT_FALSE(OnDemandAtomic(reinterpret_cast<uint64_t*>(read_only), true, 0x1111111111111111ull, 1, &original));
  EXPECT_FALSE(OnDemandAtomic(nullptr, false, 0, 1, &original));
  EXPECT_EQ(read_only[0], 0x11);
  munmap(base, 3 * page);
}

}  // namespace
}  // namespace uroce::transport
