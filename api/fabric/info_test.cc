// fi_getinfo(3) rules as uroce's getinfo applies them to the hints.
#include "api/fabric/info.h"

#include "api/fabric/cm_data.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

namespace uroce::fabric {
namespace {

transport::Gid V4(const char* ip) {
  in_addr a{};
  inet_pton(AF_INET, ip, &a);
  return transport::Ipv4MappedGid(reinterpret_cast<const uint8_t*>(&a));
}

transport::Gid V6(const char* ip) {
  transport::Gid g{};
  inet_pton(AF_INET6, ip, g.data());
  return g;
}

std::vector<DeviceAddresses> TwoDevices() {
  return {{"uroce0", {V4("10.0.0.1"), V6("fd00::1")}, 1500}, {"uroce1", {V4("10.0.1.1")}, 9000}};
}

int Count(const fi_info* info) {
  int n = 0;
  for (; info != nullptr; info = info->next) ++n;
  return n;
}

// Frees with the same rules as libfabric's fi_freeinfo (malloc'ed pieces).
struct InfoList {
  fi_info* head = nullptr;
  ~InfoList() { FreeInfo(head); }
};

fi_info* Hints() {
  fi_info* h = static_cast<fi_info*>(std::calloc(1, sizeof(fi_info)));
  h->ep_attr = static_cast<fi_ep_attr*>(std::calloc(1, sizeof(fi_ep_attr)));
  h->domain_attr = static_cast<fi_domain_attr*>(std::calloc(1, sizeof(fi_domain_attr)));
  h->fabric_attr = static_cast<fi_fabric_attr*>(std::calloc(1, sizeof(fi_fabric_attr)));
  h->tx_attr = static_cast<fi_tx_attr*>(std::calloc(1, sizeof(fi_tx_attr)));
  h->rx_attr = static_cast<fi_rx_attr*>(std::calloc(1, sizeof(fi_rx_attr)));
  // What fi_pingpong and ofi_rxm offer (NOTES-rxm.md): since API 1.5 the
  // application names the registration modes it can follow.
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  return h;
}

TEST(GetInfo, NoHintsGivesEveryAddressIpv4First) {
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &list.head), 0);
  ASSERT_EQ(Count(list.head), 3);
  EXPECT_EQ(list.head->addr_format, FI_SOCKADDR_IN);
  EXPECT_STREQ(list.head->domain_attr->name, "uroce0");
  EXPECT_STREQ(list.head->next->domain_attr->name, "uroce1");
  EXPECT_EQ(list.head->next->next->addr_format, FI_SOCKADDR_IN6);
  for (fi_info* i = list.head; i != nullptr; i = i->next) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_MSG);
    EXPECT_EQ(i->fabric_attr->prov_name, nullptr);  // libfabric fills it in
    EXPECT_STREQ(i->fabric_attr->name, "uroce");
    EXPECT_NE(i->src_addr, nullptr);  // ofi_rxm writes into it
    EXPECT_EQ(i->dest_addr, nullptr);
    EXPECT_EQ(i->caps & (FI_MSG | FI_RMA | FI_ATOMIC), FI_MSG | FI_RMA | FI_ATOMIC);
    EXPECT_EQ(i->domain_attr->mr_mode & (FI_MR_LOCAL | FI_MR_PROV_KEY), FI_MR_LOCAL | FI_MR_PROV_KEY);
  }
}

TEST(GetInfo, OtherProviderOrEndpointTypeGivesNoData) {
  fi_info* h = Hints();
  fi_info* out = nullptr;
  h->fabric_attr->prov_name = strdup("tcp");
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  std::free(h->fabric_attr->prov_name);
  h->fabric_attr->prov_name = strdup("uroce;^ofi_rxm");  // as ofi_rxm asks its core
  InfoList layered;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &layered.head), 0);
  std::free(h->fabric_attr->prov_name);
  h->fabric_attr->prov_name = strdup("uroce");
  h->ep_attr->type = FI_EP_RDM;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  h->ep_attr->type = FI_EP_MSG;
  h->caps = FI_TAGGED;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  h->caps = FI_MSG;
  InfoList list;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &list.head), 0);
  EXPECT_EQ(list.head->caps & (FI_RMA | FI_ATOMIC), 0u);  // primary caps not asked for
  EXPECT_NE(list.head->caps & FI_SEND, 0u);
  FreeInfo(h);
}

TEST(GetInfo, MrModeWithoutLocalOrProvKeyIsRefused) {
  fi_info* h = Hints();
  fi_info* out = nullptr;
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_PROV_KEY;
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &list.head), 0);
  EXPECT_EQ(list.head->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_PROV_KEY);  // no VIRT_ADDR: offsets
  FreeInfo(h);
}

// fi_mr(3) "Basic Memory Registration" and FI_MR_UNSPEC, by API version (the
// rules of libfabric's ofi_check_mr_mode). Before: FI_MR_BASIC at 1.17 was
// answered with the four 1.5 bits, and mr_mode 0 at 1.17 was accepted.
TEST(GetInfo, MrModeRulesFollowTheApiVersion) {
  fi_info* h = Hints();
  fi_info* out = nullptr;
  h->caps = FI_MSG | FI_RMA;
  // 1.17, FI_MR_BASIC with FI_LOCAL_MR: answered FI_MR_BASIC, FI_LOCAL_MR kept.
  h->mode = FI_LOCAL_MR | FI_RX_CQ_DATA;
  h->domain_attr->mr_mode = FI_MR_BASIC;
  {
    InfoList basic;
    ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &basic.head), 0);
    for (const fi_info* i = basic.head; i != nullptr; i = i->next) {
      EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_BASIC);
      EXPECT_NE(i->mode & FI_LOCAL_MR, 0u);
    }
  }
  // FI_MR_BASIC must stand alone; without FI_LOCAL_MR nobody hands uroce
  // local descriptors.
  h->domain_attr->mr_mode = FI_MR_BASIC | FI_MR_LOCAL;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  h->domain_attr->mr_mode = FI_MR_BASIC;
  h->mode = FI_RX_CQ_DATA;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  // FI_MR_UNSPEC (0) at 1.5 and later offers no bit: -FI_ENODATA, even with
  // FI_LOCAL_MR (FI_MR_LOCAL is required in mr_mode from 1.5 on).
  h->domain_attr->mr_mode = FI_MR_UNSPEC;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 5), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  h->mode = FI_LOCAL_MR;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  // Before 1.5, FI_MR_UNSPEC means basic or scalable: answered FI_MR_BASIC.
  {
    InfoList old;
    ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 4), nullptr, nullptr, 0, h, &old.head), 0);
    EXPECT_EQ(old.head->domain_attr->mr_mode, FI_MR_BASIC);
  }
  h->domain_attr->mr_mode = FI_MR_SCALABLE;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 4), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  // No RMA target: FI_MR_PROV_KEY is not needed, and not offered means no
  // remote access in the answer.
  h->mode = 0;
  h->caps = FI_MSG;
  h->domain_attr->mr_mode = FI_MR_LOCAL;
  {
    InfoList msg;
    ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &msg.head), 0);
    EXPECT_EQ(msg.head->domain_attr->mr_mode, FI_MR_LOCAL);
  }
  h->caps = 0;
  {
    InfoList any;
    ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &any.head), 0);
    EXPECT_EQ(any.head->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE), 0u);
    EXPECT_EQ(any.head->rx_attr->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE), 0u);
  }
  h->caps = FI_RMA | FI_REMOTE_WRITE;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  FreeInfo(h);
}

// fi_getinfo(3): a hint uroce cannot satisfy is -FI_ENODATA, not ignored.
// Before, each of these got an answer.
TEST(GetInfo, HintsBeyondWhatUroceGuaranteesGiveNoData) {
  fi_info* out = nullptr;
  auto expect_nodata = [&](const char* what, void (*set)(fi_info*)) {
    fi_info* h = Hints();
    set(h);
    EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA) << what;
    FreeInfo(h);
  };
  // Orderings an RC QP does not give (a WRITE or SEND may overtake a READ's
  // response), and in-order data placement.
  expect_nodata("tx WAR", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_WAR; });
  expect_nodata("rx SAR", [](fi_info* h) { h->rx_attr->msg_order = FI_ORDER_SAR; });
  expect_nodata("tx STRICT", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_STRICT; });
  expect_nodata("RMA WAR", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_RMA_WAR; });
  expect_nodata("comp DATA", [](fi_info* h) { h->tx_attr->comp_order = FI_ORDER_DATA; });
  expect_nodata("WAR size", [](fi_info* h) {
    h->caps = FI_RMA;
    h->ep_attr->max_order_war_size = 8;
  });
  // Domain capabilities uroce lacks.
  expect_nodata("FI_SHARED_AV", [](fi_info* h) { h->domain_attr->caps = FI_SHARED_AV; });
  // Shared contexts (fi_stx_context / fi_srx_context are -FI_ENOSYS).
  expect_nodata("shared tx", [](fi_info* h) { h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT; });
  expect_nodata("shared rx", [](fi_info* h) { h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT; });
  expect_nodata("2 rx contexts", [](fi_info* h) { h->ep_attr->rx_ctx_cnt = 2; });
  expect_nodata("stx per ep", [](fi_info* h) { h->domain_attr->max_ep_stx_ctx = 1; });
  expect_nodata("cq data 8", [](fi_info* h) {
    h->mode = FI_RX_CQ_DATA;
    h->domain_attr->cq_data_size = 8;
  });
  expect_nodata("cq data without FI_RX_CQ_DATA", [](fi_info* h) { h->domain_attr->cq_data_size = 4; });
  expect_nodata("mr_iov_limit", [](fi_info* h) { h->domain_attr->mr_iov_limit = 2; });
  expect_nodata("rma_iov_limit", [](fi_info* h) { h->tx_attr->rma_iov_limit = 2; });
  // What ofi_rxm and Open MPI ask still matches, and what is reported is
  // what is guaranteed.
  fi_info* h = Hints();
  h->caps = FI_MSG | FI_RMA | FI_READ | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
  h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
  h->tx_attr->size = 128;
  h->rx_attr->size = 128;
  h->tx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->msg_order = FI_ORDER_SAS;
  h->ep_attr->type = FI_EP_MSG;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  h->domain_attr->cq_data_size = 4;
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 5), nullptr, nullptr, 0, h, &list.head), 0);
  EXPECT_NE(list.head->tx_attr->msg_order & FI_ORDER_SAS, 0u);
  EXPECT_EQ(list.head->tx_attr->msg_order & (FI_ORDER_WAR | FI_ORDER_SAR), 0u);
  EXPECT_EQ(list.head->ep_attr->max_order_war_size, 0u);
  EXPECT_EQ(list.head->ep_attr->tx_ctx_cnt, 1u);
  EXPECT_EQ(list.head->domain_attr->max_ep_srx_ctx, 0u);
  FreeInfo(h);
}

TEST(GetInfo, SourceServiceSetsTheLocalPort) {
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, "9228", FI_SOURCE, nullptr, &list.head), 0);
  const auto* in = static_cast<const sockaddr_in*>(list.head->src_addr);
  EXPECT_EQ(in->sin_family, AF_INET);
  EXPECT_EQ(ntohs(in->sin_port), 9228);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
  EXPECT_STREQ(ip, "10.0.0.1");
}

TEST(GetInfo, NodeIsTheDestination) {
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), "10.0.0.2", "47592", 0, nullptr, &list.head), 0);
  ASSERT_EQ(Count(list.head), 2);  // both devices have IPv4
  const auto* dest = static_cast<const sockaddr_in*>(list.head->dest_addr);
  ASSERT_NE(dest, nullptr);
  EXPECT_EQ(ntohs(dest->sin_port), 47592);
  EXPECT_EQ(list.head->dest_addrlen, sizeof(sockaddr_in));
  InfoList v6;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), "fd00::2", "1", 0, nullptr, &v6.head), 0);
  ASSERT_EQ(Count(v6.head), 1);
  EXPECT_EQ(v6.head->addr_format, FI_SOCKADDR_IN6);
}

TEST(GetInfo, SourceAddressPicksTheDevice) {
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), "10.0.1.1", "0", FI_SOURCE, nullptr, &list.head), 0);
  ASSERT_EQ(Count(list.head), 1);
  EXPECT_STREQ(list.head->domain_attr->name, "uroce1");
  fi_info* out = nullptr;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), "10.9.9.9", "0", FI_SOURCE, nullptr, &out), -FI_ENODATA);
}

TEST(GetInfo, AddrFormatFilters) {
  fi_info* h = Hints();
  h->addr_format = FI_SOCKADDR_IN6;
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &list.head), 0);
  ASSERT_EQ(Count(list.head), 1);
  EXPECT_EQ(list.head->addr_format, FI_SOCKADDR_IN6);
  h->addr_format = FI_ADDR_GNI;
  fi_info* out = nullptr;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  FreeInfo(h);
}

TEST(GetInfo, RxCqDataModeDecidesCqDataSize) {
  fi_info* h = Hints();
  h->mode = 0;
  InfoList without;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &without.head), 0);
  EXPECT_EQ(without.head->domain_attr->cq_data_size, 0u);
  EXPECT_EQ(without.head->mode & FI_RX_CQ_DATA, 0u);
  h->mode = FI_RX_CQ_DATA | FI_CONTEXT;
  InfoList with;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &with.head), 0);
  EXPECT_EQ(with.head->domain_attr->cq_data_size, 4u);
  EXPECT_NE(with.head->mode & FI_RX_CQ_DATA, 0u);
  FreeInfo(h);
}

TEST(GetInfo, DomainNameAndLimits) {
  fi_info* h = Hints();
  h->domain_attr->name = strdup("uroce1");
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &list.head), 0);
  ASSERT_EQ(Count(list.head), 1);
  EXPECT_STREQ(list.head->domain_attr->name, "uroce1");
  std::free(h->domain_attr->name);
  h->domain_attr->name = strdup("mlx5_0");
  fi_info* out = nullptr;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  std::free(h->domain_attr->name);
  h->domain_attr->name = nullptr;
  h->tx_attr->inject_size = 4096;
  EXPECT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), nullptr, nullptr, 0, h, &out), -FI_ENODATA);
  FreeInfo(h);
}

TEST(DupInfo, DeepCopyFreesCleanly) {
  InfoList list;
  ASSERT_EQ(GetInfo(TwoDevices(), FI_VERSION(1, 17), "10.0.0.2", "7", 0, nullptr, &list.head), 0);
  fi_info* copy = DupInfo(list.head);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->next, nullptr);
  EXPECT_NE(copy->src_addr, list.head->src_addr);
  EXPECT_EQ(std::memcmp(copy->dest_addr, list.head->dest_addr, copy->dest_addrlen), 0);
  EXPECT_STREQ(copy->domain_attr->name, list.head->domain_attr->name);
  EXPECT_NE(copy->domain_attr->name, list.head->domain_attr->name);
  FreeInfo(copy);
}

TEST(Sockaddr, RoundTrip) {
  sockaddr_storage ss{};
  size_t len = 0;
  GidToSockaddr(V4("192.168.1.2"), 80, &ss, &len);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  transport::Gid gid{};
  uint16_t port = 0;
  ASSERT_TRUE(SockaddrToGid(reinterpret_cast<sockaddr*>(&ss), &gid, &port));
  EXPECT_EQ(gid, V4("192.168.1.2"));
  EXPECT_EQ(port, 80);
  GidToSockaddr(V6("fd00::5"), 81, &ss, &len);
  EXPECT_EQ(len, sizeof(sockaddr_in6));
  ASSERT_TRUE(SockaddrToGid(reinterpret_cast<sockaddr*>(&ss), &gid, &port));
  EXPECT_EQ(gid, V6("fd00::5"));
  sockaddr bad{};
  bad.sa_family = AF_UNIX;
  EXPECT_FALSE(SockaddrToGid(&bad, &gid, &port));
}

// cm_data.h: the length travels in front of the data and is believed only
// as far as bytes arrived.
TEST(CmData, LengthTravelsWithTheData) {
  const char ten[] = "0123456789";
  std::vector<uint8_t> wire = PackCmData(ten, 10);
  ASSERT_EQ(wire.size(), 11u);
  EXPECT_EQ(wire[0], 10);
  wire.resize(cm::kCmReqUserDataSize, 0);  // the REQ's field, padded
  EXPECT_EQ(UnpackCmData(wire), std::vector<uint8_t>(ten, ten + 10));
  EXPECT_TRUE(UnpackCmData(std::vector<uint8_t>(148, 0)).empty());  // a REJ of the CM's own
  EXPECT_TRUE(UnpackCmData({}).empty());
  EXPECT_TRUE(UnpackCmData(PackCmData(nullptr, 0)).empty());
  std::vector<uint8_t> lying = {200, 1, 2};  // says 200, carries 2
  EXPECT_EQ(UnpackCmData(lying), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(kCmConnectDataSize, 55u);
  EXPECT_EQ(kCmAcceptDataSize, 195u);
  EXPECT_EQ(kCmRejectDataSize, 147u);
}

}  // namespace
}  // namespace uroce::fabric
