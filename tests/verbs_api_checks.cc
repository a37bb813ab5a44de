// Verbs calls a program makes, checked through Debian's libibverbs API
// against uroce's libibverbs.so.1 (run by verbs_api_test.sh under `uroce
// exec` over configs/ring.ini: two devices on a net_ring pair): what UCX
// and rdma-core's own tests rely on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "transport/verbs_wr.h"

namespace {

class VerbsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_GE(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    cq_ = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
  }
  void TearDown() override {
    if (cq_ != nullptr) ibv_destroy_cq(cq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    if (list_ != nullptr) ibv_free_device_list(list_);
  }
  ibv_qp_init_attr_ex RcAttr() const {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = cq_;
    a.recv_cq = cq_;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd_;
    return a;
  }

  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
};

// ibv_query_device_ex(3): phys_port_cnt_ex says what phys_port_cnt says.
TEST_F(VerbsApiTest, ExtendedDeviceQueryCountsThePort) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_EQ(attr.orig_attr.phys_port_cnt, 1);
  EXPECT_EQ(attr.phys_port_cnt_ex, 1u);
  // What is advertised is offered: SRQ resize (SrqResizeTest below).
  EXPECT_NE(attr.orig_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0u);
}

// ibv_create_qp_ex(3) with IBV_QP_INIT_ATTR_CREATE_FLAGS and no flag (UCX's
// way) makes a QP; a flag uroce does not offer is refused.
TEST_F(VerbsApiTest, CreateFlagsWithNoFlagMakeAQp) {
  ibv_qp_init_attr_ex a = RcAttr();
  a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
  a.create_flags = 0;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(qp, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// Two RC QPs of one device joined through the device's own first GID
// (loopback), and what the tests below post on them.
class RcLoopbackTest : public VerbsApiTest {
 protected:
  void SetUp() override {
    VerbsApiTest::SetUp();
    if (HasFatalFailure()) return;
    test_cq_ = MakeTestCq();
    ASSERT_NE(test_cq_, nullptr) << "errno " << errno;
    ibv_qp_init_attr_ex a = RcAttr();
    a.send_cq = a.recv_cq = test_cq_;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    if (send_ops_flags_ != 0) {
      a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.send_ops_flags = send_ops_flags_;
    }
    qp_[0] = ibv_create_qp_ex(ctx_, &a);
    qp_[1] = ibv_create_qp_ex(ctx_, &a);
    ASSERT_NE(qp_[0], nullptr);
    ASSERT_NE(qp_[1], nullptr);
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
    for (int i = 0; i < 2; ++i) Connect(qp_[i], qp_[1 - i]->qp_num, gid);
    buf_.assign(2 * kBytes, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr_, nullptr);
  }
  void TearDown() override {
    for (ibv_qp* qp : qp_) {
      if (qp != nullptr) ibv_destroy_qp(qp);
    }
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (test_cq_ != nullptr && test_cq_ != cq_) ibv_destroy_cq(test_cq_);
    VerbsApiTest::TearDown();
  }
  // The CQ both QPs complete on (the extended CQ test makes its own).
  virtual ibv_cq* MakeTestCq() { return cq_; }

  void Connect(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& gid) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = remote_qpn;
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.dgid = gid;
    attr.ah_attr.grh.sgid_index = 0;
    attr.ah_attr.grh.hop_limit = 64;
    ASSERT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0)
        << "errno " << errno;
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }
  // A signaled RDMA WRITE with immediate of `len` bytes from the first half
  // of the buffer to the second, through `rkey`, and the receive it uses.
  void PostWriteWithImm(uint64_t wr_id, uint32_t len, uint32_t rkey, uint32_t imm) {
    ibv_recv_wr rwr{};
    rwr.wr_id = wr_id + 1000;
    ibv_recv_wr* bad_recv = nullptr;
    ASSERT_EQ(ibv_post_recv(qp_[1], &rwr, &bad_recv), 0);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), len, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + kBytes);
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  }
  // Polls `cq` until `n` completions came or `timeout` passed.
  std::vector<ibv_wc> Wait(ibv_cq* cq, size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::vector<ibv_wc> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[4];
      const int k = ibv_poll_cq(cq, 4, wc);
      for (int i = 0; i < k; ++i) got.push_back(wc[i]);
    }
    return got;
  }

  static constexpr uint32_t kBytes = 4096;
  uint64_t send_ops_flags_ = 0;  // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS when not 0
  ibv_cq* test_cq_ = nullptr;
  ibv_qp* qp_[2] = {nullptr, nullptr};
  std::vector<uint8_t> buf_;
  ibv_mr* mr_ = nullptr;
};

// ibv_create_cq_ex(3): start_poll / next_poll / end_poll and the read_*
// calls of IBV_WC_STANDARD_FLAGS give what ibv_poll_cq would; ENOENT when
// empty; EOPNOTSUPP for what is not offered, EINVAL for a bad size.
class ExtendedCqTest : public RcLoopbackTest {
 protected:
  ibv_cq* MakeTestCq() override {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 32;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    cq_ex_ = ibv_create_cq_ex(ctx_, &attr);
    return cq_ex_ != nullptr ? ibv_cq_ex_to_cq(cq_ex_) : nullptr;
  }
  ibv_cq_ex* cq_ex_ = nullptr;
};

TEST_F(ExtendedCqTest, PollsTheStandardFieldsOneByOne) {
  ibv_poll_cq_attr poll_attr{};
  EXPECT_EQ(ibv_start_poll(cq_ex_, &poll_attr), ENOENT) << "nothing completed yet";
  PostWriteWithImm(7, 100, mr_->rkey, 0xabcd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int rc = ENOENT;
  while (rc == ENOENT && std::chrono::steady_clock::now() < deadline) rc = ibv_start_poll(cq_ex_, &poll_attr);
  ASSERT_EQ(rc, 0);
  bool saw_send = false, saw_recv = false;
  for (int taken = 0; taken < 2;) {
    EXPECT_EQ(cq_ex_->status, IBV_WC_SUCCESS);
    if (cq_ex_->wr_id == 7) {
      saw_send = true;
      EXPECT_EQ(ibv_wc_read_opcode(cq_ex_), IBV_WC_RDMA_WRITE);
      EXPECT_EQ(ibv_wc_read_qp_num(cq_ex_), qp_[0]->qp_num);
    } else {
      saw_recv = true;
      EXPECT_EQ(cq_ex_->wr_id, 1007u);
      EXPECT_EQ(ibv_wc_read_opcode(cq_ex_), IBV_WC_RECV_RDMA_WITH_IMM);
      EXPECT_EQ(ibv_wc_read_byte_len(cq_ex_), 100u);
      EXPECT_EQ(ntohl(ibv_wc_read_imm_data(cq_ex_)), 0xabcdu);
      EXPECT_TRUE(ibv_wc_read_wc_flags(cq_ex_) & IBV_WC_WITH_IMM);
      EXPECT_EQ(ibv_wc_read_qp_num(cq_ex_), qp_[1]->qp_num);
    }
    if (++taken == 2) break;
    do {
      rc = ibv_next_poll(cq_ex_);
    } while (rc == ENOENT && std::chrono::steady_clock::now() < deadline);
    ASSERT_EQ(rc, 0);
  }
  ibv_end_poll(cq_ex_);
  EXPECT_TRUE(saw_send && saw_recv);
  EXPECT_EQ(ibv_start_poll(cq_ex_, &poll_attr), ENOENT);
}

TEST_F(VerbsApiTest, ExtendedCqRefusesWhatIsNotOffered) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 8;
  attr.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  attr.wc_flags = 0;
  attr.cqe = (1u << 22) + 1;  // above max_cqe
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.cqe = 8;
  attr.comp_vector = static_cast<uint32_t>(ctx_->num_comp_vectors);
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ibv_resize_cq(3): grows and shrinks keeping the completions waiting, in
// order; refuses (EINVAL, unchanged) a size below what is waiting.
TEST_F(RcLoopbackTest, ResizeCqKeepsWhatIsWaiting) {
  ASSERT_EQ(ibv_resize_cq(cq_, 64), 0);
  EXPECT_GE(cq_->cqe, 64);
  for (uint64_t i = 0; i < 3; ++i) PostWriteWithImm(i, 8, mr_->rkey, 1);
  // Six completions (three writes, three receives) arrive; none is polled.
  // Loopback completes within a few polls; 200 ms of them is plenty.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until) {
    ibv_wc none;
    (void)ibv_poll_cq(cq_, 0, &none);  // progress without taking anything
  }
  EXPECT_EQ(ibv_resize_cq(cq_, 2), EINVAL) << "six completions wait";
  EXPECT_GE(cq_->cqe, 64) << "a refused resize changes nothing";
  ASSERT_EQ(ibv_resize_cq(cq_, 8), 0);
  EXPECT_GE(cq_->cqe, 8);
  EXPECT_LT(cq_->cqe, 64);
  auto wcs = Wait(cq_, 6);
  ASSERT_EQ(wcs.size(), 6u);
  std::vector<uint64_t> sends;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RDMA_WRITE) sends.push_back(wc.wr_id);
  }
  EXPECT_EQ(sends, (std::vector<uint64_t>{0, 1, 2})) << "kept in order";
  EXPECT_EQ(ibv_resize_cq(cq_, 0), EINVAL);
}

// IBTA 1.5 ATOMIC WRITE through both post interfaces: IBV_WR_ATOMIC_WRITE
// in ibv_post_send(3) (the 8 bytes from an SGE) and ibv_wr_atomic_write(3)
// on a QP created with IBV_QP_EX_WITH_ATOMIC_WRITE (the 8 bytes taken at the
// call). Each lands at its aligned address and completes as
// IBV_WC_ATOMIC_WRITE; anything but 8 bytes is refused at post time.
class AtomicWriteTest : public RcLoopbackTest {
 protected:
  AtomicWriteTest() { send_ops_flags_ = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE; }
};

TEST_F(AtomicWriteTest, BothPostInterfacesStoreEightBytes) {
  uint8_t* local = buf_.data();
  uint8_t* remote = buf_.data() + kBytes;
  const uint8_t first[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  std::memcpy(local, first, 8);
  ibv_sge sge{reinterpret_cast<uintptr_t>(local), 8, mr_->lkey};
  ibv_send_wr wr = uroce::transport::SignaledSendWr(1, IBV_WR_ATOMIC_WRITE, &sge);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote + 8);
  wr.wr.rdma.rkey = mr_->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wc = Wait(cq_, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(0, std::memcmp(remote + 8, first, 8));
  EXPECT_EQ(remote[7], 0);
  EXPECT_EQ(remote[16], 0);

  sge.length = 16;  // IBTA 1.5: exactly 8 bytes
  EXPECT_EQ(ibv_post_send(qp_[0], &wr, &bad), EINVAL);

  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp_[0]);
  ASSERT_NE(qpx, nullptr);
  uint64_t second = 0x0123456789ABCDEFull;
  ibv_wr_start(qpx);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(qpx, mr_->rkey, reinterpret_cast<uintptr_t>(remote + 24), &second);
  second = 0;  // taken at the call
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  wc = Wait(cq_, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(wc[0].wr_id, 2u);
  uint64_t landed = 0;
  std::memcpy(&landed, remote + 24, 8);
  EXPECT_EQ(landed, 0x0123456789ABCDEFull);
}

// The send operations are checked against the QP type: a UD QP takes no
// ATOMIC WRITE (an RC operation).
TEST_F(VerbsApiTest, AtomicWriteIsAnRcOperation) {
  ibv_qp_init_attr_ex a = RcAttr();
  a.qp_type = IBV_QPT_UD;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qkey = 0x11111111;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  attr.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  uint64_t value = 1;
  ibv_sge sge{reinterpret_cast<uintptr_t>(&value), 8, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.send_flags = IBV_SEND_INLINE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// ibv_modify_srq(3) with IBV_SRQ_MAX_WR (IBV_DEVICE_SRQ_RESIZE): a full SRQ
// grows and the receives posted before stay, consumed in the order they
// were posted; EINVAL below the receives posted, above max_srq_wr, or with
// an armed limit above the new size, and a refused call changes nothing.
TEST_F(RcLoopbackTest, SrqResizeKeepsThePostedReceivesInOrder) {
  ibv_device_attr dev{};
  ASSERT_EQ(ibv_query_device(ctx_, &dev), 0);
  ibv_srq_init_attr init{};
  init.attr.max_wr = 4;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &init);
  ASSERT_NE(srq, nullptr);
  auto post_recv = [&](uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + kBytes + 64 * wr_id), 64, mr_->lkey};
    ibv_recv_wr wr = uroce::transport::RecvWr(wr_id, &sge);
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  };
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_EQ(post_recv(id), 0);
  EXPECT_EQ(post_recv(5), ENOMEM) << "full at 4";

  ibv_srq_attr attr{};
  attr.max_wr = 3;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR), EINVAL) << "four are posted";
  attr.max_wr = static_cast<uint32_t>(dev.max_srq_wr) + 1;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR), EINVAL) << "above max_srq_wr";
  attr.max_wr = 16;
  attr.srq_limit = 17;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL) << "limit above the size";
  ibv_srq_attr now{};
  ASSERT_EQ(ibv_query_srq(srq, &now), 0);
  EXPECT_EQ(now.max_wr, 4u) << "refused calls change nothing";
  EXPECT_EQ(now.srq_limit, 0u);

  attr.max_wr = 16;
  attr.srq_limit = 2;
  ASSERT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &now), 0);
  EXPECT_EQ(now.max_wr, 16u);
  EXPECT_EQ(now.srq_limit, 2u);
  for (uint64_t id = 5; id <= 16; ++id) ASSERT_EQ(post_recv(id), 0) << id;
  EXPECT_EQ(post_recv(17), ENOMEM) << "full at 16";

  // A receiving QP on the SRQ and a sender: 16 SENDs take the receives in
  // the order they were posted, those from before the resize first.
  ibv_qp_init_attr_ex a = RcAttr();
  a.cap.max_send_wr = 32;
  ibv_qp* sender = ibv_create_qp_ex(ctx_, &a);
  a.srq = srq;
  a.cap.max_recv_wr = 0;
  ibv_qp* receiver = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(sender, nullptr);
  ASSERT_NE(receiver, nullptr);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  Connect(sender, receiver->qp_num, gid);
  Connect(receiver, sender->qp_num, gid);
  for (uint64_t i = 0; i < 16; ++i) {
    buf_[i] = static_cast<uint8_t>(i);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + i), 1, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 100 + i;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);
  }
  std::vector<uint64_t> order;
  for (const ibv_wc& wc : Wait(cq_, 16)) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RECV) {
      order.push_back(wc.wr_id);
      // Receive k (1-based) took SEND k-1, whose byte is k-1.
      EXPECT_EQ(buf_[kBytes + 64 * wc.wr_id], static_cast<uint8_t>(wc.wr_id - 1));
    }
  }
  std::vector<uint64_t> want(16);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(order, want);
  EXPECT_EQ(ibv_destroy_qp(receiver), 0);
  EXPECT_EQ(ibv_destroy_qp(sender), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// ibv_rereg_mr(3): a new access takes effect (remote write refused once
// REMOTE_WRITE is gone), a new translation moves the region, the keys stay;
// bad arguments are IBV_REREG_MR_ERR_INPUT.
TEST_F(RcLoopbackTest, ReregMrChangesAccessAndTranslation) {
  PostWriteWithImm(1, 64, mr_->rkey, 1);
  auto wcs = Wait(test_cq_, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

  EXPECT_EQ(ibv_rereg_mr(mr_, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);

  // The second half moves to a buffer of its own, with local write only;
  // the keys the peer has stay the region's keys.
  const uint32_t rkey = mr_->rkey, lkey = mr_->lkey;
  std::vector<uint8_t> moved(kBytes, 0);
  ASSERT_EQ(ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, nullptr, moved.data(),
                         moved.size(), IBV_ACCESS_LOCAL_WRITE),
            0);
  EXPECT_EQ(mr_->addr, moved.data());
  EXPECT_EQ(mr_->length, moved.size());
  EXPECT_EQ(mr_->rkey, rkey);
  EXPECT_EQ(mr_->lkey, lkey);
  // An RDMA WRITE to it is refused by the responder now.
  ibv_mr* src = ibv_reg_mr(pd_, buf_.data(), buf_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 16, src->lkey};
  ibv_send_wr wr = uroce::transport::SignaledSendWr(9, IBV_WR_RDMA_WRITE, &sge);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(moved.data());
  wr.wr.rdma.rkey = mr_->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(src), 0);
}

// A QP moved to RESET takes its completions still waiting out of its CQ
// (as mlx5 does); another QP's completions stay.
TEST_F(RcLoopbackTest, ResetRemovesTheQpsWaitingCompletions) {
  ibv_recv_wr rwr{};
  ibv_recv_wr* bad = nullptr;
  for (int i = 0; i < 2; ++i) {
    rwr.wr_id = 10 + static_cast<uint64_t>(i);
    ASSERT_EQ(ibv_post_recv(qp_[1], &rwr, &bad), 0);
  }
  rwr.wr_id = 20;
  ASSERT_EQ(ibv_post_recv(qp_[0], &rwr, &bad), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &attr, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(qp_[0], &attr, IBV_QP_STATE), 0);
  // Three flush completions are made; none is taken yet.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < until) {
    ibv_wc none;
    (void)ibv_poll_cq(cq_, 0, &none);
  }
  attr.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &attr, IBV_QP_STATE), 0);
  auto wcs = Wait(cq_, 3, std::chrono::milliseconds(300));
  ASSERT_EQ(wcs.size(), 1u) << "only qp 0's flush is left";
  EXPECT_EQ(wcs[0].wr_id, 20u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

// rdma_getaddrinfo(3): a failure returns the EAI code (librdmacm's examples
// print gai_strerror of it) and sets errno (the man page's rule).
TEST(RdmaCmApiTest, GetaddrinfoFailureSetsErrno) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_NUMERICHOST;
  rdma_addrinfo* res = nullptr;
  errno = 0;
  const int rc = rdma_getaddrinfo("not-an-address", "7471", &hints, &res);
  EXPECT_NE(rc, 0);
  EXPECT_NE(errno, 0) << "gai: " << gai_strerror(rc);
  EXPECT_EQ(res, nullptr);
  hints = {};
  hints.ai_port_space = RDMA_PS_UDP;  // not offered
  errno = 0;
  EXPECT_EQ(rdma_getaddrinfo("10.99.0.1", "7471", &hints, &res), EAI_SERVICE);
  EXPECT_EQ(errno, ESOCKTNOSUPPORT);
  ASSERT_EQ(rdma_getaddrinfo("10.99.0.1", "7471", nullptr, &res), 0);
  rdma_freeaddrinfo(res);
}

// Loopback at the rdma_cm level: a program connects to its own
// device's address (rdma_resolve_addr to our own IP, a connection between two
// cm_ids of one process), as rdma-core's tests and UCX's self-checks do.
TEST(RdmaCmApiTest, ConnectsToItsOwnAddress) {
  rdma_event_channel* channel = rdma_create_event_channel();
  ASSERT_NE(channel, nullptr);
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(channel, &listener, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(channel, &client, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in own{};
  own.sin_family = AF_INET;
  own.sin_port = htons(19875);
  inet_pton(AF_INET, "10.99.0.1", &own.sin_addr);  // uroce0 of configs/ring.ini
  ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&own)), 0) << "errno " << errno;
  ASSERT_EQ(rdma_listen(listener, 4), 0);
  // Takes the next event, which must be `want`; returns its cm_id.
  auto expect_event = [&](rdma_cm_event_type want) -> rdma_cm_id* {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(channel, &event) != 0) {
      ADD_FAILURE() << "rdma_get_cm_event: errno " << errno;
      return nullptr;
    }
    EXPECT_EQ(event->event, want) << rdma_event_str(event->event) << " status " << event->status;
    rdma_cm_id* id = event->id;
    rdma_ack_cm_event(event);
    return id;
  };
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&own), 2000), 0) << "errno " << errno;
  expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(client, 2000), 0);
  expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr qp_attr{};
  qp_attr.qp_type = IBV_QPT_RC;
  qp_attr.cap.max_send_wr = qp_attr.cap.max_recv_wr = 4;
  qp_attr.cap.max_send_sge = qp_attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(client, nullptr, &qp_attr), 0) << "errno " << errno;
  rdma_conn_param param{};
  param.responder_resources = param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(client, &param), 0) << "errno " << errno;
  rdma_cm_id* accepted = expect_event(RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(accepted, nullptr);
  ASSERT_EQ(rdma_create_qp(accepted, nullptr, &qp_attr), 0) << "errno " << errno;
  ASSERT_EQ(rdma_accept(accepted, &param), 0) << "errno " << errno;
  // Both ends establish (in either order).
  int established = 0;
  for (int i = 0; i < 2; ++i) {
    rdma_cm_event* event = nullptr;
    ASSERT_EQ(rdma_get_cm_event(channel, &event), 0);
    if (event->event == RDMA_CM_EVENT_ESTABLISHED) ++established;
    rdma_ack_cm_event(event);
  }
  EXPECT_EQ(established, 2);
  rdma_disconnect(client);
  rdma_destroy_qp(client);
  rdma_destroy_qp(accepted);
  rdma_destroy_id(accepted);
  rdma_destroy_id(client);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(channel);
}

// ibv_alloc_parent_domain(3) with allocators: the QP's, SRQ's and CQ's ring
// memory comes from the application's allocator and goes back through its
// free; IBV_ALLOCATOR_USE_DEFAULT lets uroce allocate; a protection domain or
// thread domain in use by a parent domain is EBUSY.
struct CountingAllocator {
  int allocs = 0, frees = 0, defaults = 0;
  bool use_default = false;
  static void* Alloc(ibv_pd*, void* ctx, size_t size, size_t alignment, uint64_t) {
    auto* self = static_cast<CountingAllocator*>(ctx);
    if (self->use_default) {
      ++self->defaults;
      return IBV_ALLOCATOR_USE_DEFAULT;
    }
    ++self->allocs;
    void* p = nullptr;
    return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
  }
  static void Free(ibv_pd*, void* ctx, void* ptr, uint64_t) {
    ++static_cast<CountingAllocator*>(ctx)->frees;
    free(ptr);
  }
};

TEST_F(VerbsApiTest, ParentDomainAllocatorsHoldTheQueues) {
  ibv_td_init_attr td_attr{};
  ibv_td* td = ibv_alloc_td(ctx_, &td_attr);
  ASSERT_NE(td, nullptr) << "errno " << errno;
  for (bool use_default : {false, true}) {
    CountingAllocator counting;
    counting.use_default = use_default;
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd_;
    attr.td = td;
    attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    attr.alloc = CountingAllocator::Alloc;
    attr.free = CountingAllocator::Free;
    attr.pd_context = &counting;
    ibv_pd* parent = ibv_alloc_parent_domain(ctx_, &attr);
    ASSERT_NE(parent, nullptr) << "errno " << errno;
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY) << "a parent domain stands on it";
    EXPECT_EQ(ibv_dealloc_td(td), EBUSY);

    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = 16;
    cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    cq_attr.parent_domain = parent;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &cq_attr);
    ASSERT_NE(cq, nullptr) << "errno " << errno;
    ibv_srq_init_attr srq_attr{};
    srq_attr.attr.max_wr = 8;
    srq_attr.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(parent, &srq_attr);
    ASSERT_NE(srq, nullptr) << "errno " << errno;
    ibv_qp_init_attr_ex qp_attr = RcAttr();
    qp_attr.pd = parent;
    qp_attr.send_cq = qp_attr.recv_cq = ibv_cq_ex_to_cq(cq);
    ibv_qp* qp = ibv_create_qp_ex(ctx_, &qp_attr);
    ASSERT_NE(qp, nullptr) << "errno " << errno;
    // CQ ring, SRQ ring, QP send and receive rings.
    EXPECT_EQ(use_default ? counting.defaults : counting.allocs, 4);
    // The MR registered in the parent domain is in its protection domain.
    std::vector<uint8_t> buf(64);
    ibv_mr* mr = ibv_reg_mr(parent, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 64, mr->lkey};
    ibv_recv_wr wr = uroce::transport::RecvWr(0, &sge);
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
    // A resized SRQ's new ring comes from the allocator too, the old one
    // goes back to it.
    ibv_srq_attr grow{};
    grow.max_wr = 32;
    ASSERT_EQ(ibv_modify_srq(srq, &grow, IBV_SRQ_MAX_WR), 0);
    EXPECT_EQ(use_default ? counting.defaults : counting.allocs, 5);
    EXPECT_EQ(counting.frees, use_default ? 0 : 1);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(counting.frees, use_default ? 0 : 5) << "what the allocator gave goes back to it";
    EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  }
  EXPECT_EQ(ibv_dealloc_td(td), 0);
  // A CQ's parent domain must be one.
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 4;
  cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cq_attr.parent_domain = pd_;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &cq_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ibv_alloc_dm(3) and friends: device memory (host memory in uroce) of at
// most max_dm_size, copied in 4-byte words, registered as a zero-based MR
// that SGEs and peers address by offset; not freed while an MR uses it.
TEST_F(RcLoopbackTest, DeviceMemoryIsCopiedRegisteredAndReachedByOffset) {
  ibv_device_attr_ex dev{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dev), 0);
  ASSERT_GE(dev.max_dm_size, 4096u);
  ibv_alloc_dm_attr too_big{dev.max_dm_size + 4, 0, 0};
  EXPECT_EQ(ibv_alloc_dm(ctx_, &too_big), nullptr);
  ibv_alloc_dm_attr bad_mask{64, 0, 1};
  EXPECT_EQ(ibv_alloc_dm(ctx_, &bad_mask), nullptr);
  ibv_alloc_dm_attr attr{256, 3, 0};
  ibv_dm* dm = ibv_alloc_dm(ctx_, &attr);
  ASSERT_NE(dm, nullptr) << "errno " << errno;
  std::vector<uint8_t> in(64), out(64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i + 1);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 8, in.data(), in.size()), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out.data(), dm, 8, out.size()), 0);
  EXPECT_EQ(in, out);
  EXPECT_NE(ibv_memcpy_to_dm(dm, 3, in.data(), 4), 0) << "unaligned offset";
  EXPECT_NE(ibv_memcpy_to_dm(dm, 4, in.data(), 3), 0) << "unaligned length";
  EXPECT_NE(ibv_memcpy_from_dm(out.data(), dm, 256, 4), 0) << "past the end";
  EXPECT_NE(ibv_memcpy_from_dm(out.data(), dm, 0, 260), 0) << "longer than the memory";

  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 0, 128, IBV_ACCESS_LOCAL_WRITE), nullptr) << "not zero-based";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 128, 132, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE), nullptr);
  // The MR covers bytes 128..255 of the device memory, at addresses 0..127.
  ibv_mr* dmmr = ibv_reg_dm_mr(pd_, dm, 128, 128,
                               IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(dmmr, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_free_dm(dm), EBUSY) << "an MR uses it";

  // RDMA WRITE from the host buffer into the DM MR at address 16.
  std::memset(buf_.data(), 0x5a, 32);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 32, mr_->lkey};
  ibv_send_wr wr = uroce::transport::SignaledSendWr(1, IBV_WR_RDMA_WRITE, &sge);
  wr.wr.rdma.remote_addr = 16;
  wr.wr.rdma.rkey = dmmr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_memcpy_from_dm(out.data(), dm, 128 + 16, 32), 0);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 32), std::vector<uint8_t>(32, 0x5a));

  // RDMA WRITE from the DM MR (its local address 16) into the host buffer.
  sge = {16, 32, dmmr->lkey};
  wr.wr_id = 2;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + kBytes);
  wr.wr.rdma.rkey = mr_->rkey;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_.data() + kBytes, buf_.data(), 32), 0);

  EXPECT_EQ(ibv_dereg_mr(dmmr), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// Explicit on-demand paging (ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND): advertised
// in odp_caps and usable; ibv_advise_mr(3) checks its arguments.
TEST_F(RcLoopbackTest, ExplicitOdpWorks) {
  ibv_device_attr_ex dev{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dev), 0);
  EXPECT_EQ(dev.odp_caps.general_caps & IBV_ODP_SUPPORT, static_cast<uint64_t>(IBV_ODP_SUPPORT));
  EXPECT_EQ(dev.odp_caps.per_transport_caps.rc_odp_caps & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE),
            static_cast<uint32_t>(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE));

  std::vector<uint8_t> odp(kBytes, 0);
  ibv_mr* odp_mr = ibv_reg_mr(pd_, odp.data(), odp.size(),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp_mr, nullptr) << "errno " << errno;
  ibv_sge sge{reinterpret_cast<uintptr_t>(odp.data()), 64, odp_mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &sge, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
  ibv_sge outside{reinterpret_cast<uintptr_t>(odp.data()) + kBytes - 8, 64, odp_mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &outside, 1), EFAULT);

  // A peer's RDMA WRITE lands in the ODP region.
  std::memset(buf_.data(), 0x33, 64);
  ibv_sge src{reinterpret_cast<uintptr_t>(buf_.data()), 64, mr_->lkey};
  ibv_send_wr wr = uroce::transport::SignaledSendWr(3, IBV_WR_RDMA_WRITE, &src);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(odp.data());
  wr.wr.rdma.rkey = odp_mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::vector<uint8_t>(odp.begin(), odp.begin() + 64), std::vector<uint8_t>(64, 0x33));
  EXPECT_EQ(ibv_dereg_mr(odp_mr), 0);

  // A QP may say it works on ODP regions (rdma-core's ODP tests do).
  ibv_qp_init_attr_ex a = RcAttr();
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// Implicit on-demand paging (ibv_reg_mr(3): IBV_ACCESS_ON_DEMAND over the
// whole address space, addr NULL, length SIZE_MAX): advertised, and its keys
// reach any mapped memory, locally and remotely; an access to memory that is
// not mapped fails as on an ODP NIC that cannot resolve the page (a remote
// access error for the requester of a WRITE), never a fault. It cannot be
// re-registered, nor have windows bound.
TEST_F(RcLoopbackTest, ImplicitOdpReachesMappedMemoryAndNaksUnmapped) {
  ibv_device_attr_ex dev{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dev), 0);
  EXPECT_EQ(dev.odp_caps.general_caps, static_cast<uint64_t>(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  ibv_mr* implicit = ibv_reg_mr(pd_, nullptr, SIZE_MAX,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(implicit, nullptr) << "errno " << errno;
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND), nullptr);
  EXPECT_EQ(errno, EINVAL) << "no windows over the whole address space";
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE), nullptr) << "implicit needs ON_DEMAND";
  EXPECT_EQ(ibv_rereg_mr(implicit, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
            IBV_REREG_MR_ERR_CMD);

  // Prefetch advice on any range of it is accepted.
  std::vector<uint8_t> local(4096, 0);
  ibv_sge advice{reinterpret_cast<uintptr_t>(local.data()), 4096, implicit->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &advice, 1), 0);

  // RDMA WRITE from memory named by the implicit lkey into memory named by
  // its rkey, then RDMA READ back into another buffer through both.
  for (size_t i = 0; i < 256; ++i) local[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> remote(4096, 0), back(4096, 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(local.data()), 256, implicit->lkey};
  ibv_send_wr wr = uroce::transport::SignaledSendWr(1, IBV_WR_RDMA_WRITE, &sge);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote.data());
  wr.wr.rdma.rkey = implicit->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), 256), 0);
  sge.addr = reinterpret_cast<uintptr_t>(back.data());
  wr.wr_id = 2;
  wr.opcode = IBV_WR_RDMA_READ;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  wcs = Wait(test_cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(back.data(), local.data(), 256), 0);

  // A WRITE to a page that was mapped and is no longer: a remote access
  // error, and the process lives.
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  ASSERT_EQ(munmap(page, 4096), 0);
  wr.wr_id = 3;
  wr.opcode = IBV_WR_RDMA_WRITE;
  sge.addr = reinterpret_cast<uintptr_t>(local.data());
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(page);
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  wcs = Wait(test_cq_, 1);
  ASSERT_GE(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(implicit), 0);
}

// Memory windows (IBTA 10.6.7): type 1 through ibv_bind_mw, type 2 through
// IBV_WR_BIND_MW and ibv_wr_bind_mw; a window's rkey reaches its range with
// its access through the right QP, and nothing once invalidated (LOCAL_INV,
// SEND with invalidate), unbound or deallocated. qp_[1] is the responder:
// type 2 windows are bound through it.
class MemoryWindowTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    RcLoopbackTest::SetUp();
    if (HasFatalFailure()) return;
    win_.assign(kBytes, 0);
    win_mr_ = ibv_reg_mr(pd_, win_.data(), win_.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    ASSERT_NE(win_mr_, nullptr) << "errno " << errno;
  }
  void TearDown() override {
    if (mw_ != nullptr) ibv_dealloc_mw(mw_);
    if (win_mr_ != nullptr) ibv_dereg_mr(win_mr_);
    RcLoopbackTest::TearDown();
  }
  uint64_t WinAddr(size_t offset) const { return reinterpret_cast<uintptr_t>(win_.data()) + offset; }
  // IBV_WR_BIND_MW on qp_[1]; its completion.
  ibv_wc Bind(uint32_t rkey, uint64_t addr, uint64_t length, unsigned access) {
    ibv_send_wr wr{};
    wr.wr_id = 50;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw_;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = win_mr_;
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = access;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp_[1], &wr, &bad), 0);
    return One();
  }
  // An RDMA WRITE of `len` bytes of 0x77 from qp_[0] through `rkey`.
  ibv_wc_status Write(uint32_t rkey, uint64_t addr, uint32_t len) {
    std::memset(buf_.data(), 0x77, len);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), len, mr_->lkey};
    ibv_send_wr wr = uroce::transport::SignaledSendWr(60, IBV_WR_RDMA_WRITE, &sge);
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
    return One().status;
  }
  ibv_wc One() {
    auto wcs = Wait(test_cq_, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }
  std::vector<uint8_t> win_;
  ibv_mr* win_mr_ = nullptr;
  ibv_mw* mw_ = nullptr;
};

TEST_F(MemoryWindowTest, DeviceAdvertisesWindowsAndAllocatesTypes1And2Only) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(attr.max_mw, 0);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY) << "the PD holds a window";
}

TEST_F(MemoryWindowTest, Type2WindowServesItsRangeUntilSendWithInvalidate) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr) << "errno " << errno;
  const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
  ibv_wc wc = Bind(rkey, WinAddr(1024), 512, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 50u);
  ASSERT_EQ(Write(rkey, WinAddr(1024 + 8), 64), IBV_WC_SUCCESS);
  EXPECT_EQ(win_[1024 + 8], 0x77);
  EXPECT_EQ(win_[1024 + 8 + 63], 0x77);
  EXPECT_EQ(win_[1024 + 8 + 64], 0);

  // SEND with invalidate: the receiver sees the flag and the key, and the
  // window is free afterwards.
  ibv_recv_wr rwr{};
  rwr.wr_id = 70;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(ibv_post_recv(qp_[1], &rwr, &bad_recv), 0);
  ibv_send_wr wr{};
  wr.wr_id = 71;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wcs = Wait(test_cq_, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& w : wcs) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    if (w.wr_id == 70) {
      EXPECT_EQ(w.opcode, IBV_WC_RECV);
      EXPECT_TRUE(w.wc_flags & IBV_WC_WITH_INV);
      EXPECT_EQ(w.invalidated_rkey, rkey);
    } else {
      EXPECT_EQ(w.opcode, IBV_WC_SEND);
    }
  }
  EXPECT_EQ(Write(rkey, WinAddr(1024), 8), IBV_WC_REM_ACCESS_ERR) << "invalidated";
}

TEST_F(MemoryWindowTest, Type2WindowRefusesOutsideItsRangeAndAccess) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
  ASSERT_EQ(Bind(rkey, WinAddr(1024), 512, IBV_ACCESS_REMOTE_WRITE).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Write(rkey, WinAddr(1024 + 512 - 8), 16), IBV_WC_REM_ACCESS_ERR) << "past the window's end";
}

TEST_F(MemoryWindowTest, Type2WindowWithoutRemoteWriteRefusesWrites) {
  // ibv_wr_bind_mw(3) through the extended post interface.
  ibv_qp_init_attr_ex a = RcAttr();
  a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV;
  ibv_qp* probe = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(probe, nullptr) << "bind and local invalidate are offered: errno " << errno;
  EXPECT_EQ(ibv_destroy_qp(probe), 0);
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
  ASSERT_EQ(Bind(rkey, WinAddr(0), kBytes, IBV_ACCESS_REMOTE_READ).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Write(rkey, WinAddr(0), 8), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(win_[0], 0);
}

TEST_F(MemoryWindowTest, LocalInvalidateEndsAType2Window) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
  ASSERT_EQ(Bind(rkey, WinAddr(0), kBytes, IBV_ACCESS_REMOTE_WRITE).status, IBV_WC_SUCCESS);
  ASSERT_EQ(Write(rkey, WinAddr(0), 8), IBV_WC_SUCCESS);
  ibv_send_wr wr{};
  wr.wr_id = 80;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[1], &wr, &bad), 0);
  ibv_wc wc = One();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(Write(rkey, WinAddr(0), 8), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, DeallocatedWindowGrantsNothing) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
  ASSERT_EQ(Bind(rkey, WinAddr(0), kBytes, IBV_ACCESS_REMOTE_WRITE).status, IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_dealloc_mw(mw_), 0);
  mw_ = nullptr;
  EXPECT_EQ(Write(rkey, WinAddr(0), 8), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, Type1WindowBindsThroughIbvBindMwAndUnbindsWithZeroLength) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(mw_, nullptr);
  ibv_mw_bind bind{};
  bind.wr_id = 90;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = win_mr_;
  bind.bind_info.addr = WinAddr(0);
  bind.bind_info.length = 256;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  const uint32_t before = mw_->rkey;
  ASSERT_EQ(ibv_bind_mw(qp_[0], mw_, &bind), 0) << "any QP of the PD";
  EXPECT_NE(mw_->rkey, before);
  ibv_wc wc = One();
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 90u);
  ASSERT_EQ(Write(mw_->rkey, WinAddr(16), 8), IBV_WC_SUCCESS);
  EXPECT_EQ(win_[16], 0x77);
  bind.bind_info.length = 0;
  ASSERT_EQ(ibv_bind_mw(qp_[0], mw_, &bind), 0);
  ASSERT_EQ(One().status, IBV_WC_SUCCESS);
  EXPECT_EQ(Write(mw_->rkey, WinAddr(16), 8), IBV_WC_REM_ACCESS_ERR) << "unbound";
}

TEST_F(MemoryWindowTest, BindToARegionWithoutBindAccessFails) {
  mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw_, nullptr);
  ibv_mr* plain = win_mr_;
  win_mr_ = mr_;  // registered without IBV_ACCESS_MW_BIND
  ibv_wc wc = Bind(ibv_inc_rkey(mw_->rkey), reinterpret_cast<uintptr_t>(buf_.data()), 64, IBV_ACCESS_REMOTE_WRITE);
  win_mr_ = plain;
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(wc.wr_id, 50u);
}

}  // namespace

namespace {

// XRC (IBTA annex A14): ibv_open_xrcd(3), XRC SRQs (ibv_create_srq_ex(3)
// IBV_SRQT_XRC, ibv_get_srq_num(3)), XRC initiator and target QPs, and
// posting with wr.qp_type.xrc.remote_srqn or ibv_wr_set_xrc_srqn(3).
class XrcTest : public RcLoopbackTest {
 protected:
  void SetUp() override {
    RcLoopbackTest::SetUp();
    if (HasFatalFailure()) return;
    char path[] = "/tmp/uroce-xrcd-XXXXXX";
    fd_ = mkstemp(path);
    ASSERT_GE(fd_, 0);
    unlink(path);
  }
  void TearDown() override {
    for (ibv_qp*& qp : xrc_qp_) {
      if (qp != nullptr) {
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
      }
      qp = nullptr;
    }
    for (ibv_srq*& srq : srq_) {
      if (srq != nullptr) {
        EXPECT_EQ(ibv_destroy_srq(srq), 0);
      }
      srq = nullptr;
    }
    for (ibv_xrcd*& x : xrcd_) {
      if (x != nullptr) {
        EXPECT_EQ(ibv_close_xrcd(x), 0);
      }
      x = nullptr;
    }
    if (fd_ >= 0) close(fd_);
    RcLoopbackTest::TearDown();
  }
  ibv_xrcd* Open(int fd, int oflags) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = fd;
    a.oflags = oflags;
    return ibv_open_xrcd(ctx_, &a);
  }
  ibv_srq* XrcSrq(ibv_xrcd* xrcd) {
    ibv_srq_init_attr_ex a{};
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    a.srq_type = IBV_SRQT_XRC;
    a.pd = pd_;
    a.xrcd = xrcd;
    a.cq = cq_;
    a.attr.max_wr = 8;
    a.attr.max_sge = 1;
    return ibv_create_srq_ex(ctx_, &a);
  }
  // An XRC initiator (with the ibv_wr_* interface) and a target, joined.
  void MakeQps(ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex s{};
    s.qp_type = IBV_QPT_XRC_SEND;
    s.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    s.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    s.pd = pd_;
    s.send_cq = cq_;
    s.cap.max_send_wr = 8;
    s.cap.max_send_sge = 1;
    xrc_qp_[0] = ibv_create_qp_ex(ctx_, &s);
    ASSERT_NE(xrc_qp_[0], nullptr) << "errno " << errno;
    ibv_qp_init_attr_ex r{};
    r.qp_type = IBV_QPT_XRC_RECV;
    r.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    r.xrcd = xrcd;
    xrc_qp_[1] = ibv_create_qp_ex(ctx_, &r);
    ASSERT_NE(xrc_qp_[1], nullptr) << "errno " << errno;
    EXPECT_EQ(xrc_qp_[1]->qp_type, IBV_QPT_XRC_RECV);
    EXPECT_EQ(xrc_qp_[1]->pd, nullptr);
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
    // The RC attributes, as programs that treat XRC like RC pass them.
    for (int i = 0; i < 2; ++i) Connect(xrc_qp_[i], xrc_qp_[1 - i]->qp_num, gid);
  }
  int PostSendTo(uint32_t srqn, uint64_t wr_id, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), len, mr_->lkey};
    ibv_send_wr wr = uroce::transport::SignaledSendWr(wr_id, IBV_WR_SEND, &sge);
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(xrc_qp_[0], &wr, &bad);
  }
  void PostSrqRecv(ibv_srq* srq, uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + kBytes), kBytes, mr_->lkey};
    ibv_recv_wr wr = uroce::transport::RecvWr(wr_id, &sge);
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }

  int fd_ = -1;
  ibv_xrcd* xrcd_[2] = {nullptr, nullptr};
  ibv_srq* srq_[2] = {nullptr, nullptr};
  ibv_qp* xrc_qp_[2] = {nullptr, nullptr};
};

// ibv_open_xrcd(3): opens of one file share a domain; O_CREAT|O_EXCL on a
// file that has one is EEXIST, no O_CREAT on one that has none ENOENT;
// ibv_close_xrcd is EBUSY while an XRC SRQ is in the domain.
TEST_F(XrcTest, DomainsAreSharedByFileAndStayWhileInUse) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_XRC, 0u);
  xrcd_[0] = Open(fd_, O_CREAT);
  ASSERT_NE(xrcd_[0], nullptr) << "errno " << errno;
  ibv_xrcd* again = Open(fd_, 0);
  EXPECT_EQ(again, xrcd_[0]) << "the file's domain";
  errno = 0;
  EXPECT_EQ(Open(fd_, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EEXIST);
  char other[] = "/tmp/uroce-xrcd-XXXXXX";
  const int other_fd = mkstemp(other);
  ASSERT_GE(other_fd, 0);
  unlink(other);
  errno = 0;
  EXPECT_EQ(Open(other_fd, 0), nullptr);
  EXPECT_EQ(errno, ENOENT);
  close(other_fd);
  errno = 0;
  EXPECT_EQ(Open(-1, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd_init_attr no_flags{};
  no_flags.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  no_flags.fd = fd_;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx_, &no_flags), nullptr);
  EXPECT_EQ(errno, EINVAL);

  srq_[0] = XrcSrq(xrcd_[0]);
  ASSERT_NE(srq_[0], nullptr) << "errno " << errno;
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq_[0], &srqn), 0);
  EXPECT_NE(srqn, 0u);
  EXPECT_LE(srqn, 0xFFFFFFu);
  ibv_srq_init_attr basic{};
  basic.attr.max_wr = 1;
  basic.attr.max_sge = 1;
  ibv_srq* plain = ibv_create_srq(pd_, &basic);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(ibv_get_srq_num(plain, &srqn), EINVAL) << "a basic SRQ has no number";
  EXPECT_EQ(ibv_destroy_srq(plain), 0);

  EXPECT_EQ(ibv_close_xrcd(again), 0) << "one open of two";
  EXPECT_EQ(ibv_close_xrcd(xrcd_[0]), EBUSY) << "the SRQ is in it";
  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY) << "the XRC SRQ completes on it";
}

// An XRC SEND reaches the SRQ it names, completes on that SRQ's CQ with the
// target QP's number; a number of another domain's SRQ is refused (the
// sender's request fails with a remote invalid request error).
TEST_F(XrcTest, SendReachesTheNamedSrqOnly) {
  xrcd_[0] = Open(fd_, O_CREAT);
  xrcd_[1] = Open(-1, O_CREAT);
  ASSERT_NE(xrcd_[0], nullptr);
  ASSERT_NE(xrcd_[1], nullptr);
  ASSERT_NE(xrcd_[0], xrcd_[1]);
  srq_[0] = XrcSrq(xrcd_[0]);
  srq_[1] = XrcSrq(xrcd_[1]);
  ASSERT_NE(srq_[0], nullptr);
  ASSERT_NE(srq_[1], nullptr);
  MakeQps(xrcd_[0]);
  if (HasFatalFailure()) return;
  uint32_t srqn = 0, foreign = 0;
  ASSERT_EQ(ibv_get_srq_num(srq_[0], &srqn), 0);
  ASSERT_EQ(ibv_get_srq_num(srq_[1], &foreign), 0);
  ibv_recv_wr rwr{};
  ibv_recv_wr* bad_recv = nullptr;
  EXPECT_EQ(ibv_post_recv(xrc_qp_[1], &rwr, &bad_recv), EINVAL) << "a target has no receive queue";
  EXPECT_EQ(ibv_post_recv(xrc_qp_[0], &rwr, &bad_recv), EINVAL) << "an initiator receives nothing";

  for (uint32_t i = 0; i < 100; ++i) buf_[i] = static_cast<uint8_t>(i * 7);
  PostSrqRecv(srq_[0], 55);
  ASSERT_EQ(PostSendTo(srqn, 1, 100), 0);
  auto wc = Wait(cq_, 2);
  ASSERT_EQ(wc.size(), 2u);
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    if (w.opcode == IBV_WC_RECV) {
      EXPECT_EQ(w.wr_id, 55u);
      EXPECT_EQ(w.byte_len, 100u);
      EXPECT_EQ(w.qp_num, xrc_qp_[1]->qp_num);
    } else {
      EXPECT_EQ(w.opcode, IBV_WC_SEND);
      EXPECT_EQ(w.qp_num, xrc_qp_[0]->qp_num);
    }
  }
  EXPECT_EQ(0, std::memcmp(buf_.data(), buf_.data() + kBytes, 100));

  // The ibv_wr_* interface: ibv_wr_set_xrc_srqn.
  PostSrqRecv(srq_[0], 56);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(xrc_qp_[0]);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(qpx, htonl(0xABCD));
  ibv_wr_set_xrc_srqn(qpx, srqn);
  ibv_wr_set_sge(qpx, mr_->lkey, reinterpret_cast<uintptr_t>(buf_.data()), 8);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  wc = Wait(cq_, 2);
  ASSERT_EQ(wc.size(), 2u);
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    if (w.opcode == IBV_WC_RECV) {
      EXPECT_EQ(w.wr_id, 56u);
      EXPECT_TRUE(w.wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(ntohl(w.imm_data), 0xABCDu);
    }
  }

  // Another domain's SRQ: refused, its receive untouched.
  PostSrqRecv(srq_[1], 57);
  ASSERT_EQ(PostSendTo(foreign, 3, 8), 0);
  wc = Wait(cq_, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_TRUE(Wait(cq_, 1, std::chrono::milliseconds(50)).empty()) << "no receive completed";
}

}  // namespace
