// fi_cq(3), rule by rule, through libfabric's own inline calls on CQs from
// uroce_cq_open, fed by uroce_cq_push_wc as the engine feeds them.
#include <poll.h>
#include <pthread.h>
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

ssize_t Push(fid_cq* cq, const std::vector<ibv_wc>& wcs) {
  return uroce_cq_push_wc(cq, wcs.data(), wcs.size());
}

// --- fi_cq_open -----------------------------------------------------------

TEST(FiCqOpen, NullArgumentsAreInvalid) {
  fi_cq_attr attr = CqAttr();
  fid_cq* cq = nullptr;
  EXPECT_EQ(uroce_cq_open(nullptr, &cq, nullptr), -FI_EINVAL);
  EXPECT_EQ(uroce_cq_open(&attr, nullptr, nullptr), -FI_EINVAL);
}

TEST(FiCqOpen, ContextIsTheFidContext) {
  int marker;
  CqPtr cq = OpenCq(CqAttr(), &marker);
  ASSERT_TRUE(cq);
  EXPECT_EQ(cq->fid.context, &marker);
  EXPECT_EQ(cq->fid.fclass, static_cast<size_t>(FI_CLASS_CQ));
}

TEST(FiCqOpen, SizeZeroLetsTheProviderChooseADefault) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE, 0));
  ASSERT_TRUE(cq);
  std::vector<ibv_wc> wcs(2000, SuccessWc(1));
  EXPECT_EQ(Push(cq.get(), wcs), 1024);  // the documented default
}

TEST(FiCqOpen, SizeIsAMinimum) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE, 100));
  ASSERT_TRUE(cq);
  std::vector<ibv_wc> wcs(100, SuccessWc(1));
  EXPECT_EQ(Push(cq.get(), wcs), 100);
}

TEST(FiCqOpen, SizeAboveTheMaximumIsInvalid) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE, size_t{1} << 40);
  fid_cq* cq = nullptr;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
}

TEST(FiCqOpen, FlagsOtherThanAffinityAreInvalid) {
  fi_cq_attr attr = CqAttr();
  attr.flags = FI_AFFINITY;
  attr.signaling_vector = 1;  // a hint, ignored
  fid_cq* cq = nullptr;
  ASSERT_EQ(uroce_cq_open(&attr, &cq, nullptr), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  attr.flags = FI_SEND;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
}

TEST(FiCqOpen, UnknownFormatIsInvalid) {
  fi_cq_attr attr = CqAttr(static_cast<fi_cq_format>(42));
  fid_cq* cq = nullptr;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
}

TEST(FiCqOpen, FormatUnspecIsTheContextFormat) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_UNSPEC));
  ASSERT_TRUE(cq);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(7), SuccessWc(8)}), 2);
  // Two fi_cq_entry fit exactly; a canary after them must stay untouched.
  struct {
    fi_cq_entry entries[2];
    uint64_t canary;
  } out;
  out.canary = 0xfeedfacecafebeefULL;
  ASSERT_EQ(fi_cq_read(cq.get(), out.entries, 2), 2);
  EXPECT_EQ(out.entries[0].op_context, reinterpret_cast<void*>(7));
  EXPECT_EQ(out.entries[1].op_context, reinterpret_cast<void*>(8));
  EXPECT_EQ(out.canary, 0xfeedfacecafebeefULL);
}

TEST(FiCqOpen, WaitSetWithoutAWaitSetIsInvalid) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_SET);
  fid_cq* cq = nullptr;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
  fid_wait wait_set;
  std::memset(&wait_set, 0, sizeof(wait_set));
  attr.wait_set = &wait_set;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EOPNOTSUPP);
}

TEST(FiCqOpen, UnknownWaitObjectIsInvalid) {
  fid_cq* cq = nullptr;
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_POLLFD);
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
  attr.wait_obj = static_cast<fi_wait_obj>(77);
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
}

TEST(FiCqOpen, WaitCondIsIgnoredWithWaitNone) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE);
  attr.wait_cond = static_cast<fi_cq_wait_cond>(9);
  fid_cq* cq = nullptr;
  ASSERT_EQ(uroce_cq_open(&attr, &cq, nullptr), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  attr.wait_obj = FI_WAIT_UNSPEC;
  EXPECT_EQ(uroce_cq_open(&attr, &cq, nullptr), -FI_EINVAL);
}

// --- formats and completion fields ---------------------------------------

TEST(FiCqFormat, ContextGivesOnlyTheContext) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_CONTEXT));
  ASSERT_EQ(Push(cq.get(), {SuccessWc(0x1234)}), 1);
  fi_cq_entry entry;
  ASSERT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(0x1234));
}

TEST(FiCqFormat, MsgGivesFlagsAndReceivedLength) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_MSG));
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1, IBV_WC_RECV, 300),
                            SuccessWc(2, IBV_WC_SEND, 300)}),
            2);
  fi_cq_msg_entry entries[2];
  ASSERT_EQ(fi_cq_read(cq.get(), entries, 2), 2);
  EXPECT_EQ(entries[0].flags, FI_RECV | FI_MSG);
  EXPECT_EQ(entries[0].len, 300u);
  EXPECT_EQ(entries[1].flags, FI_SEND | FI_MSG);
  // "len ... only applies to completed receive operations"
  EXPECT_EQ(entries[1].len, 0u);
}

TEST(FiCqFormat, DataGivesRemoteCqDataInHostByteOrder) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA));
  ASSERT_EQ(Push(cq.get(), {ReceiveWithImmediate(5, 64, 0x12345678)}), 1);
  fi_cq_data_entry entry;
  ASSERT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  EXPECT_EQ(entry.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(entry.data, 0x12345678u);
  EXPECT_EQ(entry.len, 64u);
  EXPECT_EQ(entry.buf, nullptr);
}

TEST(FiCqFormat, TaggedHasAZeroTag) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_TAGGED));
  ibv_wc write_imm = SuccessWc(9, IBV_WC_RECV_RDMA_WITH_IMM, 4096);
  write_imm.wc_flags = IBV_WC_WITH_IMM;
  write_imm.imm_data = htonl(0xabcdef01);
  ASSERT_EQ(Push(cq.get(), {write_imm}), 1);
  fi_cq_tagged_entry entry;
  std::memset(&entry, 0xff, sizeof(entry));
  ASSERT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(9));
  EXPECT_EQ(entry.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(entry.data, 0xabcdef01u);
  EXPECT_EQ(entry.len, 4096u);
  EXPECT_EQ(entry.tag, 0u);
  EXPECT_EQ(entry.buf, nullptr);
}

TEST(FiCqFormat, OperationFlagsFollowTheOpcode) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_MSG));
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1, IBV_WC_RDMA_WRITE),
                            SuccessWc(2, IBV_WC_RDMA_READ),
                            SuccessWc(3, IBV_WC_COMP_SWAP),
                            SuccessWc(4, IBV_WC_FETCH_ADD)}),
            4);
  fi_cq_msg_entry entries[4];
  ASSERT_EQ(fi_cq_read(cq.get(), entries, 4), 4);
  EXPECT_EQ(entries[0].flags, FI_RMA | FI_WRITE);
  EXPECT_EQ(entries[1].flags, FI_RMA | FI_READ);
  EXPECT_EQ(entries[2].flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(entries[3].flags, FI_ATOMIC | FI_READ);
}

// --- fi_cq_read -------------------------------------------------------------

TEST(FiCqRead, EmptyQueueReturnsEagain) {
  CqPtr cq = OpenCq(CqAttr());
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_read(cq.get(), &entry, 1), -FI_EAGAIN);
}

TEST(FiCqRead, ReturnsAtMostCountInCompletionOrder) {
  CqPtr cq = OpenCq(CqAttr());
  std::vector<ibv_wc> wcs;
  for (uint64_t i = 0; i < 10; ++i) wcs.push_back(SuccessWc(i));
  ASSERT_EQ(Push(cq.get(), wcs), 10);
  fi_cq_data_entry entries[4];
  uint64_t next = 0;
  for (ssize_t expected : {4, 4, 2}) {
    ASSERT_EQ(fi_cq_read(cq.get(), entries, 4), expected);
    for (ssize_t i = 0; i < expected; ++i) {
      EXPECT_EQ(entries[i].op_context, reinterpret_cast<void*>(next++));
    }
  }
  EXPECT_EQ(fi_cq_read(cq.get(), entries, 4), -FI_EAGAIN);
}

TEST(FiCqRead, CountZeroConsumesNothing) {
  CqPtr cq = OpenCq(CqAttr());
  EXPECT_EQ(fi_cq_read(cq.get(), nullptr, 0), -FI_EAGAIN);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  EXPECT_EQ(fi_cq_read(cq.get(), nullptr, 0), 0);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
}

TEST(FiCqRead, NullBufferIsInvalid) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  EXPECT_EQ(fi_cq_read(cq.get(), nullptr, 1), -FI_EINVAL);
}

// "Operations which fail are reported 'out of band'" and fi_cq_read returns
// -FI_EAVAIL "if the topmost completion is for a failed transfer": the
// successful completions before the failed one come first.
TEST(FiCqRead, FailedCompletionIsReportedOutOfBandInOrder) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1), SuccessWc(2),
                            FailedWc(3, IBV_WC_REM_ACCESS_ERR),
                            SuccessWc(4)}),
            4);
  fi_cq_data_entry entries[8];
  ASSERT_EQ(fi_cq_read(cq.get(), entries, 8), 2);
  EXPECT_EQ(entries[1].op_context, reinterpret_cast<void*>(2));
  EXPECT_EQ(fi_cq_read(cq.get(), entries, 8), -FI_EAVAIL);
  EXPECT_EQ(fi_cq_read(cq.get(), entries, 8), -FI_EAVAIL);  // still on top
  EXPECT_EQ(fi_cq_read(cq.get(), nullptr, 0), -FI_EAVAIL);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
  EXPECT_EQ(err.op_context, reinterpret_cast<void*>(3));
  ASSERT_EQ(fi_cq_read(cq.get(), entries, 8), 1);
  EXPECT_EQ(entries[0].op_context, reinterpret_cast<void*>(4));
}

// --- fi_cq_readfrom -------------------------------------------------------

TEST(FiCqReadFrom, UnknownSourceIsAddrNotAvail) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1, IBV_WC_RECV, 8), SuccessWc(2)}), 2);
  fi_cq_data_entry entries[2];
  fi_addr_t sources[2] = {0, 0};
  ASSERT_EQ(fi_cq_readfrom(cq.get(), entries, 2, sources), 2);
  EXPECT_EQ(sources[0], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(sources[1], FI_ADDR_NOTAVAIL);
}

TEST(FiCqReadFrom, BehavesLikeReadWithoutSourceArray) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_readfrom(cq.get(), &entry, 1, nullptr), 1);
  EXPECT_EQ(fi_cq_readfrom(cq.get(), &entry, 1, nullptr), -FI_EAGAIN);
}

// --- fi_cq_readerr ----------------------------------------------------------

TEST(FiCqReadErr, WithoutErrorOnTopReturnsEagain) {
  CqPtr cq = OpenCq(CqAttr());
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  EXPECT_EQ(fi_cq_readerr(cq.get(), &err, 0), -FI_EAGAIN);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1), FailedWc(2, IBV_WC_GENERAL_ERR)}), 2);
  EXPECT_EQ(fi_cq_readerr(cq.get(), &err, 0), -FI_EAGAIN);
}

TEST(FiCqReadErr, InvalidArguments) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {FailedWc(2, IBV_WC_GENERAL_ERR)}), 1);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  EXPECT_EQ(fi_cq_readerr(cq.get(), nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_cq_readerr(cq.get(), &err, FI_PEEK), -FI_EBADFLAGS);
  EXPECT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);  // still there
}

TEST(FiCqReadErr, FieldsCarryThePositiveErrnoAndTheVerbsStatus) {
  CqPtr cq = OpenCq(CqAttr());
  ibv_wc wc = FailedWc(0x77, IBV_WC_RETRY_EXC_ERR, IBV_WC_RDMA_WRITE);
  ASSERT_EQ(Push(cq.get(), {wc}), 1);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
  EXPECT_EQ(err.op_context, reinterpret_cast<void*>(0x77));
  EXPECT_EQ(err.flags, FI_RMA | FI_WRITE);
  EXPECT_EQ(err.err, FI_ETIMEDOUT);
  EXPECT_GT(err.err, 0);
  EXPECT_EQ(err.prov_errno, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(err.olen, 0u);
}

TEST(FiCqReadErr, TruncationReportsOverflowLength) {
  CqPtr cq = OpenCq(CqAttr());
  ibv_wc wc = FailedWc(1, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV);
  wc.byte_len = 100;   // placed
  wc.vendor_err = 28;  // discarded (uroce's engine convention)
  ASSERT_EQ(Push(cq.get(), {wc}), 1);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.len, 100u);
  EXPECT_EQ(err.olen, 28u);
  EXPECT_EQ(err.flags, FI_RECV | FI_MSG);
}

TEST(FiCqReadErr, ErrDataSizeZeroGivesAProviderBufferValidUntilTheNextRead) {
  CqPtr cq = OpenCq(CqAttr());
  ibv_wc first = FailedWc(1, IBV_WC_REM_OP_ERR);
  first.vendor_err = 0xaaaa;
  ASSERT_EQ(Push(cq.get(), {first, SuccessWc(2)}), 2);
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  char ignored[4];
  err.err_data = ignored;  // "ignored on input" when err_data_size is 0
  err.err_data_size = 0;
  ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
  ASSERT_NE(err.err_data, nullptr);
  EXPECT_NE(err.err_data, static_cast<void*>(ignored));
  ASSERT_EQ(err.err_data_size, sizeof(ibv_wc));
  ibv_wc copy;
  std::memcpy(&copy, err.err_data, sizeof(copy));
  EXPECT_EQ(copy.vendor_err, 0xaaaau);
  // Still valid after a successful read.
  fi_cq_data_entry entry;
  ASSERT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  std::memcpy(&copy, err.err_data, sizeof(copy));
  EXPECT_EQ(copy.wr_id, 1u);
}

TEST(FiCqReadErr, ErrDataIsCopiedIntoTheApplicationsBuffer) {
  CqPtr cq = OpenCq(CqAttr());
  ASSERT_EQ(Push(cq.get(), {FailedWc(0x0102030405060708ULL,
                                     IBV_WC_REM_OP_ERR)}),
            1);
  uint8_t buffer[8] = {};
  fi_cq_err_entry err;
  std::memset(&err, 0, sizeof(err));
  err.err_data = buffer;
  err.err_data_size = 4;  // smaller than what the provider has
  ASSERT_EQ(fi_cq_readerr(cq.get(), &err, 0), 1);
  EXPECT_EQ(err.err_data, static_cast<void*>(buffer));
  EXPECT_EQ(err.err_data_size, 4u);  // "the number of bytes copied"
  uint64_t wr_id = 0x0102030405060708ULL;
  EXPECT_EQ(std::memcmp(buffer, &wr_id, 4), 0);
  EXPECT_EQ(buffer[4], 0);  // nothing past the size given
}

// --- fi_cq_strerror ---------------------------------------------------------

TEST(FiCqStrError, ConvertsProviderErrorsToText) {
  CqPtr cq = OpenCq(CqAttr());
  const char* text = fi_cq_strerror(cq.get(), IBV_WC_RNR_RETRY_EXC_ERR,
                                    nullptr, nullptr, 0);
  ASSERT_NE(text, nullptr);
  EXPECT_NE(std::string(text).find("RNR"), std::string::npos);
  char buf[8];
  const char* into = fi_cq_strerror(cq.get(), IBV_WC_RNR_RETRY_EXC_ERR,
                                    nullptr, buf, sizeof(buf));
  EXPECT_EQ(into, buf);
  EXPECT_EQ(std::strlen(buf), sizeof(buf) - 1);  // truncated, terminated
  EXPECT_NE(fi_cq_strerror(cq.get(), 12345, nullptr, nullptr, 0), nullptr);
}

// --- fi_cq_sread / fi_cq_sreadfrom / fi_cq_signal ------------------------

TEST(FiCqSRead, RefusedWithoutAWaitObject) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE));
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_sread(cq.get(), &entry, 1, nullptr, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_cq_sreadfrom(cq.get(), &entry, 1, nullptr, nullptr, 0),
            -FI_ENOSYS);
  EXPECT_EQ(fi_cq_signal(cq.get()), -FI_ENOSYS);
}

class FiCqWaitObjects : public ::testing::TestWithParam<fi_wait_obj> {};

TEST_P(FiCqWaitObjects, TimeoutExpiresWithEagain) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam()));
  ASSERT_TRUE(cq);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_sread(cq.get(), &entry, 1, nullptr, 5), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_sread(cq.get(), &entry, 1, nullptr, 0), -FI_EAGAIN);
}

TEST_P(FiCqWaitObjects, ReturnsAtOnceWhenCompletionsAreQueued) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam()));
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1), SuccessWc(2)}), 2);
  fi_cq_data_entry entries[4];
  fi_addr_t sources[4];
  EXPECT_EQ(fi_cq_sreadfrom(cq.get(), entries, 4, sources, nullptr, -1), 2);
  EXPECT_EQ(sources[1], FI_ADDR_NOTAVAIL);
}

TEST_P(FiCqWaitObjects, FailedCompletionOnTopReturnsEavail) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam()));
  ASSERT_EQ(Push(cq.get(), {FailedWc(1, IBV_WC_WR_FLUSH_ERR)}), 1);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_sread(cq.get(), &entry, 1, nullptr, -1), -FI_EAVAIL);
}

TEST_P(FiCqWaitObjects, SignalWakesABlockedReaderWithEagain) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam()));
  ssize_t result = 0;
  std::thread reader([&] {
    fi_cq_data_entry entry;
    result = fi_cq_sread(cq.get(), &entry, 1, nullptr, kHangGuardMs);
  });
  // Whether the signal lands before or during the wait, the reader returns:
  // a signal that finds nobody waiting is kept for the next wait.
  EXPECT_EQ(fi_cq_signal(cq.get()), 0);
  reader.join();
  EXPECT_EQ(result, -FI_EAGAIN);
  // The signal was used up: the next wait times out normally.
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_sread(cq.get(), &entry, 1, nullptr, 1), -FI_EAGAIN);
}

TEST_P(FiCqWaitObjects, ProducerWakesABlockedReader) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, GetParam()));
  ssize_t result = 0;
  fi_cq_data_entry entry;
  std::thread reader([&] {
    result = fi_cq_sread(cq.get(), &entry, 1, nullptr, kHangGuardMs);
  });
  ASSERT_EQ(Push(cq.get(), {SuccessWc(42)}), 1);
  reader.join();
  ASSERT_EQ(result, 1);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(42));
}

INSTANTIATE_TEST_SUITE_P(AllBlockingKinds, FiCqWaitObjects,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD));

// wait_cond FI_CQ_COND_THRESHOLD: "the number of entries that are to be
// queued ... before the wait is satisfied"; cond holds the number itself.
TEST(FiCqSRead, ThresholdWaitsForThatManyEntries) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  CqPtr cq = OpenCq(attr);
  ASSERT_TRUE(cq);
  ssize_t result = 0;
  fi_cq_data_entry entries[8];
  std::thread reader([&] {
    result = fi_cq_sread(cq.get(), entries, 8, reinterpret_cast<void*>(3),
                         kHangGuardMs);
  });
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(Push(cq.get(), {SuccessWc(i)}), 1);
    std::this_thread::yield();
  }
  reader.join();
  ASSERT_EQ(result, 3);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(entries[i].op_context, reinterpret_cast<void*>(i));
  }
}

TEST(FiCqSRead, ThresholdAboveCountIsCappedAtCount) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  CqPtr cq = OpenCq(attr);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1), SuccessWc(2)}), 2);
  fi_cq_data_entry entries[2];
  EXPECT_EQ(fi_cq_sread(cq.get(), entries, 2, reinterpret_cast<void*>(100),
                        kHangGuardMs),
            2);
}

TEST(FiCqSRead, TimeoutWithSomeEntriesReturnsThem) {
  fi_cq_attr attr = CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC);
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  CqPtr cq = OpenCq(attr);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  fi_cq_data_entry entries[4];
  EXPECT_EQ(fi_cq_sread(cq.get(), entries, 4, reinterpret_cast<void*>(4), 5),
            1);
}

// --- fi_control ---------------------------------------------------------------

TEST(FiCqControl, GetWaitGivesAPollableFd) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_FD));
  int fd = -1;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  pollfd pfd = {fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
  // fi_poll(3): fi_trywait first, then block on the fd.
  ASSERT_EQ(uroce_trywait(&cq->fid), 0);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  EXPECT_EQ(poll(&pfd, 1, kHangGuardMs), 1);
  EXPECT_TRUE(pfd.revents & POLLIN);
  // Something to read: fi_trywait says so, and empties the fd.
  EXPECT_EQ(uroce_trywait(&cq->fid), -FI_EAGAIN);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  EXPECT_EQ(uroce_trywait(&cq->fid), 0);
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
}

// fi_cq(3) "FI_WAIT_UNSPEC": the provider's choice must be one libfabric's
// utility code can wait on. ofi_rxm adds the core CQ's wait object to an
// epoll set through FI_GETWAIT and refuses anything but an fd; a mutex/cond
// as FI_WAIT_UNSPEC's object would leave its RDM server blind. The fd comes
// through FI_GETWAIT, fi_trywait arms it, epoll sees it readable when a
// completion arrives.
TEST(FiCqControl, UnspecWaitIsAnFdThatEpollSeesACompletionOn) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_UNSPEC));
  const int ep = EpollOnWaitFd(&cq->fid);
  ASSERT_GE(ep, 0);
  epoll_event out{};
  ASSERT_EQ(uroce_trywait(&cq->fid), 0);
  EXPECT_EQ(epoll_wait(ep, &out, 1, 0), 0);
  std::thread producer([&] { EXPECT_EQ(Push(cq.get(), {SuccessWc(7)}), 1); });
  EXPECT_EQ(epoll_wait(ep, &out, 1, kHangGuardMs), 1);
  EXPECT_TRUE(out.events & EPOLLIN);
  producer.join();
  EXPECT_EQ(uroce_trywait(&cq->fid), -FI_EAGAIN);
  fi_cq_data_entry entry;
  EXPECT_EQ(fi_cq_read(cq.get(), &entry, 1), 1);
  close(ep);
}

TEST(FiCqControl, FdIsNotSignalledWithoutTryWait) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_FD));
  int fd = -1;
  ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  ASSERT_EQ(Push(cq.get(), {SuccessWc(1)}), 1);
  pollfd pfd = {fd, POLLIN, 0};
  // Nobody announced a wait, so the producer made no system call.
  EXPECT_EQ(poll(&pfd, 1, 0), 0);
}

TEST(FiCqControl, GetWaitGivesTheMutexAndCond) {
  for (fi_wait_obj kind : {FI_WAIT_MUTEX_COND}) {
    CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, kind));
    fi_mutex_cond mutex_cond = {nullptr, nullptr};
    ASSERT_EQ(fi_control(&cq->fid, FI_GETWAIT, &mutex_cond), 0);
    EXPECT_NE(mutex_cond.mutex, nullptr);
    EXPECT_NE(mutex_cond.cond, nullptr);
    fi_wait_obj reported = FI_WAIT_NONE;
    ASSERT_EQ(fi_control(&cq->fid, FI_GETWAITOBJ, &reported), 0);
    EXPECT_EQ(reported, FI_WAIT_MUTEX_COND);
  }
}

TEST(FiCqControl, NoNativeWaitObjectGivesEnodata) {
  for (fi_wait_obj kind : {FI_WAIT_NONE, FI_WAIT_YIELD}) {
    CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, kind));
    int fd = -1;
    EXPECT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
    fi_wait_obj reported = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_control(&cq->fid, FI_GETWAITOBJ, &reported), 0);
    EXPECT_EQ(reported, kind);
    EXPECT_EQ(uroce_trywait(&cq->fid), -FI_EINVAL);
  }
}

TEST(FiCqControl, OtherCommandsAndOperationsAreEnosys) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_FD));
  uint64_t flags = 0;
  EXPECT_EQ(fi_control(&cq->fid, FI_GETOPSFLAG, &flags), -FI_ENOSYS);
  EXPECT_EQ(fi_control(&cq->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
  ASSERT_NE(cq->fid.ops->bind, nullptr);
  EXPECT_EQ(cq->fid.ops->bind(&cq->fid, &cq->fid, 0), -FI_ENOSYS);
  void* ops = nullptr;
  EXPECT_EQ(fi_open_ops(&cq->fid, "x", 0, &ops, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_set_ops(&cq->fid, "x", 0, nullptr, nullptr), -FI_ENOSYS);
  char buf[16];
  EXPECT_EQ(cq->fid.ops->tostr(&cq->fid, buf, sizeof(buf)), -FI_ENOSYS);
  EXPECT_EQ(cq->fid.ops->size, sizeof(fi_ops));
  EXPECT_EQ(cq->ops->size, sizeof(fi_ops_cq));
}

// --- fi_close -------------------------------------------------------------------

TEST(FiCqClose, BusyWhileBoundToAnEndpoint) {
  fid_cq* cq = nullptr;
  fi_cq_attr attr = CqAttr();
  ASSERT_EQ(uroce_cq_open(&attr, &cq, nullptr), 0);
  ASSERT_EQ(uroce_fid_bind_ep(&cq->fid), 0);
  ASSERT_EQ(uroce_fid_bind_ep(&cq->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), -FI_EBUSY);
  ASSERT_EQ(uroce_fid_unbind_ep(&cq->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), -FI_EBUSY);
  ASSERT_EQ(uroce_fid_unbind_ep(&cq->fid), 0);
  EXPECT_EQ(uroce_fid_unbind_ep(&cq->fid), -FI_EINVAL);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST(FiCqClose, CompletionsStillQueuedAreLost) {
  fid_cq* cq = nullptr;
  fi_cq_attr attr = CqAttr();
  ASSERT_EQ(uroce_cq_open(&attr, &cq, nullptr), 0);
  ibv_wc wcs[3] = {SuccessWc(1), FailedWc(2, IBV_WC_GENERAL_ERR),
                   SuccessWc(3)};
  ASSERT_EQ(uroce_cq_push_wc(cq, wcs, 3), 3);
  EXPECT_EQ(fi_close(&cq->fid), 0);  // ASan checks that nothing leaks
}

// --- overrun: back-pressure ---------------------------------------------

TEST(FiCqOverrun, FullQueueTakesFewerAndLosesNothing) {
  CqPtr cq = OpenCq(CqAttr(FI_CQ_FORMAT_DATA, FI_WAIT_NONE, 8));
  std::vector<ibv_wc> wcs;
  for (uint64_t i = 0; i < 20; ++i) wcs.push_back(SuccessWc(i));
  size_t pushed = 0;
  uint64_t expected = 0;
  while (expected < 20) {
    const ssize_t taken =
        uroce_cq_push_wc(cq.get(), wcs.data() + pushed, wcs.size() - pushed);
    ASSERT_GE(taken, 0);
    pushed += static_cast<size_t>(taken);
    fi_cq_data_entry entries[3];
    const ssize_t n = fi_cq_read(cq.get(), entries, 3);
    ASSERT_NE(n, -FI_EOVERRUN);
    for (ssize_t i = 0; i < n; ++i) {
      EXPECT_EQ(entries[i].op_context, reinterpret_cast<void*>(expected++));
    }
  }
  EXPECT_EQ(pushed, 20u);
}

// --- the push interface ------------------------------------------------------

TEST(UroceCqPushWc, InvalidArgumentsAreRefused) {
  CqPtr cq = OpenCq(CqAttr());
  ibv_wc wc = SuccessWc(1);
  EXPECT_EQ(uroce_cq_push_wc(nullptr, &wc, 1), -FI_EINVAL);
  EXPECT_EQ(uroce_cq_push_wc(cq.get(), nullptr, 1), -FI_EINVAL);
  EXPECT_EQ(uroce_cq_push_wc(cq.get(), nullptr, 0), 0);
  // A fid that is not a uroce CQ.
  CntrPtr cntr = OpenCntr(CntrAttr());
  EXPECT_EQ(uroce_cq_push_wc(reinterpret_cast<fid_cq*>(cntr.get()), &wc, 1),
            -FI_EINVAL);
  EXPECT_EQ(uroce_fid_bind_ep(nullptr), -FI_EINVAL);
  EXPECT_EQ(uroce_trywait(nullptr), -FI_EINVAL);
}

}  // namespace
}  // namespace uroce::testing
