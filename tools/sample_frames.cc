// write_sample_frames OUT.pcap: one RoCEv2 frame built by uroce for every
// opcode, over IPv4 and IPv6, with and without an 802.1Q tag, with fields
// drawn from a fixed seed. The tshark test feeds the file to Wireshark and
// to `uroce dump --json` and compares what they say.
#include <cstdio>
#include <random>
#include <vector>

#include "common/pcap_file.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"

namespace uroce::tools {
namespace {

using namespace transport;  // NOLINT: a small program about transport's types

uint32_t PayloadFor(PayloadRule rule, std::mt19937& rng) {
  const auto r = static_cast<uint32_t>(rng());
  switch (rule) {
    case PayloadRule::kNone: return 0;
    case PayloadRule::kFullMtu: return 256;
    case PayloadRule::kOneToMtu: return 1 + r % 300;
    case PayloadRule::kZeroToMtu: return r % 300;
    case PayloadRule::kExactlyEight: return 8;
    case PayloadRule::kExactlySixteen: return 16;
  }
  return 0;
}

int Run(const char* path) {
  auto writer = PcapWriter::Create(path);
  if (!writer.ok()) {
    std::fprintf(stderr, "write_sample_frames: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(20261122);
  auto r32 = [&] { return static_cast<uint32_t>(rng()); };
  auto r64 = [&] { return (uint64_t{r32()} << 32) | r32(); };
  uint64_t time_ns = 1795000000ull * 1000000000ull;
  int written = 0;
  for (Opcode opcode : kAllOpcodes) {
    const OpcodeInfo& op = LookupOpcode(opcode);
    for (IpVersion version : {IpVersion::kIpv4, IpVersion::kIpv6}) {
      for (bool vlan : {false, true}) {
        PacketFields f;
        f.dst_mac = {0x02, 0, 0, 0x77, 0, 0x0B};
        f.src_mac = {0x02, 0, 0, 0x77, 0, 0x0A};
        f.has_vlan = vlan;
        f.vlan_tci = static_cast<uint16_t>(rng() & 0xFFFF);
        f.ip_version = version;
        if (version == IpVersion::kIpv4) {
          f.src_gid = Ipv4MappedGid(0x0A4D000Au);
          f.dst_gid = Ipv4MappedGid(0x0A4D000Bu);
          f.ipv4_identification = static_cast<uint16_t>(rng());
        } else {
          f.src_gid = {0xFD, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0A};
          f.dst_gid = {0xFD, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0B};
          f.ipv6_flow_label = r32() & 0xFFFFF;
        }
        f.traffic_class = static_cast<uint8_t>(rng());
        f.hop_limit = 64;
        f.udp_src_port = static_cast<uint16_t>(0xC000 | (rng() & 0x3FFF));
        f.bth.opcode = static_cast<uint8_t>(opcode);
        f.bth.solicited_event = rng() & 1;
        f.bth.pkey = 0xFFFF;
        // QP 1 carries CM MADs that Wireshark would try to decode: keep away.
        f.bth.dest_qp = 2 + r32() % 0xFFFFFD;
        f.bth.ack_request = rng() & 1;
        f.bth.psn = Psn(r32());
        f.reth = {r64(), r32(), r32() % 65536};
        f.aeth = {static_cast<uint8_t>(r32() & 0x7F), r32() & 0xFFFFFF};
        f.atomic_eth = {r64() & ~uint64_t{7}, r32(), r64(), r64()};
        f.atomic_ack_eth = {r64()};
        f.immediate_data = r32();
        f.invalidate_rkey = r32();
        f.deth = {r32(), 0, r32() & 0xFFFFFF};
        if (op.has(kXrcEth)) f.xrc_srqn = r32() & 0xFFFFFF;
        // An ATOMIC WRITE's RETH asks for its 8 bytes at an aligned address.
        if (op.operation == Operation::kAtomicWrite) f.reth = {f.reth.virtual_address & ~uint64_t{7}, f.reth.rkey, 8};
        f.payload_length = PayloadFor(op.payload, rng);
        std::vector<uint8_t> payload(f.payload_length);
        for (auto& b : payload) b = static_cast<uint8_t>(rng());

        std::vector<uint8_t> frame(FrameLength(f));
        size_t length = 0;
        const BuildError e = BuildPacket(f, payload.data(), frame.data(), frame.size(), &length);
        if (e != BuildError::kOk) {
          std::fprintf(stderr, "write_sample_frames: %s: %s\n", op.name, BuildErrorName(e));
          return 1;
        }
        Status s = writer->Write(frame.data(), length, time_ns += 1000);
        if (!s.ok()) {
          std::fprintf(stderr, "write_sample_frames: %s\n", s.ToString().c_str());
          return 1;
        }
        ++written;
      }
    }
  }
  Status s = writer->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "write_sample_frames: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("write_sample_frames: %d frames in %s\n", written, path);
  return 0;
}

}  // namespace
}  // namespace uroce::tools

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_sample_frames OUT.pcap\n");
    return 2;
  }
  return uroce::tools::Run(argv[1]);
}
