#include "transport/memory_region.h"

#include <gtest/gtest.h>

#include <vector>

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
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 100, 200, IBV_ACCESS_REMOTE_WRITE, &host), MrCheck::kOk);
  EXPECT_EQ(host, buf.data() + 100);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000, 4096, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOk);
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
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 1, 4096, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 - 1, 1, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 4096, 1, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOutOfRange);
  // An enormous length must not wrap around the check.
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 8, ~uint64_t(0), IBV_ACCESS_REMOTE_READ, &host),
            MrCheck::kOutOfRange);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 1, 0x10000 + 4096, 0, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOk);
}

TEST(MemoryRegionTest, AccessFlagsAndPdAreEnforced) {
  MemoryRegionTable table(64);
  std::vector<uint8_t> buf(64);
  auto keys = table.Register(7, buf.data(), buf.size(), 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(keys.ok());
  uint8_t* host = nullptr;
  EXPECT_EQ(table.CheckRemote(keys->rkey, 7, 0, 8, IBV_ACCESS_REMOTE_WRITE, &host), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 7, 0, 8, IBV_ACCESS_REMOTE_ATOMIC, &host), MrCheck::kNoAccess);
  EXPECT_EQ(table.CheckRemote(keys->rkey, 8, 0, 8, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kWrongPd);
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
  EXPECT_EQ(table.CheckRemote(keys->rkey, 2, 0x9000, 8, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kNoAccess);
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
  EXPECT_EQ(table.CheckRemote(first->rkey, 1, 0, 8, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kBadKey);
  EXPECT_EQ(table.CheckRemote(second->rkey, 1, 0, 8, IBV_ACCESS_REMOTE_READ, &host), MrCheck::kOk);
  EXPECT_FALSE(table.Deregister(first->lkey).ok());
}

TEST(MemoryRegionTest, GarbageKeysAreRejected) {
  MemoryRegionTable table(16);
  uint8_t* host = nullptr;
  for (uint32_t key : {0u, 1u, 0xffffffffu, 0x12345678u, 16u << 8}) {
    EXPECT_EQ(table.CheckRemote(key, 0, 0, 0, 0, &host), MrCheck::kBadKey) << key;
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

}  // namespace
}  // namespace uroce::transport
