// `uroce soak`: a mixed RDMA workload between two engines over the in-memory
// lossy link, every byte and completion checked. Replays from --seed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "host/local_link_pair.h"
#include "pmd/eal.h"
#include "transport/pull_descriptor.h"
#include "testing/soak.h"
#include "tools/command.h"

namespace uroce::tools {
namespace {

}  // namespace

int SoakUsage(FILE* out) {
  std::fprintf(out,
               "usage: uroce soak [--loss P] [--dup P] [--reorder P] [--corrupt P] [--delay TICKS]\n"
               "                  [--seed S] [--messages N] [--qps Q] [--ops send,write,read,atomic,imm]\n"
               "                  [--max-size BYTES] [--mtu 256|512|1024|2048|4096] [--port memory|ring|link]\n"
               "                  [--selective both|a|b|none] [--pull-min BYTES] [--stage-chunks N]\n"
               "  --selective: which side offers selective retransmission (default both;\n"
               "  a or b alone is a mixed pair, which recovers by go-back-N)\n"
               "  --port link: the two engines as two processes of one host joined by a\n"
               "  local link (host/local_links.h, no daemon). From --pull-min bytes (default\n"
               "  16384; 0: never) large messages go in chunks through the link's payload\n"
               "  area of --stage-chunks chunks (default 32; 0: none), or, with no chunk\n"
               "  free, are read from the other's memory\n");
  return out == stdout ? 0 : 2;
}

namespace {

bool ParseDouble(const char* s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s, &end);
  return end != s && *end == '\0' && *out >= 0 && *out <= 1;
}

bool ParseU64(const char* s, uint64_t* out) {
  char* end = nullptr;
  *out = std::strtoull(s, &end, 0);
  return end != s && *end == '\0';
}

}  // namespace

int SoakCommand(int argc, char** argv) {
  transport::SoakOptions o;
  bool over_link = false;
  uint32_t stage_chunks = host::kLinkStageChunks;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return SoakUsage(stderr);
    if (i + 1 >= argc) {
      std::fprintf(stderr, "uroce soak: %s needs a value\n", flag.c_str());
      return SoakUsage(stderr);
    }
    const char* v = argv[++i];
    uint64_t n = 0;
    bool ok = true;
    if (flag == "--loss") ok = ParseDouble(v, &o.impairments.loss);
    else if (flag == "--dup") ok = ParseDouble(v, &o.impairments.duplicate);
    else if (flag == "--reorder") ok = ParseDouble(v, &o.impairments.reorder);
    else if (flag == "--corrupt") ok = ParseDouble(v, &o.impairments.corrupt);
    else if (flag == "--delay") ok = ParseU64(v, &n), o.impairments.max_delay = static_cast<uint32_t>(n);
    else if (flag == "--seed") ok = ParseU64(v, &o.seed);
    else if (flag == "--messages") ok = ParseU64(v, &o.messages);
    else if (flag == "--qps") ok = ParseU64(v, &n) && n > 0 && n <= 256, o.qps = static_cast<uint32_t>(n);
    else if (flag == "--max-size") ok = ParseU64(v, &n) && n <= (1u << 22), o.max_size = static_cast<uint32_t>(n);
    else if (flag == "--mtu") {
      ok = ParseU64(v, &n) && (n == 256 || n == 512 || n == 1024 || n == 2048 || n == 4096);
      o.path_mtu_bytes = static_cast<uint32_t>(n);
    } else if (flag == "--ops") {
      auto ops = transport::ParseSoakOps(v);
      ok = ops.ok();
      if (ok) o.ops = *ops;
    } else if (flag == "--selective") {
      const std::string side = v;
      ok = side == "both" || side == "a" || side == "b" || side == "none";
      o.selective_a = side == "both" || side == "a";
      o.selective_b = side == "both" || side == "b";
    } else if (flag == "--stage-chunks") {
      ok = ParseU64(v, &n) && n <= transport::kMaxStageChunks;
      stage_chunks = static_cast<uint32_t>(n);
    } else if (flag == "--pull-min") {
      ok = ParseU64(v, &n) && n <= (1u << 31);
      o.pull_min_bytes = static_cast<uint32_t>(n);
    } else if (flag == "--port") {
      // memory: the in-memory lossy link; ring: a DPDK net_ring pair.
      if (std::strcmp(v, "memory") == 0) {
        o.dpdk_ring = false;
      } else if (std::strcmp(v, "ring") == 0) {
        o.dpdk_ring = true;
      } else if (std::strcmp(v, "link") == 0) {
        over_link = true;
      } else {
        std::fprintf(stderr, "uroce soak: --port must be memory, ring or link\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "uroce soak: unknown flag %s\n", flag.c_str());
      return SoakUsage(stderr);
    }
    if (!ok) {
      std::fprintf(stderr, "uroce soak: bad value '%s' for %s\n", v, flag.c_str());
      return 2;
    }
  }

  pmd::EalConfig eal;
  eal.program_name = "uroce-soak";
  eal.log_level = "*:warning";
  eal.memory_mb = 512;
  Status s = pmd::StartEal(eal);
  if (!s.ok()) {
    std::fprintf(stderr, "uroce soak: %s\n", s.ToString().c_str());
    return 1;
  }
  if (over_link) {
    const uint32_t max_frame = o.path_mtu_bytes + 100 + 18;
    // The links are the engines' peer memory whatever pull_min_bytes says
    // (0: no descriptors or chunks): they tell which frames came in link
    // form.
    o.host_ports = [max_frame, stage_chunks](rte_mempool* pool) -> StatusOr<transport::HostPorts> {
      auto links = host::LocalLinkPair::Create(pool, max_frame, stage_chunks);
      if (!links.ok()) return links.status();
      transport::HostPorts ports;
      ports.a = &(*links)->a();
      ports.b = &(*links)->b();
      ports.peer_a = &(*links)->a();
      ports.peer_b = &(*links)->b();
      ports.qpn_base_a = host::LocalLinkPair::kSlotA << 16;
      ports.qpn_base_b = host::LocalLinkPair::kSlotB << 16;
      ports.qpn_count = 0xFFFF;
      ports.owner = std::shared_ptr<host::LocalLinkPair>(std::move(*links));
      return ports;
    };
  }
  std::printf("soak: %llu messages, %u QPs, max size %u, mtu %u, loss %g dup %g reorder %g corrupt %g, seed %llu\n",
              (unsigned long long)o.messages, o.qps, o.max_size, o.path_mtu_bytes, o.impairments.loss,
              o.impairments.duplicate, o.impairments.reorder, o.impairments.corrupt, (unsigned long long)o.seed);
  auto result = transport::RunSoak(o, [&](const transport::SoakProgress& p) {
    std::printf("soak: posted %llu, verified %llu, errors %llu, retransmits %llu\n", (unsigned long long)p.posted,
                (unsigned long long)p.verified, (unsigned long long)p.errors, (unsigned long long)p.retransmits);
    std::fflush(stdout);
  });
  (void)pmd::StopEal();
  if (!result.ok()) {
    std::fprintf(stderr, "uroce soak: %s\n", result.status().ToString().c_str());
    return 1;
  }
  const transport::SoakResult& r = *result;
  std::printf("soak: link dropped %llu, duplicated %llu, reordered %llu, corrupted %llu; icrc drops %llu\n",
              (unsigned long long)r.link_dropped, (unsigned long long)r.link_duplicated,
              (unsigned long long)r.link_reordered, (unsigned long long)r.link_corrupted,
              (unsigned long long)r.icrc_drops);
  std::printf("soak: timeouts %llu, link overflows %llu, tx buffer shortages %llu\n", (unsigned long long)r.timeouts,
              (unsigned long long)r.link_overflowed, (unsigned long long)r.tx_alloc_failures);
  std::printf("soak: rto expiries %llu, tail probes %llu, held packets %llu (placed on arrival %llu), selective "
              "resends %llu\n",
              (unsigned long long)r.rto_expiries, (unsigned long long)r.tail_probes,
              (unsigned long long)r.held_packets, (unsigned long long)r.placed_ahead,
              (unsigned long long)r.selective_resends);
  if (over_link) {
    std::printf("soak: messages read from the other engine's memory %llu, chunks through the payload area %llu\n",
                (unsigned long long)r.pulls, (unsigned long long)r.staged);
    std::printf("soak: ACKs as words in the link: stored %llu, taken %llu\n", (unsigned long long)r.link_acks_sent,
                (unsigned long long)r.link_acks_received);
  }
  if (!r.first_error.empty()) std::printf("soak: first error: %s\n", r.first_error.c_str());
  std::printf("soak: %llu/%llu verified, %llu errors, %llu retransmits, seed %llu\n", (unsigned long long)r.verified,
              (unsigned long long)r.messages, (unsigned long long)r.errors, (unsigned long long)r.retransmits,
              (unsigned long long)o.seed);
  return r.ok() ? 0 : 1;
}

}  // namespace uroce::tools
