// uroce's XDP program for an uplink that shares a kernel interface
// (`uroce daemon`, `port = kernel:IFNAME`): RoCEv2 frames (UDP destination
// port 4791, IBTA A17.4.1) go to uroce's AF_XDP socket of the queue they
// arrived on; every other frame (ARP, ICMP, ssh, DNS, ...) goes on to the
// kernel as if no program were attached. A queue with no uroce socket, or a
// frame the program does not understand, also goes to the kernel
// (bpf_redirect_map's XDP_PASS fallback), so a stale program left by a
// daemon that died costs nothing but this parse.
//
// Same reading as the switch's (pmd/frame_switch.cc Inspect): untagged
// Ethernet II; IPv4 without fragments; IPv6 with UDP as the next header (as
// RoCEv2 sends it). DPDK's af_xdp driver loads it (its xdp_prog argument)
// and fills xsks_map, the map it looks for by that name.
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

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

SEC("xdp")
int uroce_steer(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data;
  void *end = (void *)(long)ctx->data_end;
  struct ethhdr *eth = data;
  struct udphdr *udp;
  if ((void *)(eth + 1) > end) return XDP_PASS;
  if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end) return XDP_PASS;
    if (ip->version != 4 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
    if (ip->frag_off & bpf_htons(0x3fff)) return XDP_PASS;  // MF or an offset: a fragment
    if (ip->ihl < 5) return XDP_PASS;
    udp = (void *)((__u8 *)ip + ip->ihl * 4);
  } else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr *ip6 = (void *)(eth + 1);
    if ((void *)(ip6 + 1) > end) return XDP_PASS;
    if (ip6->nexthdr != IPPROTO_UDP) return XDP_PASS;
    udp = (void *)(ip6 + 1);
  } else {
    return XDP_PASS;
  }
  if ((void *)(udp + 1) > end) return XDP_PASS;
  if (udp->dest != bpf_htons(ROCE_V2_UDP_PORT)) return XDP_PASS;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
