// The uroce libfabric provider end to end, through the system's libfabric as
// any application uses it: fi_getinfo -> fabric -> domain -> passive endpoint
// and endpoint -> connection over the fabric (IB CM on QP1) -> messages, RMA,
// atomics -> rejection, refused connections, shutdown. Two uroce devices in
// one process joined by a net_ring pair (configs/ring.ini), so both sides of
// every connection are here. Run under `uroce exec` (fi_provider_test.sh).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "api/fi_wait_fd_test_util.h"

namespace {

constexpr int kTimeoutMs = 20000;

#define FI_OK(call)                                                        \
  do {                                                                     \
    const auto fi_ok_result = (call);                                      \
    ASSERT_EQ(fi_ok_result, 0) << #call << ": " << fi_strerror(static_cast<int>(-fi_ok_result)); \
  } while (0)

fi_info* Hints() {
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("uroce");
  hints->ep_attr->type = FI_EP_MSG;
  hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
  hints->mode = FI_CONTEXT | FI_RX_CQ_DATA;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->addr_format = FI_SOCKADDR_IN;
  return hints;
}

std::string Ip(const void* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  const auto* in = static_cast<const sockaddr_in*>(sa);
  inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  return buf;
}

// Reads one event from `eq`: its type, and the bytes after the entry.
struct Event {
  uint32_t type = 0;
  struct {
    fid_t fid = nullptr;
    fi_info* info = nullptr;
  } entry;
  std::string data;
  fi_eq_err_entry error{};
  std::string error_data;
  bool is_error = false;
};

// One event from `eq`: 1 and *ev filled when one comes within `timeout_ms`
// (0: only one already there), 0 when none came, -1 (a test failure) for
// any other answer of the EQ, -FI_EOVERRUN above all.
int TryEvent(fid_eq* eq, Event* ev, int timeout_ms) {
  *ev = Event{};
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
  const ssize_t n = timeout_ms > 0 ? fi_eq_sread(eq, &ev->type, buf, sizeof(buf), timeout_ms, 0)
                                   : fi_eq_read(eq, &ev->type, buf, sizeof(buf), 0);
  if (n >= static_cast<ssize_t>(sizeof(fi_eq_cm_entry))) {
    fi_eq_cm_entry cm;
    std::memcpy(static_cast<void*>(&cm), buf, sizeof(cm));
    ev->entry.fid = cm.fid;
    ev->entry.info = cm.info;
    ev->data.assign(reinterpret_cast<char*>(buf) + sizeof(fi_eq_cm_entry), n - sizeof(fi_eq_cm_entry));
    return 1;
  }
  if (n >= 0) {
    ADD_FAILURE() << "short event " << n;
    return -1;
  }
  if (n == -FI_EAVAIL) {
    ev->is_error = true;
    static uint8_t err_buf[256];
    ev->error.err_data = err_buf;
    ev->error.err_data_size = sizeof(err_buf);
    EXPECT_GE(fi_eq_readerr(eq, &ev->error, 0), 0);
    ev->error_data.assign(static_cast<char*>(ev->error.err_data), ev->error.err_data_size);
    return 1;
  }
  if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) return 0;
  ADD_FAILURE() << "fi_eq_read: " << fi_strerror(static_cast<int>(-n));
  return -1;
}

Event WaitEvent(fid_eq* eq) {
  Event ev;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  for (;;) {
    const int got = TryEvent(eq, &ev, 100);
    if (got != 0) return ev;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "no event within " << kTimeoutMs << " ms";
      return ev;
    }
  }
}

// Reads `count` completions from `cq` (fi_cq_read drives progress).
std::vector<fi_cq_data_entry> WaitCompletions(fid_cq* cq, size_t count) {
  std::vector<fi_cq_data_entry> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (out.size() < count) {
    fi_cq_data_entry entries[16];
    const ssize_t n = fi_cq_read(cq, entries, std::min<size_t>(16, count - out.size()));
    if (n > 0) {
      out.insert(out.end(), entries, entries + n);
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      ADD_FAILURE() << "error completion: " << fi_strerror(err.err) << " prov_errno " << err.prov_errno;
      return out;
    }
    if (n != -FI_EAGAIN) {
      ADD_FAILURE() << "fi_cq_read: " << fi_strerror(static_cast<int>(-n));
      return out;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "only " << out.size() << " of " << count << " completions";
      return out;
    }
  }
  return out;
}

// One side: a domain on one uroce device, an EQ and a CQ.
struct Side {
  fi_info* info = nullptr;  // this device's entry (ours)
  fid_domain* domain = nullptr;
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(2 << 20);
  fid_mr* mr = nullptr;
};

class FabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fi_info* hints = Hints();
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &infos_), 0) << "no uroce provider";
    fi_freeinfo(hints);
    // ring.ini: uroce0 = 10.99.0.1, uroce1 = 10.99.0.2.
    for (fi_info* i = infos_; i != nullptr; i = i->next) {
      if (std::string(i->domain_attr->name) == "uroce0") client_.info = i;
      if (std::string(i->domain_attr->name) == "uroce1") server_.info = i;
    }
    ASSERT_NE(client_.info, nullptr);
    ASSERT_NE(server_.info, nullptr);
    FI_OK(fi_fabric(client_.info->fabric_attr, &fabric_, nullptr));
    for (Side* s : {&client_, &server_}) {
      FI_OK(fi_domain(fabric_, s->info, &s->domain, nullptr));
      fi_eq_attr eq_attr{};
      eq_attr.wait_obj = FI_WAIT_UNSPEC;
      FI_OK(fi_eq_open(fabric_, &eq_attr, &s->eq, nullptr));
      fi_cq_attr cq_attr{};
      cq_attr.format = FI_CQ_FORMAT_DATA;
      cq_attr.size = 1024;
      FI_OK(fi_cq_open(s->domain, &cq_attr, &s->cq, nullptr));
      FI_OK(fi_mr_reg(s->domain, s->buffer.data(), s->buffer.size(),
                      FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &s->mr,
                      nullptr));
    }
  }

  void TearDown() override {
    // Endpoints a test opened beyond the two sides', then its own EQs
    // (an EQ with endpoints bound cannot close).
    for (fid_ep* ep : extra_eps_) EXPECT_EQ(fi_close(&ep->fid), 0);
    if (pep_ != nullptr && pep_eq_ != nullptr) {
      EXPECT_EQ(fi_close(&pep_->fid), 0);
      pep_ = nullptr;
    }
    for (fid_eq* eq : extra_eqs_) EXPECT_EQ(fi_close(&eq->fid), 0);
    if (pep_ != nullptr) {
      EXPECT_EQ(fi_close(&pep_->fid), 0);
    }
    for (Side* s : {&client_, &server_}) {
      if (s->ep != nullptr) {
      EXPECT_EQ(fi_close(&s->ep->fid), 0);
    }
      if (s->mr != nullptr) {
      EXPECT_EQ(fi_close(&s->mr->fid), 0);
    }
      if (s->cq != nullptr) {
      EXPECT_EQ(fi_close(&s->cq->fid), 0);
    }
      if (s->eq != nullptr) {
      EXPECT_EQ(fi_close(&s->eq->fid), 0);
    }
      if (s->domain != nullptr) {
      EXPECT_EQ(fi_close(&s->domain->fid), 0);
    }
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(infos_);
  }

  // The server listens on an ephemeral port; returns its address. With a
  // backlog, fi_control(FI_BACKLOG) first; with an EQ, on that EQ (one of
  // extra_eqs_) rather than the server's.
  void Listen(sockaddr_in* addr, int backlog = 0, fid_eq* eq = nullptr) {
    FI_OK(fi_passive_ep(fabric_, server_.info, &pep_, nullptr));
    pep_eq_ = eq;
    FI_OK(fi_pep_bind(pep_, &(eq != nullptr ? eq : server_.eq)->fid, 0));
    if (backlog > 0) FI_OK(fi_control(&pep_->fid, FI_BACKLOG, &backlog));
    FI_OK(fi_listen(pep_));
    size_t len = sizeof(*addr);
    FI_OK(fi_getname(&pep_->fid, addr, &len));
    ASSERT_EQ(len, sizeof(sockaddr_in));
    ASSERT_NE(addr->sin_port, 0);
    EXPECT_EQ(Ip(addr), "10.99.0.2");
  }

  void OpenEndpoint(Side& side, fi_info* info) {
    FI_OK(fi_endpoint(side.domain, info, &side.ep, nullptr));
    FI_OK(fi_ep_bind(side.ep, &side.eq->fid, 0));
    FI_OK(fi_ep_bind(side.ep, &side.cq->fid, FI_TRANSMIT | FI_RECV));
    FI_OK(fi_enable(side.ep));
  }

  // Connects client to server with private data both ways.
  void Connect() {
    sockaddr_in addr{};
    ASSERT_NO_FATAL_FAILURE(Listen(&addr));
    ASSERT_NO_FATAL_FAILURE(OpenEndpoint(client_, client_.info));
    const char hello[] = "hello from the client";
    FI_OK(fi_connect(client_.ep, &addr, hello, sizeof(hello)));
    Event req = WaitEvent(server_.eq);
    ASSERT_FALSE(req.is_error);
    ASSERT_EQ(req.type, FI_CONNREQ);
    EXPECT_EQ(req.entry.fid, &pep_->fid);
    ASSERT_NE(req.entry.info, nullptr);
    ASSERT_NE(req.entry.info->handle, nullptr);
    EXPECT_EQ(req.data, std::string(hello, sizeof(hello)));  // exactly what fi_connect passed
    ASSERT_NE(req.entry.info->dest_addr, nullptr);
    EXPECT_EQ(Ip(req.entry.info->dest_addr), "10.99.0.1");
    ASSERT_NO_FATAL_FAILURE(OpenEndpoint(server_, req.entry.info));
    fi_freeinfo(req.entry.info);
    // A receive before the accept: the QP takes receives from fi_enable on.
    FI_OK(fi_recv(server_.ep, server_.buffer.data(), 4096, fi_mr_desc(server_.mr), 0, &server_));
    const char welcome[] = "welcome";
    FI_OK(fi_accept(server_.ep, welcome, sizeof(welcome)));
    Event connected = WaitEvent(client_.eq);
    ASSERT_FALSE(connected.is_error) << fi_strerror(connected.error.err);
    ASSERT_EQ(connected.type, FI_CONNECTED);
    EXPECT_EQ(connected.entry.fid, &client_.ep->fid);
    EXPECT_EQ(connected.data, std::string(welcome, sizeof(welcome)));  // exactly what fi_accept passed
    Event server_connected = WaitEvent(server_.eq);
    ASSERT_FALSE(server_connected.is_error);
    ASSERT_EQ(server_connected.type, FI_CONNECTED);
    EXPECT_EQ(server_connected.data.size(), 0u);
    EXPECT_EQ(server_connected.entry.fid, &server_.ep->fid);
    // Names: each side's own address and its peer's.
    sockaddr_in name{}, peer{};
    size_t len = sizeof(name);
    FI_OK(fi_getname(&client_.ep->fid, &name, &len));
    EXPECT_EQ(Ip(&name), "10.99.0.1");
    len = sizeof(peer);
    FI_OK(fi_getpeer(client_.ep, &peer, &len));
    EXPECT_EQ(Ip(&peer), "10.99.0.2");
    EXPECT_EQ(peer.sin_port, addr.sin_port);
  }

  // An EQ of `size` events (0: the provider's default), closed at TearDown.
  fid_eq* OpenEq(size_t size) {
    fi_eq_attr attr{};
    attr.size = size;
    attr.wait_obj = FI_WAIT_UNSPEC;
    fid_eq* eq = nullptr;
    const int r = fi_eq_open(fabric_, &attr, &eq, nullptr);
    EXPECT_EQ(r, 0) << fi_strerror(-r);
    if (r == 0) extra_eqs_.push_back(eq);
    return eq;
  }

  // One more endpoint on `side`'s domain and CQ with its CM events on `eq`,
  // enabled; closed at TearDown (or by CloseExtra). `info`: the side's own,
  // or an FI_CONNREQ's.
  fid_ep* OpenExtra(Side& side, fi_info* info, fid_eq* eq) {
    fid_ep* ep = nullptr;
    int r = fi_endpoint(side.domain, info, &ep, nullptr);
    EXPECT_EQ(r, 0) << fi_strerror(-r);
    if (r != 0) return nullptr;
    extra_eps_.push_back(ep);
    EXPECT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(ep, &side.cq->fid, FI_TRANSMIT | FI_RECV), 0);
    EXPECT_EQ(fi_enable(ep), 0);
    return ep;
  }

  void CloseExtra(fid_ep* ep) {
    auto it = std::find(extra_eps_.begin(), extra_eps_.end(), ep);
    ASSERT_NE(it, extra_eps_.end());
    extra_eps_.erase(it);
    EXPECT_EQ(fi_close(&ep->fid), 0);
  }

  // A new caller (client_, events on client_.eq) connects to `addr` and the
  // listener, whose events are on `server_eq`, accepts it: FI_CONNECTED on
  // both sides.
  void ConnectOnce(const sockaddr_in& addr, fid_eq* server_eq) {
    fid_ep* caller = OpenExtra(client_, client_.info, client_.eq);
    ASSERT_NE(caller, nullptr);
    const char hello[] = "once more";
    FI_OK(fi_connect(caller, &addr, hello, sizeof(hello)));
    Event req = WaitEvent(server_eq);
    ASSERT_FALSE(req.is_error) << fi_strerror(req.error.err);
    ASSERT_EQ(req.type, FI_CONNREQ);
    EXPECT_EQ(req.data.substr(0, sizeof(hello)), std::string(hello, sizeof(hello)));
    fid_ep* answer = OpenExtra(server_, req.entry.info, server_eq);
    fi_freeinfo(req.entry.info);
    ASSERT_NE(answer, nullptr);
    FI_OK(fi_accept(answer, nullptr, 0));
    Event connected = WaitEvent(client_.eq);
    ASSERT_FALSE(connected.is_error) << fi_strerror(connected.error.err);
    EXPECT_EQ(connected.type, FI_CONNECTED);
    EXPECT_EQ(connected.entry.fid, &caller->fid);
    Event accepted = WaitEvent(server_eq);
    ASSERT_FALSE(accepted.is_error) << fi_strerror(accepted.error.err);
    EXPECT_EQ(accepted.type, FI_CONNECTED);
    EXPECT_EQ(accepted.entry.fid, &answer->fid);
  }

  // What a wave of callers nobody answers yet leaves: the FI_CONNREQs on the
  // listener's EQ (and which caller each is, by its connection data) and the
  // callers refused at once.
  struct Wave {
    std::vector<Event> requests;
    std::vector<size_t> request_caller;
    std::set<size_t> refused;
  };

  // Each of `eps` (client_'s, events on client_.eq) connects to `addr` with
  // its index as connection data; returns once every one is either an
  // FI_CONNREQ on `server_eq` or refused (FI_ECONNREFUSED) on client_.eq.
  void ConnectWave(const std::vector<fid_ep*>& eps, const sockaddr_in& addr, fid_eq* server_eq, Wave* wave) {
    for (uint32_t i = 0; i < eps.size(); ++i) FI_OK(fi_connect(eps[i], &addr, &i, sizeof(i)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
    while (wave->requests.size() + wave->refused.size() < eps.size()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << wave->requests.size() << " requests and " << wave->refused.size() << " refusals of " << eps.size();
      Event ev;
      int got = TryEvent(server_eq, &ev, 2);
      ASSERT_GE(got, 0);
      if (got == 1) {
        ASSERT_FALSE(ev.is_error) << "listener: " << fi_strerror(ev.error.err);
        ASSERT_EQ(ev.type, FI_CONNREQ);
        EXPECT_EQ(ev.entry.fid, &pep_->fid);
        ASSERT_NE(ev.entry.info, nullptr);
        ASSERT_GE(ev.data.size(), sizeof(uint32_t));
        uint32_t caller = 0;
        std::memcpy(&caller, ev.data.data(), sizeof(caller));
        ASSERT_LT(caller, eps.size());
        EXPECT_EQ(wave->refused.count(caller), 0u) << "caller " << caller << " both refused and queued";
        wave->requests.push_back(ev);
        wave->request_caller.push_back(caller);
      }
      got = TryEvent(client_.eq, &ev, 2);
      ASSERT_GE(got, 0);
      if (got == 1) {
        // Nobody has answered: the only outcome a caller may have is a refusal.
        ASSERT_TRUE(ev.is_error) << "event " << ev.type << " before any answer";
        EXPECT_EQ(ev.error.err, FI_ECONNREFUSED) << fi_strerror(ev.error.err);
        auto it = std::find_if(eps.begin(), eps.end(), [&](fid_ep* ep) { return &ep->fid == ev.error.fid; });
        ASSERT_NE(it, eps.end());
        EXPECT_TRUE(wave->refused.insert(static_cast<size_t>(it - eps.begin())).second);
      }
    }
  }

  fi_info* infos_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_pep* pep_ = nullptr;
  fid_eq* pep_eq_ = nullptr;  // the listener's EQ when it is not server_.eq
  Side client_, server_;
  std::vector<fid_ep*> extra_eps_;
  std::vector<fid_eq*> extra_eqs_;
};

TEST_F(FabricTest, GetinfoDescribesBothDevices) {
  EXPECT_STREQ(client_.info->fabric_attr->prov_name, "uroce");
  EXPECT_EQ(client_.info->ep_attr->type, FI_EP_MSG);
  EXPECT_NE(client_.info->src_addr, nullptr);
  EXPECT_EQ(Ip(client_.info->src_addr), "10.99.0.1");
  EXPECT_EQ(Ip(server_.info->src_addr), "10.99.0.2");
  size_t size = 0, len = sizeof(size);
  fid_ep* ep = nullptr;
  FI_OK(fi_endpoint(client_.domain, client_.info, &ep, nullptr));
  FI_OK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &size, &len));
  EXPECT_GE(size, 24u);  // what ofi_rxm needs
  EXPECT_EQ(fi_close(&ep->fid), 0);
}

// fi_getinfo(3) / fi_endpoint(3): hints->handle naming a passive endpoint
// gives answers for its address with the handle on, and an active endpoint
// opened with it takes the address over; a listening one keeps it (EBUSY);
// a handle that is no passive endpoint gets no answer.
TEST_F(FabricTest, ActiveEndpointTakesOverAPassiveEndpointsAddress) {
  fid_pep* pep = nullptr;
  FI_OK(fi_passive_ep(fabric_, server_.info, &pep, nullptr));
  fi_info* hints = fi_dupinfo(server_.info);
  ASSERT_NE(hints, nullptr);
  hints->handle = &pep->fid;
  fi_info* answer = nullptr;
  FI_OK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &answer));
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer->handle, &pep->fid);
  EXPECT_EQ(Ip(answer->src_addr), "10.99.0.2");
  fid_ep* ep = nullptr;
  FI_OK(fi_endpoint(server_.domain, answer, &ep, nullptr));
  sockaddr_in name{};
  size_t len = sizeof(name);
  FI_OK(fi_getname(&ep->fid, &name, &len));
  EXPECT_EQ(Ip(&name), "10.99.0.2");
  EXPECT_EQ(fi_close(&ep->fid), 0);
  // Listening, it keeps its address.
  FI_OK(fi_pep_bind(pep, &server_.eq->fid, 0));
  FI_OK(fi_listen(pep));
  EXPECT_EQ(fi_endpoint(server_.domain, answer, &ep, nullptr), -FI_EBUSY);
  fi_freeinfo(answer);
  // A handle that is not a passive endpoint: no answer.
  hints->handle = &server_.domain->fid;
  answer = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &answer), -FI_ENODATA);
  hints->handle = nullptr;
  fi_freeinfo(hints);
  EXPECT_EQ(fi_close(&pep->fid), 0);
}

TEST_F(FabricTest, MessagesBothWays) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  // The receive posted before the accept takes the first message.
  for (size_t i = 0; i < 4096; ++i) client_.buffer[i] = static_cast<uint8_t>(i * 7);
  FI_OK(fi_send(client_.ep, client_.buffer.data(), 4096, fi_mr_desc(client_.mr), 0, &client_));
  auto server_done = WaitCompletions(server_.cq, 1);
  ASSERT_EQ(server_done.size(), 1u);
  EXPECT_EQ(server_done[0].op_context, &server_);
  EXPECT_EQ(server_done[0].len, 4096u);
  EXPECT_TRUE(server_done[0].flags & FI_RECV);
  EXPECT_EQ(std::memcmp(server_.buffer.data(), client_.buffer.data(), 4096), 0);
  ASSERT_EQ(WaitCompletions(client_.cq, 1).size(), 1u);
  // Sizes up to 1 MiB, server to client, with CQ data.
  for (size_t size : {64u, 4096u, 65536u, 1u << 20}) {
    for (size_t i = 0; i < size; ++i) server_.buffer[i] = static_cast<uint8_t>(i ^ size);
    FI_OK(fi_recv(client_.ep, client_.buffer.data(), size, fi_mr_desc(client_.mr), 0, &client_));
    FI_OK(fi_senddata(server_.ep, server_.buffer.data(), size, fi_mr_desc(server_.mr), 0xC0DE + size, 0, &server_));
    auto got = WaitCompletions(client_.cq, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].len, size);
    EXPECT_TRUE(got[0].flags & FI_REMOTE_CQ_DATA);
    EXPECT_EQ(got[0].data, 0xC0DE + size);
    EXPECT_EQ(std::memcmp(client_.buffer.data(), server_.buffer.data(), size), 0) << size;
    ASSERT_EQ(WaitCompletions(server_.cq, 1).size(), 1u);
  }
  // fi_inject: no descriptor, no completion; the buffer is free at return.
  char small[32] = "injected";
  FI_OK(fi_recv(server_.ep, server_.buffer.data(), 64, fi_mr_desc(server_.mr), 0, &server_));
  FI_OK(fi_inject(client_.ep, small, sizeof(small), 0));
  std::memset(small, 0, sizeof(small));
  auto injected = WaitCompletions(server_.cq, 1);
  ASSERT_EQ(injected.size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(server_.buffer.data()), "injected");
}

TEST_F(FabricTest, RmaAndAtomics) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  const uint64_t remote = reinterpret_cast<uintptr_t>(server_.buffer.data());
  const uint64_t key = fi_mr_key(server_.mr);
  // RDMA WRITE of 64 KiB, then READ it back into another part of the buffer.
  for (size_t i = 0; i < 65536; ++i) client_.buffer[i] = static_cast<uint8_t>(i * 13);
  FI_OK(fi_write(client_.ep, client_.buffer.data(), 65536, fi_mr_desc(client_.mr), 0, remote + 8192, key, &client_));
  ASSERT_EQ(WaitCompletions(client_.cq, 1).size(), 1u);
  EXPECT_EQ(std::memcmp(server_.buffer.data() + 8192, client_.buffer.data(), 65536), 0);
  FI_OK(fi_read(client_.ep, client_.buffer.data() + 200000, 65536, fi_mr_desc(client_.mr), 0, remote + 8192, key,
                &client_));
  auto read = WaitCompletions(client_.cq, 1);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_TRUE(read[0].flags & FI_READ);
  EXPECT_EQ(std::memcmp(client_.buffer.data() + 200000, client_.buffer.data(), 65536), 0);
  // fi_writedata consumes a posted receive (FI_RX_CQ_DATA) and carries data.
  // (The receive posted before the accept is still there.)
  FI_OK(fi_writedata(client_.ep, client_.buffer.data(), 128, fi_mr_desc(client_.mr), 77, 0, remote + 100000, key,
                     &client_));
  auto wd = WaitCompletions(server_.cq, 1);
  ASSERT_EQ(wd.size(), 1u);
  EXPECT_TRUE(wd[0].flags & FI_REMOTE_CQ_DATA);
  EXPECT_EQ(wd[0].data, 77u);
  ASSERT_EQ(WaitCompletions(client_.cq, 1).size(), 1u);
  // Atomics on an 8-byte word of the server's buffer.
  uint64_t* word = reinterpret_cast<uint64_t*>(server_.buffer.data() + 1024);
  *word = 40;
  uint64_t* operand = reinterpret_cast<uint64_t*>(client_.buffer.data());
  uint64_t* result = reinterpret_cast<uint64_t*>(client_.buffer.data() + 64);
  uint64_t* compare = reinterpret_cast<uint64_t*>(client_.buffer.data() + 128);
  size_t count = 0;
  EXPECT_EQ(fi_fetch_atomicvalid(client_.ep, FI_UINT64, FI_SUM, &count), 0);
  EXPECT_EQ(count, 1u);
  EXPECT_NE(fi_atomicvalid(client_.ep, FI_UINT64, FI_SUM, &count), 0);
  *operand = 2;
  FI_OK(fi_fetch_atomic(client_.ep, operand, 1, fi_mr_desc(client_.mr), result, fi_mr_desc(client_.mr), 0,
                        remote + 1024, key, FI_UINT64, FI_SUM, &client_));
  ASSERT_EQ(WaitCompletions(client_.cq, 1).size(), 1u);
  EXPECT_EQ(*result, 40u);
  EXPECT_EQ(*word, 42u);
  *operand = 1000;
  *compare = 42;
  FI_OK(fi_compare_atomic(client_.ep, operand, 1, fi_mr_desc(client_.mr), compare, fi_mr_desc(client_.mr), result,
                          fi_mr_desc(client_.mr), 0, remote + 1024, key, FI_UINT64, FI_CSWAP, &client_));
  ASSERT_EQ(WaitCompletions(client_.cq, 1).size(), 1u);
  EXPECT_EQ(*result, 42u);
  EXPECT_EQ(*word, 1000u);
}

// An fi_inject that fails asks for no completion, and gets none: ofi_rxm
// would take an error entry's op_context for one of its own buffers. The
// failure shows as libfabric's verbs provider shows it: the QP is in error,
// and the receive posted before comes back flushed with its own context.
TEST_F(FabricTest, AFailedInjectLeavesNoEntryWithoutAContext) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  FI_OK(fi_recv(client_.ep, client_.buffer.data(), 64, fi_mr_desc(client_.mr), 0, &client_));
  const uint64_t remote = reinterpret_cast<uintptr_t>(server_.buffer.data());
  const uint64_t wrong_key = fi_mr_key(server_.mr) ^ 0x5a5a;
  const char small[16] = "nowhere";
  FI_OK(fi_inject_write(client_.ep, small, sizeof(small), 0, remote, wrong_key));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  fi_cq_data_entry entry{};
  ssize_t n = -FI_EAGAIN;
  while (n == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) n = fi_cq_read(client_.cq, &entry, 1);
  ASSERT_EQ(n, -FI_EAVAIL) << (n > 0 ? "a completion nobody asked for" : fi_strerror(static_cast<int>(-n)));
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(client_.cq, &err, 0), 1);
  EXPECT_EQ(err.op_context, &client_);
  EXPECT_EQ(err.err, FI_ECANCELED) << fi_strerror(err.err);
  EXPECT_TRUE(err.flags & FI_RECV);
  // Nothing else comes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fi_cq_read(client_.cq, &entry, 1), -FI_EAGAIN);
}

TEST_F(FabricTest, ShutdownReachesBothSides) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  FI_OK(fi_shutdown(client_.ep, 0));
  Event local = WaitEvent(client_.eq);
  EXPECT_FALSE(local.is_error);
  EXPECT_EQ(local.type, FI_SHUTDOWN);
  Event remote = WaitEvent(server_.eq);
  EXPECT_FALSE(remote.is_error);
  EXPECT_EQ(remote.type, FI_SHUTDOWN);
  EXPECT_EQ(remote.entry.fid, &server_.ep->fid);
  // The receive posted before the accept is flushed with an error.
  fi_cq_data_entry entry;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  ssize_t n = -FI_EAGAIN;
  while (n == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) n = fi_cq_read(server_.cq, &entry, 1);
  EXPECT_EQ(n, -FI_EAVAIL);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(server_.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECANCELED);
}

TEST_F(FabricTest, RejectCarriesData) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  ASSERT_NO_FATAL_FAILURE(OpenEndpoint(client_, client_.info));
  FI_OK(fi_connect(client_.ep, &addr, nullptr, 0));
  Event req = WaitEvent(server_.eq);
  ASSERT_EQ(req.type, FI_CONNREQ);
  const char no[] = "go away";
  FI_OK(fi_reject(pep_, req.entry.info->handle, no, sizeof(no)));
  fi_freeinfo(req.entry.info);
  Event refused = WaitEvent(client_.eq);
  ASSERT_TRUE(refused.is_error);
  EXPECT_EQ(refused.error.err, FI_ECONNREFUSED);
  EXPECT_EQ(refused.error.fid, &client_.ep->fid);
  EXPECT_EQ(refused.error_data, std::string(no, sizeof(no)));
}

// fi_cm(3) / fi_eq(3): connection data arrives as long as the peer made it
// (the event is the fi_eq_cm_entry plus the data; a rejection's err_data is
// fi_reject's data), not padded to the IB CM field that carried it (REQ 56,
// REP 196, REJ 148 bytes: what arrived before the length went in with it).
// The limits are the fields less the length byte: FI_OPT_CM_DATA_SIZE (55,
// fi_connect's and the smallest) is honoured, one byte more is -FI_EINVAL.
TEST_F(FabricTest, ConnectionDataArrivesAsLongAsItWasSent) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  size_t max_connect = 0, len = sizeof(max_connect);
  FI_OK(fi_getopt(&pep_->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max_connect, &len));
  EXPECT_EQ(max_connect, 55u);
  // fi_reject with 1 byte: err_data of 1 byte.
  fid_ep* first = OpenExtra(client_, client_.info, client_.eq);
  ASSERT_NE(first, nullptr);
  FI_OK(fi_connect(first, &addr, nullptr, 0));
  Event req = WaitEvent(server_.eq);
  ASSERT_EQ(req.type, FI_CONNREQ);
  EXPECT_EQ(req.data.size(), 0u);  // fi_connect without data: none
  const char one = 'x';
  FI_OK(fi_reject(pep_, req.entry.info->handle, &one, 1));
  fi_freeinfo(req.entry.info);
  Event refused = WaitEvent(client_.eq);
  ASSERT_TRUE(refused.is_error);
  EXPECT_EQ(refused.error.err, FI_ECONNREFUSED);
  EXPECT_EQ(refused.error.err_data_size, 1u);
  EXPECT_EQ(refused.error_data, "x");
  // The same with err_data_size 0 on input: the provider's buffer, 1 byte.
  fid_ep* second = OpenExtra(client_, client_.info, client_.eq);
  ASSERT_NE(second, nullptr);
  FI_OK(fi_connect(second, &addr, nullptr, 0));
  req = WaitEvent(server_.eq);
  ASSERT_EQ(req.type, FI_CONNREQ);
  const char three[] = {'a', 'b', 'c'};
  FI_OK(fi_reject(pep_, req.entry.info->handle, three, sizeof(three)));
  fi_freeinfo(req.entry.info);
  uint32_t type = 0;
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  ssize_t n = -FI_EAGAIN;
  while ((n == -FI_EAGAIN || n == -FI_ETIMEDOUT) && std::chrono::steady_clock::now() < deadline) {
    n = fi_eq_sread(client_.eq, &type, buf, sizeof(buf), 100, 0);
  }
  ASSERT_EQ(n, -FI_EAVAIL);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(client_.eq, &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  ASSERT_EQ(err.err_data_size, sizeof(three));
  EXPECT_EQ(std::memcmp(err.err_data, three, sizeof(three)), 0);
  // fi_connect with 10 bytes: FI_CONNREQ with 10; fi_accept with the most
  // (195): FI_CONNECTED with 195.
  fid_ep* caller = OpenExtra(client_, client_.info, client_.eq);
  ASSERT_NE(caller, nullptr);
  std::vector<char> too_long(max_connect + 1, 'L');
  EXPECT_EQ(fi_connect(caller, &addr, too_long.data(), too_long.size()), -FI_EINVAL);
  const char ten[] = "0123456789";
  FI_OK(fi_connect(caller, &addr, ten, 10));
  req = WaitEvent(server_.eq);
  ASSERT_FALSE(req.is_error);
  ASSERT_EQ(req.type, FI_CONNREQ);
  EXPECT_EQ(req.data, std::string(ten, 10));
  fid_ep* answer = OpenExtra(server_, req.entry.info, server_.eq);
  fi_freeinfo(req.entry.info);
  ASSERT_NE(answer, nullptr);
  std::string most(195, '\0');
  for (size_t i = 0; i < most.size(); ++i) most[i] = static_cast<char>('A' + i % 26);
  const std::string too_much = most + "!";
  EXPECT_EQ(fi_accept(answer, too_much.data(), too_much.size()), -FI_EINVAL);
  FI_OK(fi_accept(answer, most.data(), most.size()));
  Event connected = WaitEvent(client_.eq);
  ASSERT_FALSE(connected.is_error) << fi_strerror(connected.error.err);
  ASSERT_EQ(connected.type, FI_CONNECTED);
  EXPECT_EQ(connected.entry.fid, &caller->fid);
  EXPECT_EQ(connected.data, most);
  Event accepted = WaitEvent(server_.eq);
  ASSERT_FALSE(accepted.is_error);
  EXPECT_EQ(accepted.type, FI_CONNECTED);
  EXPECT_EQ(accepted.data.size(), 0u);
}

TEST_F(FabricTest, NobodyListening) {
  ASSERT_NO_FATAL_FAILURE(OpenEndpoint(client_, client_.info));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(1);
  inet_pton(AF_INET, "10.99.0.2", &addr.sin_addr);
  FI_OK(fi_connect(client_.ep, &addr, nullptr, 0));
  Event refused = WaitEvent(client_.eq);
  ASSERT_TRUE(refused.is_error);
  EXPECT_EQ(refused.error.err, FI_ECONNREFUSED);
}

TEST_F(FabricTest, BadArgumentsGetErrorCodes) {
  fid_ep* ep = nullptr;
  FI_OK(fi_endpoint(client_.domain, client_.info, &ep, nullptr));
  // No EQ bound: an FI_EP_MSG endpoint cannot be enabled.
  EXPECT_EQ(fi_enable(ep), -FI_ENOEQ);
  FI_OK(fi_ep_bind(ep, &client_.eq->fid, 0));
  FI_OK(fi_ep_bind(ep, &client_.cq->fid, FI_TRANSMIT | FI_RECV));
  // Data before enable/connection.
  EXPECT_EQ(fi_send(ep, client_.buffer.data(), 8, fi_mr_desc(client_.mr), 0, nullptr), -FI_EOPBADSTATE);
  FI_OK(fi_enable(ep));
  EXPECT_EQ(fi_send(ep, client_.buffer.data(), 8, fi_mr_desc(client_.mr), 0, nullptr), -FI_EOPBADSTATE);
  // Too much connection data.
  std::vector<char> big(200);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  EXPECT_EQ(fi_connect(ep, &addr, big.data(), big.size()), -FI_EINVAL);
  // A receive without a descriptor (FI_MR_LOCAL).
  EXPECT_EQ(fi_recv(ep, client_.buffer.data(), 64, nullptr, 0, nullptr), -FI_EINVAL);
  // The CQ is bound: it cannot close.
  EXPECT_EQ(fi_close(&client_.cq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ep->fid), 0);
}

// fi_endpoint(3) FI_BACKLOG, fi_cm(3) fi_listen. A listener with a backlog
// of 4 and 12 callers nobody answers yet: at most 4 FI_CONNREQs are queued,
// the other 8 callers are refused at once (an FI_ECONNREFUSED error event on
// their EQ, not a wait until they time out); once the application has
// answered the 4 the listener takes requests again. (Without the bound every
// request was queued until the EQ overran, and an overrun EQ, fi_eq(3),
// stays so: the listener never reported another request.)
TEST_F(FabricTest, BacklogBoundsQueuedRequestsAndTheListenerGoesOn) {
  constexpr size_t kBacklog = 4;
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr, static_cast<int>(kBacklog)));
  std::vector<fid_ep*> eps;
  for (int i = 0; i < 12; ++i) {
    eps.push_back(OpenExtra(client_, client_.info, client_.eq));
    ASSERT_NE(eps.back(), nullptr);
  }
  Wave wave;
  ASSERT_NO_FATAL_FAILURE(ConnectWave(eps, addr, server_.eq, &wave));
  ASSERT_EQ(wave.requests.size(), kBacklog);
  EXPECT_EQ(wave.refused.size(), eps.size() - kBacklog);
  // The application answers: the first accepted, the others rejected with
  // data, which their callers get.
  fid_ep* answer = OpenExtra(server_, wave.requests[0].entry.info, server_.eq);
  ASSERT_NE(answer, nullptr);
  FI_OK(fi_accept(answer, nullptr, 0));
  const char busy[] = "busy";
  for (size_t i = 1; i < wave.requests.size(); ++i) {
    FI_OK(fi_reject(pep_, wave.requests[i].entry.info->handle, busy, sizeof(busy)));
  }
  for (Event& request : wave.requests) fi_freeinfo(request.entry.info);
  size_t connected = 0, rejected = 0;
  for (size_t i = 0; i < wave.requests.size(); ++i) {
    Event outcome = WaitEvent(client_.eq);
    if (!outcome.is_error) {
      EXPECT_EQ(outcome.type, FI_CONNECTED);
      EXPECT_EQ(outcome.entry.fid, &eps[wave.request_caller[0]]->fid);
      ++connected;
    } else {
      EXPECT_EQ(outcome.error.err, FI_ECONNREFUSED) << fi_strerror(outcome.error.err);
      EXPECT_EQ(outcome.error_data.substr(0, sizeof(busy)), std::string(busy, sizeof(busy)));
      ++rejected;
    }
  }
  EXPECT_EQ(connected, 1u);
  EXPECT_EQ(rejected, kBacklog - 1);
  Event accepted = WaitEvent(server_.eq);
  ASSERT_FALSE(accepted.is_error) << fi_strerror(accepted.error.err);
  EXPECT_EQ(accepted.type, FI_CONNECTED);
  EXPECT_EQ(accepted.entry.fid, &answer->fid);
  // Twelve callers, twelve outcomes: no late FI_CONNREQ, nothing else.
  Event late;
  EXPECT_EQ(TryEvent(server_.eq, &late, 300), 0) << "late event " << late.type;
  EXPECT_EQ(TryEvent(client_.eq, &late, 0), 0) << "late event " << late.type;
  for (size_t i = 0; i < eps.size(); ++i) {
    if (eps[i] != eps[wave.request_caller[0]]) {
      ASSERT_NO_FATAL_FAILURE(CloseExtra(eps[i]));
    }
  }
  // The answered requests freed their places: a second wave is bounded the
  // same way, not refused altogether.
  eps.clear();
  for (int i = 0; i < 6; ++i) {
    eps.push_back(OpenExtra(client_, client_.info, client_.eq));
    ASSERT_NE(eps.back(), nullptr);
  }
  Wave second;
  ASSERT_NO_FATAL_FAILURE(ConnectWave(eps, addr, server_.eq, &second));
  ASSERT_EQ(second.requests.size(), kBacklog);
  EXPECT_EQ(second.refused.size(), eps.size() - kBacklog);
  for (Event& request : second.requests) {
    FI_OK(fi_reject(pep_, request.entry.info->handle, nullptr, 0));
    fi_freeinfo(request.entry.info);
  }
  for (size_t i = 0; i < second.requests.size(); ++i) {
    Event outcome = WaitEvent(client_.eq);
    ASSERT_TRUE(outcome.is_error) << outcome.type;
    EXPECT_EQ(outcome.error.err, FI_ECONNREFUSED);
  }
  // And a caller that is answered connects.
  ASSERT_NO_FATAL_FAILURE(ConnectOnce(addr, server_.eq));
}

// fi_eq(3): an EQ holds attr.size events, and a write beyond that overruns it
// for good. A listener on an EQ of 8 events has at most half of it in
// FI_CONNREQs at once and refuses the rest, so 5 waves of 10 callers (each
// wave alone more requests than the EQ holds) never overrun it (TryEvent
// fails on -FI_EOVERRUN), and it still takes a connection afterwards.
TEST_F(FabricTest, ListenerOnASmallEqSurvivesMoreRequestsThanItHolds) {
  constexpr size_t kEqSize = 8;
  fid_eq* small = OpenEq(kEqSize);
  ASSERT_NE(small, nullptr);
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr, 0, small));
  size_t queued = 0;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("wave " + std::to_string(round));
    std::vector<fid_ep*> eps;
    for (int i = 0; i < 10; ++i) {
      eps.push_back(OpenExtra(client_, client_.info, client_.eq));
      ASSERT_NE(eps.back(), nullptr);
    }
    Wave wave;
    ASSERT_NO_FATAL_FAILURE(ConnectWave(eps, addr, small, &wave));
    EXPECT_GE(wave.requests.size(), 1u);
    EXPECT_LE(wave.requests.size(), kEqSize / 2);
    queued += wave.requests.size();
    for (Event& request : wave.requests) {
      FI_OK(fi_reject(pep_, request.entry.info->handle, nullptr, 0));
      fi_freeinfo(request.entry.info);
    }
    for (size_t i = 0; i < wave.requests.size(); ++i) {
      Event outcome = WaitEvent(client_.eq);
      ASSERT_TRUE(outcome.is_error) << outcome.type;
      EXPECT_EQ(outcome.error.err, FI_ECONNREFUSED);
    }
    for (fid_ep* ep : eps) {
      ASSERT_NO_FATAL_FAILURE(CloseExtra(ep));
    }
  }
  EXPECT_GT(queued, kEqSize);
  // The accepted endpoint's events go to the same small EQ.
  ASSERT_NO_FATAL_FAILURE(ConnectOnce(addr, small));
}

// fi_cm(3): fi_connect is asynchronous, its outcome an EQ event. To an
// address nobody answers ARP for, the call returns at once (the address is
// resolved on the provider's resolver thread, which gives up after the
// resolver's 3 s), and the EQ then reports FI_EHOSTUNREACH. Meanwhile the
// connection manager goes on: another connection is set up, start to end,
// before that error comes; and an endpoint closed while its address is being
// resolved hears nothing more.
TEST_F(FabricTest, ConnectToAnAddressNobodyAnswersFailsOnTheEqAndBlocksNothing) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  // One connection first, so that the listener's MAC is known: the resolver
  // thread, like the port's ARP, resolves one address at a time, and what is
  // tested here is the connection manager, not that queue.
  ASSERT_NO_FATAL_FAILURE(ConnectOnce(addr, server_.eq));
  fid_eq* lost_eq = OpenEq(0);
  ASSERT_NE(lost_eq, nullptr);
  fid_ep* lost = OpenExtra(client_, client_.info, lost_eq);
  ASSERT_NE(lost, nullptr);
  fid_ep* closed = OpenExtra(client_, client_.info, lost_eq);
  ASSERT_NE(closed, nullptr);
  // On the ring's subnet (10.99.0.1 and .2), held by nobody; each used once
  // (the resolver remembers a failure for a while).
  sockaddr_in nowhere{};
  nowhere.sin_family = AF_INET;
  nowhere.sin_port = htons(4791);
  ASSERT_EQ(inet_pton(AF_INET, "10.99.0.77", &nowhere.sin_addr), 1);
  const auto start = std::chrono::steady_clock::now();
  FI_OK(fi_connect(lost, &nowhere, nullptr, 0));
  const auto call = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(inet_pton(AF_INET, "10.99.0.78", &nowhere.sin_addr), 1);
  FI_OK(fi_connect(closed, &nowhere, nullptr, 0));
  ASSERT_NO_FATAL_FAILURE(CloseExtra(closed));
  // Nobody has answered yet (that takes the resolver's seconds): the call
  // did not wait for it, and nothing is on the EQ.
  Event ev;
  EXPECT_EQ(TryEvent(lost_eq, &ev, 0), 0) << "fi_connect waited for the resolution";
  ASSERT_NO_FATAL_FAILURE(ConnectOnce(addr, server_.eq));
  EXPECT_EQ(TryEvent(lost_eq, &ev, 0), 0) << "the other connection waited for the resolution";
  Event unreachable = WaitEvent(lost_eq);
  ASSERT_TRUE(unreachable.is_error) << "event " << unreachable.type;
  EXPECT_EQ(unreachable.error.err, FI_EHOSTUNREACH) << fi_strerror(unreachable.error.err);
  EXPECT_EQ(unreachable.error.fid, &lost->fid);
  std::printf("fi_connect to 10.99.0.77 returned in %.3f ms; FI_EHOSTUNREACH after %.3f s\n",
              std::chrono::duration<double, std::milli>(call).count(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  // Only that one error: the closed endpoint's resolution reports nothing.
  EXPECT_EQ(TryEvent(lost_eq, &ev, 0), 0) << "event " << ev.type;
}

// The provider knows each EQ's size (a listener takes at most half of it in
// requests) from the EQ object itself, so fi_close of an EQ leaves nothing
// behind: 10,000 EQs of assorted sizes opened and closed; then an EQ opened
// right after a 2-event one was closed (most likely at its address) listens
// with its own size (a backlog of 3 holds 3 requests, not the 1 of a 2-event
// EQ), and connections work.
TEST_F(FabricTest, TenThousandEqsOpenedAndClosedLeaveNothingBehind) {
  for (int i = 0; i < 10000; ++i) {
    fi_eq_attr attr{};
    attr.size = i % 3 == 0 ? 0 : static_cast<size_t>(i % 64) + 1;
    attr.wait_obj = i % 2 == 0 ? FI_WAIT_NONE : FI_WAIT_UNSPEC;
    fid_eq* eq = nullptr;
    ASSERT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), 0) << i;
    ASSERT_EQ(fi_close(&eq->fid), 0) << i;
  }
  fi_eq_attr tiny_attr{};
  tiny_attr.size = 2;
  fid_eq* tiny = nullptr;
  FI_OK(fi_eq_open(fabric_, &tiny_attr, &tiny, nullptr));
  FI_OK(fi_close(&tiny->fid));
  fid_eq* eq = OpenEq(0);
  ASSERT_NE(eq, nullptr);
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr, 3, eq));
  std::vector<fid_ep*> eps;
  for (int i = 0; i < 5; ++i) {
    eps.push_back(OpenExtra(client_, client_.info, client_.eq));
    ASSERT_NE(eps.back(), nullptr);
  }
  Wave wave;
  ASSERT_NO_FATAL_FAILURE(ConnectWave(eps, addr, eq, &wave));
  EXPECT_EQ(wave.requests.size(), 3u);
  for (Event& request : wave.requests) {
    FI_OK(fi_reject(pep_, request.entry.info->handle, nullptr, 0));
    fi_freeinfo(request.entry.info);
  }
  for (size_t i = 0; i < wave.requests.size(); ++i) {
    Event outcome = WaitEvent(client_.eq);
    ASSERT_TRUE(outcome.is_error) << outcome.type;
    EXPECT_EQ(outcome.error.err, FI_ECONNREFUSED);
  }
  ASSERT_NO_FATAL_FAILURE(ConnectOnce(addr, eq));
}

// fi_cm(3): an FI_CONNREQ's info and handle are the application's once it
// reads the event. A listener closed with a request still queued, never
// read, takes it along: the provider frees it and refuses the caller at once
// with a consumer reject (IBTA 12.6.7 table 112, reason 28), rather than
// leaking it (AddressSanitizer's leak check sees that) and leaving the caller
// to its timeout (FI_ETIMEDOUT) or the request's expiry (REJ reason 4).
TEST_F(FabricTest, ListenerClosedWithARequestQueuedRefusesItsCaller) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  fid_ep* caller = OpenExtra(client_, client_.info, client_.eq);
  ASSERT_NE(caller, nullptr);
  FI_OK(fi_connect(caller, &addr, nullptr, 0));
  // Queued (FI_PEEK leaves it there), then the listener goes.
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 256];
  uint32_t type = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  ssize_t n = -FI_EAGAIN;
  while (n == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) {
    n = fi_eq_read(server_.eq, &type, buf, sizeof(buf), FI_PEEK);
  }
  ASSERT_GE(n, static_cast<ssize_t>(sizeof(fi_eq_cm_entry))) << fi_strerror(static_cast<int>(-n));
  ASSERT_EQ(type, FI_CONNREQ);
  FI_OK(fi_close(&pep_->fid));
  pep_ = nullptr;
  Event ev;
  EXPECT_EQ(TryEvent(server_.eq, &ev, 0), 0) << "the closed listener's event is still queued";
  Event refused = WaitEvent(client_.eq);
  ASSERT_TRUE(refused.is_error) << "event " << refused.type;
  EXPECT_EQ(refused.error.fid, &caller->fid);
  EXPECT_EQ(refused.error.err, FI_ECONNREFUSED) << fi_strerror(refused.error.err);
  EXPECT_EQ(refused.error.prov_errno, 28);
}

// fi_eq(3) / fi_poll(3): an EQ opened with FI_WAIT_UNSPEC has an fd
// (FI_GETWAIT) that epoll sees readable when the provider queues FI_CONNREQ,
// after fi_trywait on the fabric said it may block. (The server's EQ here is
// FI_WAIT_UNSPEC; it was a mutex/cond, and FI_GETWAIT gave no fd.)
TEST_F(FabricTest, UnspecWaitEqIsAnFdThatEpollSeesAConnectionRequestOn) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  const int ep = uroce::testing::EpollOnWaitFd(&server_.eq->fid);
  ASSERT_GE(ep, 0);
  fid* fids[] = {&server_.eq->fid};
  FI_OK(fi_trywait(fabric_, fids, 1));
  epoll_event out{};
  EXPECT_EQ(epoll_wait(ep, &out, 1, 0), 0);
  ASSERT_NO_FATAL_FAILURE(OpenEndpoint(client_, client_.info));
  FI_OK(fi_connect(client_.ep, &addr, nullptr, 0));
  EXPECT_EQ(epoll_wait(ep, &out, 1, kTimeoutMs), 1) << "no wake-up for FI_CONNREQ";
  close(ep);
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), -FI_EAGAIN);
  Event req;
  ASSERT_EQ(TryEvent(server_.eq, &req, 0), 1);
  ASSERT_EQ(req.type, FI_CONNREQ);
  FI_OK(fi_reject(pep_, req.entry.info->handle, nullptr, 0));
  fi_freeinfo(req.entry.info);
  Event refused = WaitEvent(client_.eq);
  EXPECT_TRUE(refused.is_error);
}

// What the fabtests found: an FI_EP_RDM server over uroce;ofi_rxm (manual
// progress) blocked in fi_cq_sread never saw the client's FI_CONNREQ, so the
// first message never arrived. ofi_rxm waits on an epoll set holding its core
// EQ's and CQ's wait objects (fi_control FI_GETWAIT, then fi_trywait); the
// core EQ it opens is FI_WAIT_UNSPEC, which was a mutex/cond ("unsupported
// wait object 4"). Now an fd: the server wakes for the request, accepts, and
// its fi_cq_sread returns the message.
TEST(RxmOverUroce, ServerBlockedInCqSreadGetsTheFirstMessage) {
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("uroce;ofi_rxm");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->addr_format = FI_SOCKADDR_IN;
  fi_info* infos = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &infos), 0) << "no uroce;ofi_rxm";
  fi_freeinfo(hints);
  fi_info* client_info = nullptr;
  fi_info* server_info = nullptr;
  for (fi_info* i = infos; i != nullptr; i = i->next) {
    if (std::string(i->domain_attr->name) == "uroce0" && client_info == nullptr) client_info = i;
    if (std::string(i->domain_attr->name) == "uroce1" && server_info == nullptr) server_info = i;
  }
  ASSERT_NE(client_info, nullptr);
  ASSERT_NE(server_info, nullptr);
  fid_fabric* fabric = nullptr;
  FI_OK(fi_fabric(server_info->fabric_attr, &fabric, nullptr));
  struct Rdm {
    fid_domain* domain = nullptr;
    fid_av* av = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
    fid_mr* mr = nullptr;
    char buf[64] = {};
  } server, client;
  for (auto [side, info, wait] : {std::make_tuple(&server, server_info, FI_WAIT_UNSPEC),
                                  std::make_tuple(&client, client_info, FI_WAIT_NONE)}) {
    FI_OK(fi_domain(fabric, info, &side->domain, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_MAP;
    FI_OK(fi_av_open(side->domain, &av_attr, &side->av, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = wait;
    cq_attr.size = 64;
    FI_OK(fi_cq_open(side->domain, &cq_attr, &side->cq, nullptr));
    FI_OK(fi_endpoint(side->domain, info, &side->ep, nullptr));
    FI_OK(fi_ep_bind(side->ep, &side->av->fid, 0));
    FI_OK(fi_ep_bind(side->ep, &side->cq->fid, FI_TRANSMIT | FI_RECV));
    FI_OK(fi_enable(side->ep));
    FI_OK(fi_mr_reg(side->domain, side->buf, sizeof(side->buf), FI_SEND | FI_RECV, 0, 0, 0, &side->mr, nullptr));
  }
  char name[64];
  size_t len = sizeof(name);
  FI_OK(fi_getname(&server.ep->fid, name, &len));
  fi_addr_t server_addr = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(client.av, name, 1, &server_addr, 0, nullptr), 1);
  fi_context recv_ctx{}, send_ctx{};
  FI_OK(fi_recv(server.ep, server.buf, sizeof(server.buf), fi_mr_desc(server.mr), FI_ADDR_UNSPEC, &recv_ctx));
  std::strcpy(client.buf, "first message");
  // The client drives its own progress (manual) while the server blocks.
  std::atomic<bool> stop{false};
  std::thread client_thread([&] {
    ssize_t r = -FI_EAGAIN;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
    while (r == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) {
      r = fi_send(client.ep, client.buf, std::strlen(client.buf) + 1, fi_mr_desc(client.mr), server_addr, &send_ctx);
      fi_cq_entry entry;
      if (r == -FI_EAGAIN) (void)fi_cq_read(client.cq, &entry, 1);
    }
    EXPECT_EQ(r, 0) << fi_strerror(static_cast<int>(-r));
    while (!stop.load()) {
      fi_cq_entry entry;
      (void)fi_cq_read(client.cq, &entry, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  fi_cq_entry entry{};
  ssize_t n = -FI_EAGAIN;
  const auto start = std::chrono::steady_clock::now();
  // Blocks in fi_cq_sread: progress happens only when ofi_rxm's epoll wakes.
  while ((n == -FI_EAGAIN || n == -FI_ETIMEDOUT) &&
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(10000)) {
    n = fi_cq_sread(server.cq, &entry, 1, nullptr, 10000);
  }
  stop.store(true);
  client_thread.join();
  ASSERT_EQ(n, 1) << "fi_cq_sread: " << fi_strerror(static_cast<int>(-n));
  EXPECT_EQ(entry.op_context, &recv_ctx);
  EXPECT_STREQ(server.buf, "first message");
  for (Rdm* side : {&client, &server}) {
    EXPECT_EQ(fi_close(&side->ep->fid), 0);
    EXPECT_EQ(fi_close(&side->mr->fid), 0);
    EXPECT_EQ(fi_close(&side->cq->fid), 0);
    EXPECT_EQ(fi_close(&side->av->fid), 0);
    EXPECT_EQ(fi_close(&side->domain->fid), 0);
  }
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(infos);
}

// fi_cm(3): the listener answers a request when it chooses. A server that
// takes 10 s to fi_accept (the caller's REQ retries alone last ~1 s) still
// connects: its connection manager answers the caller's repeated REQ with an
// MRA (IBTA 12.6.6, 69 s, as the kernel's rdma_cm sends) and the caller
// waits that long, as a kernel caller does. (Before, an MRA bought at most
// 8 s: the caller gave up, FI_ETIMEDOUT, and the late accept failed.)
TEST_F(FabricTest, ServerTenSecondsLateToAcceptStillConnects) {
  sockaddr_in addr{};
  ASSERT_NO_FATAL_FAILURE(Listen(&addr));
  ASSERT_NO_FATAL_FAILURE(OpenEndpoint(client_, client_.info));
  FI_OK(fi_connect(client_.ep, &addr, nullptr, 0));
  Event req = WaitEvent(server_.eq);
  ASSERT_FALSE(req.is_error);
  ASSERT_EQ(req.type, FI_CONNREQ);
  const auto late = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < late) {
    Event ev;
    ASSERT_EQ(TryEvent(client_.eq, &ev, 500), 0) << "the caller gave up: "
                                                 << (ev.is_error ? fi_strerror(ev.error.err) : "event");
  }
  ASSERT_NO_FATAL_FAILURE(OpenEndpoint(server_, req.entry.info));
  fi_freeinfo(req.entry.info);
  FI_OK(fi_accept(server_.ep, nullptr, 0));
  Event connected = WaitEvent(client_.eq);
  ASSERT_FALSE(connected.is_error) << fi_strerror(connected.error.err);
  EXPECT_EQ(connected.type, FI_CONNECTED);
  Event accepted = WaitEvent(server_.eq);
  ASSERT_FALSE(accepted.is_error) << fi_strerror(accepted.error.err);
  EXPECT_EQ(accepted.type, FI_CONNECTED);
}

}  // namespace
