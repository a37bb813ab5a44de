// Verbs calls a program makes, checked through Debian's libibverbs API
// against uroce's libibverbs.so.1 (run by verbs_api_test.sh under `uroce
// exec` over configs/ring.ini: two devices on a net_ring pair). Issue 17's
// smaller defects, found by UCX and rdma-core's own tests.
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

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

}  // namespace
