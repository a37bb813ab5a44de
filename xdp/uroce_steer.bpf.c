// uroce's XDP program for an uplink that shares a kernel interface
// (`uroce daemon`, `port = kernel:IFNAME`): RoCEv2 frames (UDP destination
// port 4791, IBTA A17.4.1) for the uplink's own addresses go to uroce's
// AF_XDP socket of the queue they arrived on; every other frame (ARP, ICMP,
// ssh, DNS, RoCE for an address that is not the uplink's: forwarded,
// bridged, a macvlan's) goes on to the kernel as if no program were
// attached.
//
// It fails closed: RoCE for the uplink's addresses never reaches the
// kernel, where any local user who bound UDP 4791 would read it. Such a
// frame is dropped when the program is not configured yet (the daemon fills
// the maps after DPDK attaches it), when it arrives on a queue with no
// uroce socket (RSS put it on a queue above those uroce opened, or the
// daemon died and its sockets are gone: a stale program drops RoCE for the
// host's addresses), or when it is not addressed to the interface's MAC.
//
// Same reading as the switch's (host/frame_switch.cc Inspect): untagged
// Ethernet II; IPv4 without fragments; IPv6 with UDP as the next header (as
// RoCEv2 sends it). DPDK's af_xdp driver loads it (its xdp_prog argument)
// and fills xsks_map, the map it looks for by that name; the daemon fills
// uroce_addrs and uroce_cfg (host/kernel_uplink.cc ConfigureSteering) and
// reads uroce_cnt for STATS. Map names stay under 16 bytes
// (BPF_OBJ_NAME_LEN), as the kernel reports them.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCE_V2_UDP_PORT 4791
#define MAX_QUEUES 256
#define MAX_ADDRESSES 64

// Counter indices of uroce_cnt; host/kernel_uplink.cc reads them in this order.
enum {
  CNT_STEERED = 0,       // RoCE for us, to the queue's socket
  CNT_NOT_OURS = 1,      // RoCE for another address: passed to the kernel
  CNT_NO_SOCKET = 2,     // RoCE for us on a queue with no socket: dropped
  CNT_BAD_MAC = 3,       // RoCE for our address but another MAC: dropped
  CNT_UNCONFIGURED = 4,  // RoCE for us before enabled was set: dropped
  CNT_COUNT = 5,
};

struct uroce_cfg {
  __u8 mac[6];
  __u8 enabled;  // 0 until the daemon filled uroce_addrs and mac
};

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct uroce_cfg);
} uroce_cfg SEC(".maps");

// The uplink's GIDs: an IPv6 address, or ::ffff:a.b.c.d for IPv4 (IBTA
// A17.8), as the daemon's GID table holds them.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, MAX_ADDRESSES);
  __type(key, __u8[16]);
  __type(value, __u8);
} uroce_addrs SEC(".maps");

// Per CPU, so the counting needs no atomic; the daemon sums the CPUs.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, CNT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} uroce_cnt SEC(".maps");

static __always_inline void count(__u32 index) {
  __u64 *c = bpf_map_lookup_elem(&uroce_cnt, &index);
  if (c) *c += 1;
}

// Byte by byte: BPF has no memcmp to call.
static __always_inline int same_mac(const __u8 *a, const __u8 *b) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

SEC("xdp")
int uroce_steer(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data;
  void *end = (void *)(long)ctx->data_end;
  struct ethhdr *eth = data;
  struct udphdr *udp;
  __u8 dst[16] = {};
  if ((void *)(eth + 1) > end) return XDP_PASS;
  if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end) return XDP_PASS;
    if (ip->version != 4 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
    if (ip->frag_off & bpf_htons(0x3fff)) return XDP_PASS;  // MF or an offset: a fragment
    if (ip->ihl < 5) return XDP_PASS;
    udp = (void *)((__u8 *)ip + ip->ihl * 4);
    dst[10] = 0xff;  // ::ffff:a.b.c.d (RFC 4291 2.5.5.2)
    dst[11] = 0xff;
    __builtin_memcpy(&dst[12], &ip->daddr, 4);
  } else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = (void *)(eth + 1);
    if ((void *)(ip6 + 1) > end) return XDP_PASS;
    if (ip6->nexthdr != IPPROTO_UDP) return XDP_PASS;
    udp = (void *)(ip6 + 1);
    __builtin_memcpy(dst, &ip6->daddr, 16);
  } else {
    return XDP_PASS;
  }
  if ((void *)(udp + 1) > end) return XDP_PASS;
  if (udp->dest != bpf_htons(ROCE_V2_UDP_PORT)) return XDP_PASS;
  // RoCE from here on. Another address's stays the kernel's (it routes or
  // bridges it, or delivers it to a socket of its own address).
  if (!bpf_map_lookup_elem(&uroce_addrs, dst)) {
    count(CNT_NOT_OURS);
    return XDP_PASS;
  }
  __u32 zero = 0;
  struct uroce_cfg *cfg = bpf_map_lookup_elem(&uroce_cfg, &zero);
  if (!cfg || !cfg->enabled) {
    count(CNT_UNCONFIGURED);
    return XDP_DROP;
  }
  if (!same_mac(eth->h_dest, cfg->mac)) {
    count(CNT_BAD_MAC);
    return XDP_DROP;
  }
  __u32 queue = ctx->rx_queue_index;
  if (!bpf_map_lookup_elem(&xsks_map, &queue)) {
    count(CNT_NO_SOCKET);
    return XDP_DROP;
  }
  count(CNT_STEERED);
  return bpf_redirect_map(&xsks_map, queue, XDP_DROP);
}

char _license[] SEC("license") = "Dual BSD/GPL";
