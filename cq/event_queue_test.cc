#include "cq/event_queue.h"

#include <rdma/fi_errno.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

namespace uroce::cq {
namespace {

std::unique_ptr<EventQueue> Open(fi_wait_obj wait_obj, size_t size = 0) {
  fi_eq_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = size;
  attr.wait_obj = wait_obj;
  auto opened = EventQueue::Open(attr, nullptr);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(*opened) : nullptr;
}

TEST(EventQueue, ProviderWritesWithoutTheWriteFlag) {
  auto eq = Open(FI_WAIT_NONE);
  fi_eq_entry entry = {nullptr, nullptr, 5};
  EXPECT_EQ(eq->Write(FI_NOTIFY, &entry, sizeof(entry), 0), -FI_ENOSYS);
  EXPECT_EQ(eq->WriteEvent(FI_NOTIFY, &entry, sizeof(entry)),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(eq->WriteEvent(FI_NOTIFY, &entry, kMaxEqEventBytes + 1),
            -FI_EINVAL);
}

TEST(EventQueue, DropEventsForAClosedEndpoint) {
  auto eq = Open(FI_WAIT_NONE);
  fid closed{}, open{};
  fi_eq_cm_entry cm{};
  cm.fid = &closed;
  ASSERT_GT(eq->WriteEvent(FI_SHUTDOWN, &cm, sizeof(cm)), 0);
  cm.fid = &open;
  ASSERT_GT(eq->WriteEvent(FI_CONNECTED, &cm, sizeof(cm)), 0);
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.fid = &closed;
  error.err = FI_ECONNREFUSED;
  ASSERT_GT(eq->WriteError(error), 0);
  EXPECT_EQ(eq->DropEventsFor(&closed), 2u);
  uint32_t event = 0;
  fi_eq_cm_entry read{};
  ASSERT_EQ(eq->Read(&event, &read, sizeof(read), 0), static_cast<ssize_t>(sizeof(read)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));
  EXPECT_EQ(read.fid, &open);
  EXPECT_EQ(eq->Read(&event, &read, sizeof(read), 0), -FI_EAGAIN);
  EXPECT_EQ(eq->DropEventsFor(&closed), 0u);
}

TEST(EventQueue, ErrorEventWithoutErrDataGivesANullBuffer) {
  auto eq = Open(FI_WAIT_NONE);
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.err = FI_ETIMEDOUT;
  ASSERT_GT(eq->WriteError(error), 0);
  fi_eq_err_entry read;
  std::memset(&read, 0, sizeof(read));
  ASSERT_EQ(eq->ReadErr(&read, FI_PEEK), static_cast<ssize_t>(sizeof(read)));
  EXPECT_EQ(read.err, FI_ETIMEDOUT);
  EXPECT_EQ(read.err_data, nullptr);
  EXPECT_EQ(read.err_data_size, 0u);
  ASSERT_EQ(eq->ReadErr(&read, 0), static_cast<ssize_t>(sizeof(read)));
  EXPECT_EQ(eq->ReadErr(&read, 0), -FI_EAGAIN);
  error.err_data_size = 4;  // with no buffer
  EXPECT_EQ(eq->WriteError(error), -FI_EINVAL);
}

TEST(EventQueue, PeekedErrorKeepsItsData) {
  auto eq = Open(FI_WAIT_NONE);
  uint8_t detail[2] = {5, 6};
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.err_data = detail;
  error.err_data_size = 2;
  ASSERT_GT(eq->WriteError(error), 0);
  for (uint64_t flags : {uint64_t{FI_PEEK}, uint64_t{0}}) {
    fi_eq_err_entry read;
    std::memset(&read, 0, sizeof(read));
    ASSERT_GT(eq->ReadErr(&read, flags), 0);
    ASSERT_EQ(read.err_data_size, 2u);
    EXPECT_EQ(static_cast<uint8_t*>(read.err_data)[1], 6);
  }
}

TEST(EventQueue, SignalWakesABlockedReader) {
  auto eq = Open(FI_WAIT_UNSPEC);
  ssize_t result = 0;
  std::thread reader([&] {
    uint32_t event;
    fi_eq_entry entry;
    result = eq->SRead(&event, &entry, sizeof(entry), 30000, 0);
  });
  eq->Signal();
  reader.join();
  EXPECT_EQ(result, -FI_EAGAIN);
}

TEST(EventQueue, FromFidKnowsOnlyUroceEqs) {
  auto eq = Open(FI_WAIT_NONE);
  EXPECT_EQ(EventQueue::FromFid(eq->fid()), eq.get());
  EXPECT_EQ(EventQueue::FromFid(static_cast<fid_eq*>(nullptr)), nullptr);
  fid_eq foreign;
  std::memset(&foreign, 0, sizeof(foreign));
  foreign.fid.fclass = FI_CLASS_EQ;
  EXPECT_EQ(EventQueue::FromFid(&foreign), nullptr);
}

}  // namespace
}  // namespace uroce::cq
