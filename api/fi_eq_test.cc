// fi_eq(3), rule by rule, through libfabric's inline calls on EQs from
// uroce_eq_open.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "api/fi_test_util.h"
#include "api/fi_wait_fd_test_util.h"
#include "api/uroce_cq.h"

namespace uroce::testing {
namespace {

fi_eq_entry Entry(fid_t fid, void* context, uint64_t data) {
  fi_eq_entry entry;
  entry.fid = fid;
  entry.context = context;
  entry.data = data;
  return entry;
}

TEST(FiEqOpen, InvalidAttributesAreRefused) {
  fid_eq* eq = nullptr;
  fi_eq_attr attr = EqAttr();
  EXPECT_EQ(uroce_eq_open(nullptr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(uroce_eq_open(&attr, nullptr, nullptr), -FI_EINVAL);
  attr.flags = FI_READ;
  EXPECT_EQ(uroce_eq_open(&attr, &eq, nullptr), -FI_EINVAL);
  attr = EqAttr(FI_WAIT_SET);
  EXPECT_EQ(uroce_eq_open(&attr, &eq, nullptr), -FI_EINVAL);
  attr = EqAttr(static_cast<fi_wait_obj>(31));
  EXPECT_EQ(uroce_eq_open(&attr, &eq, nullptr), -FI_EINVAL);
  attr = EqAttr(FI_WAIT_NONE, 0, FI_WRITE | FI_AFFINITY);
  ASSERT_EQ(uroce_eq_open(&attr, &eq, nullptr), 0);
  EXPECT_EQ(eq->fid.fclass, static_cast<size_t>(FI_CLASS_EQ));
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST(FiEqRead, EmptyQueueReturnsEagain) {
  EqPtr eq = OpenEq(EqAttr());
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            -FI_EAGAIN);
}

// "If the FI_WRITE flag is not set, then the application may not invoke
// fi_eq_write."
TEST(FiEqWrite, NeedsTheWriteFlag) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_NONE, 0, 0));
  fi_eq_entry entry = Entry(nullptr, nullptr, 1);
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, &entry, sizeof(entry), 0),
            -FI_ENOSYS);
  // The provider itself may always queue events.
  EXPECT_EQ(uroce_eq_write_event(eq.get(), FI_NOTIFY, &entry, sizeof(entry)),
            static_cast<ssize_t>(sizeof(entry)));
}

TEST(FiEqWrite, InvalidArgumentsAreRefused) {
  EqPtr eq = OpenEq(EqAttr());
  fi_eq_entry entry = Entry(nullptr, nullptr, 1);
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, nullptr, sizeof(entry), 0),
            -FI_EINVAL);
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, &entry, 0, 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, &entry, sizeof(entry), FI_PEEK),
            -FI_EBADFLAGS);
  EXPECT_EQ(uroce_eq_write_event(nullptr, FI_NOTIFY, &entry, sizeof(entry)),
            -FI_EINVAL);
  EXPECT_EQ(uroce_eq_write_error(eq.get(), nullptr), -FI_EINVAL);
}

// "On success, returns the number of bytes read/written"; each read returns
// at most one event, starting with its fi_eq_entry-style header.
TEST(FiEqRead, AsynchronousControlEventsComeBackAsWritten) {
  EqPtr eq = OpenEq(EqAttr());
  fid_t mr_fid = reinterpret_cast<fid_t>(0x1000);
  fid_t av_fid = reinterpret_cast<fid_t>(0x2000);
  fi_eq_entry mr = Entry(mr_fid, reinterpret_cast<void*>(1), 0);
  fi_eq_entry av = Entry(av_fid, reinterpret_cast<void*>(2), 16);
  ASSERT_EQ(fi_eq_write(eq.get(), FI_MR_COMPLETE, &mr, sizeof(mr), 0),
            static_cast<ssize_t>(sizeof(mr)));
  ASSERT_EQ(fi_eq_write(eq.get(), FI_AV_COMPLETE, &av, sizeof(av), 0),
            static_cast<ssize_t>(sizeof(av)));
  uint32_t event = 0;
  fi_eq_entry entry;
  ASSERT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(entry.fid, mr_fid);
  EXPECT_EQ(entry.context, reinterpret_cast<void*>(1));
  ASSERT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_AV_COMPLETE));
  EXPECT_EQ(entry.data, 16u);
}

// "The FI_PEEK flag may be used to indicate that event data should be read
// from the EQ without being consumed."
TEST(FiEqRead, PeekDoesNotConsume) {
  EqPtr eq = OpenEq(EqAttr());
  fi_eq_entry written = Entry(nullptr, nullptr, 99);
  ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0), 0);
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), FI_PEEK),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), FI_PEEK),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(entry.data, 99u);
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            -FI_EAGAIN);
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), FI_SEND),
            -FI_EBADFLAGS);
  EXPECT_EQ(fi_eq_read(eq.get(), nullptr, &entry, sizeof(entry), 0),
            -FI_EINVAL);
}

// Connection events use fi_eq_cm_entry; "Any application data exchanged as
// part of the connection request is placed beyond the fi_eq_cm_entry
// structure ... limited to the buffer space provided by the application".
TEST(FiEqRead, ConnectionEventsCarryDataUpToTheBufferSize) {
  EqPtr eq = OpenEq(EqAttr());
  constexpr size_t kHeader = sizeof(fi_eq_cm_entry);
  alignas(fi_eq_cm_entry) uint8_t written[kHeader + 32];
  fi_eq_cm_entry header;
  header.fid = reinterpret_cast<fid_t>(0x3000);
  header.info = nullptr;
  std::memcpy(written, &header, kHeader);
  for (size_t i = 0; i < 32; ++i) written[kHeader + i] = static_cast<uint8_t>(i);
  for (uint32_t kind : {FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN}) {
    ASSERT_EQ(uroce_eq_write_event(eq.get(), kind, written, sizeof(written)),
              static_cast<ssize_t>(sizeof(written)));
  }
  alignas(fi_eq_cm_entry) uint8_t small[kHeader + 8];
  uint32_t event = 0;
  ASSERT_EQ(fi_eq_read(eq.get(), &event, small, sizeof(small), 0),
            static_cast<ssize_t>(sizeof(small)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  fi_eq_cm_entry read_header;
  std::memcpy(&read_header, small, kHeader);
  EXPECT_EQ(read_header.fid, header.fid);
  EXPECT_EQ(small[kHeader + 7], 7);
  // Not even the fi_eq_cm_entry fits: too small, and nothing is consumed.
  uint8_t tiny[4];
  EXPECT_EQ(fi_eq_read(eq.get(), &event, tiny, sizeof(tiny), 0),
            -FI_ETOOSMALL);
  alignas(fi_eq_cm_entry) uint8_t full[sizeof(written)];
  ASSERT_EQ(fi_eq_read(eq.get(), &event, full, sizeof(full), 0),
            static_cast<ssize_t>(sizeof(full)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));
  EXPECT_EQ(full[kHeader + 31], 31);
  ASSERT_GT(fi_eq_read(eq.get(), &event, full, sizeof(full), 0), 0);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
}

TEST(FiEqRead, OtherEventsAreNeverCut) {
  EqPtr eq = OpenEq(EqAttr());
  fi_eq_entry written = Entry(nullptr, nullptr, 5);
  ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0), 0);
  uint32_t event;
  uint8_t small[sizeof(fi_eq_entry) - 1];
  EXPECT_EQ(fi_eq_read(eq.get(), &event, small, sizeof(small), 0),
            -FI_ETOOSMALL);
}

// Errors are "placed into a temporary error queue. Attempting to read from an
// EQ while an item is in the error queue results in an FI_EAVAIL failure."
TEST(FiEqReadErr, ErrorsWaitBehindEavailInOrder) {
  EqPtr eq = OpenEq(EqAttr());
  fi_eq_entry before = Entry(nullptr, nullptr, 1);
  fi_eq_entry after = Entry(nullptr, nullptr, 2);
  uint8_t detail[3] = {7, 8, 9};
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.fid = reinterpret_cast<fid_t>(0x4000);
  error.context = reinterpret_cast<void*>(0x44);
  error.data = 3;
  error.err = FI_ECONNREFUSED;
  error.prov_errno = 111;
  error.err_data = detail;
  error.err_data_size = sizeof(detail);
  ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &before, sizeof(before), 0), 0);
  ASSERT_EQ(uroce_eq_write_error(eq.get(), &error),
            static_cast<ssize_t>(sizeof(error)));
  detail[0] = 0;  // the EQ keeps its own copy
  ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &after, sizeof(after), 0), 0);

  uint32_t event;
  fi_eq_entry entry;
  fi_eq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  EXPECT_EQ(fi_eq_readerr(eq.get(), &err, 0), -FI_EAGAIN);  // not on top yet
  ASSERT_GT(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0), 0);
  EXPECT_EQ(entry.data, 1u);
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            -FI_EAVAIL);
  ASSERT_EQ(fi_eq_readerr(eq.get(), &err, 0),
            static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.fid, error.fid);
  EXPECT_EQ(err.context, error.context);
  EXPECT_EQ(err.data, 3u);
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  EXPECT_EQ(err.prov_errno, 111);
  // err_data_size 0 on input: a provider buffer.
  ASSERT_EQ(err.err_data_size, 3u);
  EXPECT_EQ(static_cast<uint8_t*>(err.err_data)[0], 7);
  ASSERT_GT(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0), 0);
  EXPECT_EQ(entry.data, 2u);
}

TEST(FiEqReadErr, ErrDataIsCopiedIntoTheApplicationsBuffer) {
  EqPtr eq = OpenEq(EqAttr());
  uint8_t detail[6] = {1, 2, 3, 4, 5, 6};
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.err = FI_EIO;
  error.err_data = detail;
  error.err_data_size = sizeof(detail);
  ASSERT_GT(uroce_eq_write_error(eq.get(), &error), 0);
  uint8_t buffer[4] = {};
  fi_eq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  err.err_data = buffer;
  err.err_data_size = sizeof(buffer);
  ASSERT_EQ(fi_eq_readerr(eq.get(), &err, 0),
            static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.err_data, static_cast<void*>(buffer));
  EXPECT_EQ(err.err_data_size, 4u);
  EXPECT_EQ(buffer[3], 4);
  EXPECT_EQ(fi_eq_readerr(eq.get(), &err, 0), -FI_EAGAIN);
}

// NOTES: "Write operations against an overrun EQ will fail with
// -FI_EOVERRUN. Read operations will continue to return any valid ...
// events ... After all valid events have been retrieved, any attempt to read
// the EQ will result in it returning an FI_EOVERRUN error event."
TEST(FiEqOverrun, ValidEventsFirstThenOverrun) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_UNSPEC, 2));
  fi_eq_entry written = Entry(nullptr, nullptr, 0);
  for (uint64_t i = 0; i < 2; ++i) {
    written.data = i;
    ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0),
              0);
  }
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0),
            -FI_EOVERRUN);
  uint32_t event;
  fi_eq_entry entry;
  ASSERT_GT(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0), 0);
  EXPECT_EQ(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0),
            -FI_EOVERRUN);
  ASSERT_GT(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0), 0);
  EXPECT_EQ(entry.data, 1u);
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0),
            -FI_EOVERRUN);
  EXPECT_EQ(fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), -1, 0),
            -FI_EOVERRUN);
}

TEST(FiEqSRead, RefusedWithoutAWaitObject) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_NONE));
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), 0, 0),
            -FI_ENOSYS);
}

class FiEqWaitObjects : public ::testing::TestWithParam<fi_wait_obj> {};

TEST_P(FiEqWaitObjects, TimeoutExpiresWithEagain) {
  EqPtr eq = OpenEq(EqAttr(GetParam()));
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), 5, 0),
            -FI_EAGAIN);
}

TEST_P(FiEqWaitObjects, AWriterWakesABlockedReader) {
  EqPtr eq = OpenEq(EqAttr(GetParam()));
  ssize_t result = 0;
  uint32_t event = 0;
  fi_eq_entry entry;
  std::thread reader([&] {
    result = fi_eq_sread(eq.get(), &event, &entry, sizeof(entry),
                         kHangGuardMs, 0);
  });
  fi_eq_entry written = Entry(nullptr, nullptr, 77);
  ASSERT_GT(fi_eq_write(eq.get(), FI_MR_COMPLETE, &written, sizeof(written), 0),
            0);
  reader.join();
  ASSERT_EQ(result, static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(entry.data, 77u);
}

TEST_P(FiEqWaitObjects, AnErrorOnTopEndsTheWaitWithEavail) {
  EqPtr eq = OpenEq(EqAttr(GetParam()));
  fi_eq_err_entry error;
  std::memset(&error, 0, sizeof(error));
  error.err = FI_ECONNRESET;
  ASSERT_GT(uroce_eq_write_error(eq.get(), &error), 0);
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), -1, 0),
            -FI_EAVAIL);
}

INSTANTIATE_TEST_SUITE_P(AllBlockingKinds, FiEqWaitObjects,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD));

TEST(FiEqControl, GetWaitGivesAnFdThatTryWaitArms) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_FD));
  int fd = -1;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
  ASSERT_EQ(uroce_trywait(&eq->fid), 0);
  fi_eq_entry written = Entry(nullptr, nullptr, 1);
  ASSERT_GT(fi_eq_write(eq.get(), FI_NOTIFY, &written, sizeof(written), 0), 0);
  pollfd pfd = {fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, kHangGuardMs), 1);
  EXPECT_EQ(uroce_trywait(&eq->fid), -FI_EAGAIN);
}

TEST(FiEqControl, GetWaitObjAndUnsupportedCommands) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_MUTEX_COND));
  fi_wait_obj kind = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_MUTEX_COND);
  fi_mutex_cond mutex_cond = {nullptr, nullptr};
  EXPECT_EQ(fi_control(&eq->fid, FI_GETWAIT, &mutex_cond), 0);
  EXPECT_NE(mutex_cond.mutex, nullptr);
  EXPECT_EQ(fi_control(&eq->fid, FI_ENABLE, nullptr), -FI_ENOSYS);
  EXPECT_EQ(eq->fid.ops->bind(&eq->fid, &eq->fid, 0), -FI_ENOSYS);
  EXPECT_EQ(eq->ops->size, sizeof(fi_ops_eq));
}

TEST(FiEqStrError, ConvertsProviderErrorsToText) {
  EqPtr eq = OpenEq(EqAttr());
  const char* refused =
      fi_eq_strerror(eq.get(), ECONNREFUSED, nullptr, nullptr, 0);
  ASSERT_NE(refused, nullptr);
  EXPECT_FALSE(std::string(refused).empty());
  const char* overrun =
      fi_eq_strerror(eq.get(), FI_EOVERRUN, nullptr, nullptr, 0);
  EXPECT_NE(std::string(overrun).find("overrun"), std::string::npos);
  char buf[6];
  EXPECT_EQ(fi_eq_strerror(eq.get(), FI_EOVERRUN, nullptr, buf, sizeof(buf)),
            buf);
  EXPECT_EQ(std::strlen(buf), 5u);
}

// "The EQ must not be bound to any other objects prior to being closed,
// otherwise the call will return -FI_EBUSY."
TEST(FiEqClose, BusyWhileBound) {
  fid_eq* eq = nullptr;
  fi_eq_attr attr = EqAttr(FI_WAIT_FD);
  ASSERT_EQ(uroce_eq_open(&attr, &eq, nullptr), 0);
  fi_eq_entry written = Entry(nullptr, nullptr, 1);
  ASSERT_GT(fi_eq_write(eq, FI_NOTIFY, &written, sizeof(written), 0), 0);
  ASSERT_EQ(uroce_fid_bind_ep(&eq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  ASSERT_EQ(uroce_fid_unbind_ep(&eq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);  // "Any events which remain ... are lost."
}

// fi_eq(3) "FI_WAIT_UNSPEC": an fd, so that ofi_rxm can add the core EQ to
// its epoll set (FI_GETWAIT) and see FI_CONNREQ while it blocks in
// fi_cq_sread. FI_WAIT_MUTEX_COND stays what it is when asked for.
TEST(FiEqControl, UnspecWaitIsAnFdThatEpollSeesAnEventOn) {
  EqPtr eq = OpenEq(EqAttr(FI_WAIT_UNSPEC));
  const int ep = EpollOnWaitFd(&eq->fid);
  ASSERT_GE(ep, 0);
  epoll_event out{};
  ASSERT_EQ(uroce_trywait(&eq->fid), 0);
  EXPECT_EQ(epoll_wait(ep, &out, 1, 0), 0);
  fi_eq_entry entry = Entry(&eq->fid, nullptr, 42);
  std::thread producer([&] {
    EXPECT_EQ(uroce_eq_write_event(eq.get(), FI_NOTIFY, &entry, sizeof(entry)),
              static_cast<ssize_t>(sizeof(entry)));
  });
  EXPECT_EQ(epoll_wait(ep, &out, 1, kHangGuardMs), 1);
  EXPECT_TRUE(out.events & EPOLLIN);
  producer.join();
  EXPECT_EQ(uroce_trywait(&eq->fid), -FI_EAGAIN);
  uint32_t event = 0;
  fi_eq_entry read{};
  EXPECT_EQ(fi_eq_read(eq.get(), &event, &read, sizeof(read), 0),
            static_cast<ssize_t>(sizeof(read)));
  EXPECT_EQ(read.data, 42u);
  close(ep);
  EqPtr mutex_cond = OpenEq(EqAttr(FI_WAIT_MUTEX_COND));
  fi_wait_obj reported = FI_WAIT_NONE;
  ASSERT_EQ(fi_control(&mutex_cond->fid, FI_GETWAITOBJ, &reported), 0);
  EXPECT_EQ(reported, FI_WAIT_MUTEX_COND);
}

}  // namespace
}  // namespace uroce::testing
