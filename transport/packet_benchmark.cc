// Parse and build costs per packet (ICRC included), for the engine's budget.
//
//   flock /tmp/uroce-bazel.lock bazel run //transport:packet_benchmark
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

namespace uroce::transport {
namespace {

PacketFields Fields(Opcode opcode, uint32_t payload) {
  PacketFields f;
  f.src_gid = Ipv4MappedGid(0x0A4D0002u);
  f.dst_gid = Ipv4MappedGid(0x0A4D0003u);
  f.udp_src_port = 0xC121;
  f.bth.opcode = static_cast<uint8_t>(opcode);
  f.bth.dest_qp = 0x11;
  f.bth.psn = Psn(1000);
  f.payload_length = payload;
  return f;
}

void BM_ParseVerifyIcrc(benchmark::State& state) {
  const PacketFields f = Fields(Opcode::kRcSendOnly, static_cast<uint32_t>(state.range(0)));
  std::vector<uint8_t> payload(f.payload_length, 0x7B), frame(FrameLength(f));
  size_t length = 0;
  if (BuildPacket(f, payload.data(), frame.data(), frame.size(), &length) != BuildError::kOk) {
    state.SkipWithError("build failed");
    return;
  }
  PacketView view;
  for (auto _ : state) {
    ParseError e = ParsePacket(frame.data(), length, ParseOptions{}, &view);
    benchmark::DoNotOptimize(e);
  }
  state.SetBytesProcessed(state.iterations() * length);
  state.SetItemsProcessed(state.iterations());
}

// The engine's way: headers, the payload copy, then pad and ICRC.
void BM_BuildSplit(benchmark::State& state) {
  const PacketFields f = Fields(Opcode::kRcSendOnly, static_cast<uint32_t>(state.range(0)));
  std::vector<uint8_t> payload(f.payload_length, 0x7B), frame(FrameLength(f));
  for (auto _ : state) {
    PendingPacket p;
    BuildError e = BeginPacket(f, frame.data(), frame.size(), &p);
    std::memcpy(p.payload, payload.data(), p.payload_length);
    FinishPacket(p);
    benchmark::DoNotOptimize(e);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * frame.size());
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_ParseVerifyIcrc)->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_BuildSplit)->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);

}  // namespace
}  // namespace uroce::transport
