// Somebody else's XDP program (tests/daemon_kernel_test.sh attaches it): a
// daemon must leave it alone and fall back to af_packet.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int other_pass(struct xdp_md *ctx) { return XDP_PASS; }

char _license[] SEC("license") = "Dual BSD/GPL";
