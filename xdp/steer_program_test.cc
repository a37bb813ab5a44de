// Runs the compiled XDP program (xdp/uroce_steer.bpf.c, as the daemon
// carries it) in the kernel with BPF_PROG_TEST_RUN (bpf(2);
// bpf_prog_test_run_opts in libbpf) on crafted frames: RoCE for the
// uplink's addresses never goes to the kernel (XDP_PASS) unless the program
// steers it to a socket, and everything else does.
//
// Needs root (CAP_BPF and CAP_NET_ADMIN): skipped otherwise. The test moves
// itself into a network namespace of its own (unshare(2)), where it creates
// a veth with 128 receive queues: BPF_PROG_TEST_RUN takes the frame's
// rx_queue_index only for a real ingress device with that many queues. The
// namespace and the veth go away with the test process.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "xdp/steer_program.h"

namespace uroce::xdp {
namespace {

constexpr uint8_t kOurMac[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0a};
constexpr uint8_t kOtherMac[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0b};
constexpr uint8_t kOurIpv4[4] = {10, 75, 0, 1};
constexpr uint8_t kOtherIpv4[4] = {10, 75, 1, 2};
constexpr uint8_t kOurIpv6[16] = {0xfd, 0x75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr uint8_t kOtherIpv6[16] = {0xfd, 0x75, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
constexpr uint16_t kRoce = 4791;
constexpr uint32_t kQueues = 128;

std::array<uint8_t, 16> MappedIpv4(const uint8_t (&ip)[4]) {
  std::array<uint8_t, 16> gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  std::memcpy(&gid[12], ip, 4);
  return gid;
}

void Put16(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v);
}

// Ethernet II, IPv4 (no options), UDP, and a BTH-sized payload. Checksums
// stay zero: the program does not read them.
std::vector<uint8_t> Ipv4Frame(const uint8_t (&mac)[6], const uint8_t (&dst)[4], uint16_t port) {
  std::vector<uint8_t> f(14 + 20 + 8 + 12 + 4, 0);
  std::memcpy(&f[0], mac, 6);
  std::memcpy(&f[6], kOtherMac, 6);
  Put16(f, 12, 0x0800);
  f[14] = 0x45;
  Put16(f, 16, static_cast<uint16_t>(f.size() - 14));
  f[22] = 64;
  f[23] = 17;  // UDP
  f[26] = 10;
  f[27] = 75;
  f[28] = 0;
  f[29] = 9;
  std::memcpy(&f[30], dst, 4);
  Put16(f, 34, 49152);
  Put16(f, 36, port);
  Put16(f, 38, static_cast<uint16_t>(f.size() - 34));
  return f;
}

std::vector<uint8_t> Ipv6Frame(const uint8_t (&mac)[6], const uint8_t (&dst)[16], uint16_t port) {
  std::vector<uint8_t> f(14 + 40 + 8 + 12 + 4, 0);
  std::memcpy(&f[0], mac, 6);
  std::memcpy(&f[6], kOtherMac, 6);
  Put16(f, 12, 0x86dd);
  f[14] = 0x60;
  Put16(f, 18, static_cast<uint16_t>(f.size() - 54));
  f[20] = 17;  // UDP
  f[21] = 64;
  f[22] = 0xfd;
  f[23] = 0x75;
  f[37] = 9;
  std::memcpy(&f[38], dst, 16);
  Put16(f, 54, 49152);
  Put16(f, 56, port);
  Put16(f, 58, static_cast<uint16_t>(f.size() - 54));
  return f;
}

class SteerProgramTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) {
      skip_ = "needs root (CAP_BPF, CAP_NET_ADMIN)";
      return;
    }
    // A namespace of our own, so the veth below never meets the host's
    // interfaces; one thread here, so the whole process moves.
    if (unshare(CLONE_NEWNET) != 0) {
      skip_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    const char* ip = access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip";
    const std::string add = std::string(ip) + " link add uxt0 numrxqueues " + std::to_string(kQueues) +
                            " numtxqueues " + std::to_string(kQueues) + " type veth peer name uxt1";
    if (std::system(add.c_str()) != 0) {
      skip_ = "cannot create a veth (" + add + ")";
      return;
    }
    if_index_ = if_nametoindex("uxt0");
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_NE(if_index_, 0u);
    const std::string_view object = SteerProgramObject();
    object_ = bpf_object__open_mem(object.data(), object.size(), nullptr);
    ASSERT_NE(object_, nullptr) << "libbpf cannot read the object";
    const int loaded = bpf_object__load(object_);
    if (loaded == -EPERM) GTEST_SKIP() << "no CAP_BPF";
    ASSERT_EQ(loaded, 0) << "the verifier refused the program: " << std::strerror(-loaded);
    bpf_program* program = bpf_object__find_program_by_name(object_, kSteerProgramName);
    ASSERT_NE(program, nullptr);
    program_fd_ = bpf_program__fd(program);
    for (const char* name : {kConfigMapName, kAddressesMapName, kCountersMapName, kSocketsMapName}) {
      ASSERT_NE(bpf_object__find_map_by_name(object_, name), nullptr) << name;
    }
    bpf_map* config = bpf_object__find_map_by_name(object_, kConfigMapName);
    ASSERT_EQ(bpf_map__value_size(config), sizeof(SteerConfig));
    config_fd_ = bpf_map__fd(config);
    addresses_fd_ = bpf_map__fd(bpf_object__find_map_by_name(object_, kAddressesMapName));
    counters_fd_ = bpf_map__fd(bpf_object__find_map_by_name(object_, kCountersMapName));
  }

  void TearDown() override { bpf_object__close(object_); }

  void AddAddress(const std::array<uint8_t, 16>& gid) {
    const uint8_t one = 1;
    ASSERT_EQ(bpf_map_update_elem(addresses_fd_, gid.data(), &one, BPF_ANY), 0);
  }
  void AddAddress(const uint8_t (&gid)[16]) {
    std::array<uint8_t, 16> a;
    std::memcpy(a.data(), gid, 16);
    AddAddress(a);
  }

  void Configure(bool enabled) {
    SteerConfig c{};
    std::memcpy(c.mac, kOurMac, 6);
    c.enabled = enabled ? 1 : 0;
    const uint32_t zero = 0;
    ASSERT_EQ(bpf_map_update_elem(config_fd_, &zero, &c, BPF_ANY), 0);
  }

  // Both addresses of ours, the MAC, enabled.
  void ConfigureAll() {
    AddAddress(MappedIpv4(kOurIpv4));
    AddAddress(kOurIpv6);
    Configure(true);
  }

  // The program's verdict on `frame` arriving on queue `queue` of the veth.
  int Run(std::vector<uint8_t> frame, uint32_t queue) {
    xdp_md ctx{};
    ctx.data_end = static_cast<uint32_t>(frame.size());  // the kernel wants data_end == the frame's size
    ctx.ingress_ifindex = if_index_;
    ctx.rx_queue_index = queue;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_size_in = static_cast<uint32_t>(frame.size()),
                .ctx_in = &ctx, .ctx_size_in = sizeof(ctx));
    const int err = bpf_prog_test_run_opts(program_fd_, &opts);
    EXPECT_EQ(err, 0) << std::strerror(-err);
    return err == 0 ? static_cast<int>(opts.retval) : -1;
  }

  uint64_t Counter(SteerCounter index) {
    const int cpus = libbpf_num_possible_cpus();
    std::vector<uint64_t> values(static_cast<size_t>(cpus > 0 ? cpus : 1));
    const uint32_t key = index;
    EXPECT_EQ(bpf_map_lookup_elem(counters_fd_, &key, values.data()), 0);
    uint64_t sum = 0;
    for (uint64_t v : values) sum += v;
    return sum;
  }

  static std::string skip_;
  static unsigned if_index_;
  bpf_object* object_ = nullptr;
  int program_fd_ = -1;
  int config_fd_ = -1;
  int addresses_fd_ = -1;
  int counters_fd_ = -1;
};

std::string SteerProgramTest::skip_;
unsigned SteerProgramTest::if_index_ = 0;

TEST_F(SteerProgramTest, RoceForOurAddressBeforeTheDaemonEnabledItIsDropped) {
  AddAddress(MappedIpv4(kOurIpv4));
  AddAddress(kOurIpv6);
  Configure(false);
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOurIpv4, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Run(Ipv6Frame(kOurMac, kOurIpv6, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Counter(kUnconfigured), 2u);
  EXPECT_EQ(Counter(kSteered), 0u);
}

TEST_F(SteerProgramTest, RoceOnAQueueWithNoSocketIsDropped) {
  ConfigureAll();
  // Queue 0 with an empty xsks_map (a stale program: its daemon's sockets
  // are gone), and queue 70, above the 64 sockets a daemon opens at most.
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOurIpv4, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOurIpv4, kRoce), 70), XDP_DROP);
  EXPECT_EQ(Run(Ipv6Frame(kOurMac, kOurIpv6, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Run(Ipv6Frame(kOurMac, kOurIpv6, kRoce), 70), XDP_DROP);
  EXPECT_EQ(Counter(kNoSocket), 4u);
  EXPECT_EQ(Counter(kNotOurs), 0u);
}

TEST_F(SteerProgramTest, RoceForAnotherAddressGoesToTheKernel) {
  ConfigureAll();
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOtherIpv4, kRoce), 70), XDP_PASS);
  EXPECT_EQ(Run(Ipv6Frame(kOurMac, kOtherIpv6, kRoce), 0), XDP_PASS);
  // Not ours whatever the MAC, and before the daemon configured anything.
  EXPECT_EQ(Run(Ipv4Frame(kOtherMac, kOtherIpv4, kRoce), 0), XDP_PASS);
  EXPECT_EQ(Counter(kNotOurs), 3u);
}

TEST_F(SteerProgramTest, RoceWithNoAddressConfiguredGoesToTheKernel) {
  // The moment between DPDK attaching the program and the daemon filling
  // uroce_addrs: nothing is ours yet (the daemon's UDP 4791 guard sockets
  // hold the port meanwhile).
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOurIpv4, kRoce), 0), XDP_PASS);
  EXPECT_EQ(Counter(kNotOurs), 1u);
}

TEST_F(SteerProgramTest, RoceForOurAddressToAnotherMacIsDropped) {
  ConfigureAll();
  EXPECT_EQ(Run(Ipv4Frame(kOtherMac, kOurIpv4, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Run(Ipv6Frame(kOtherMac, kOurIpv6, kRoce), 0), XDP_DROP);
  EXPECT_EQ(Counter(kBadMac), 2u);
  EXPECT_EQ(Counter(kNoSocket), 0u);
}

TEST_F(SteerProgramTest, OtherTrafficGoesToTheKernelUncounted) {
  ConfigureAll();
  EXPECT_EQ(Run(Ipv4Frame(kOurMac, kOurIpv4, 53), 70), XDP_PASS);
  EXPECT_EQ(Run(Ipv6Frame(kOurMac, kOurIpv6, 53), 0), XDP_PASS);
  std::vector<uint8_t> arp = Ipv4Frame(kOurMac, kOurIpv4, kRoce);
  Put16(arp, 12, 0x0806);
  EXPECT_EQ(Run(arp, 0), XDP_PASS);
  // A fragment (MF set): its UDP header is not where the program would look.
  std::vector<uint8_t> fragment = Ipv4Frame(kOurMac, kOurIpv4, kRoce);
  Put16(fragment, 20, 0x2000);
  EXPECT_EQ(Run(fragment, 0), XDP_PASS);
  // Cut in the UDP header.
  std::vector<uint8_t> cut = Ipv4Frame(kOurMac, kOurIpv4, kRoce);
  cut.resize(14 + 20 + 4);
  EXPECT_EQ(Run(cut, 0), XDP_PASS);
  for (SteerCounter c : {kSteered, kNotOurs, kNoSocket, kBadMac, kUnconfigured}) EXPECT_EQ(Counter(c), 0u) << c;
}

}  // namespace
}  // namespace uroce::xdp
