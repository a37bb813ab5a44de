// libFuzzer target for ARP / neighbour discovery frames (host/neighbor_frames.h):
//   - ParseNeighborMessage on the whole input, copied into a heap buffer of
//     exactly its size (a read past the frame is caught by ASan);
//   - every builder, with addresses and MACs taken from the input, into a
//     heap buffer of exactly kMaxNeighborFrame bytes (a write past it is
//     caught), and parsed back: the kind, target, sender address and MAC
//     must be what was built, unless RFC 4861 7.1.1 forbids the frame (a
//     multicast target; a source link-layer option from the unspecified
//     address), which the parser then refuses;
//   - BuildNeighborQuestion on the parsed input, as the daemon's switch calls
//     it for a process's request: refused, or a question whose Ethernet
//     source and sender MAC are the uplink's, with the same target.
// Any disagreement aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "host/neighbor_frames.h"

namespace uroce::host {
namespace {

using transport::Gid;
using transport::MacAddress;

// Input layout after the frame-independent part: MAC, IP, IP, MAC, one byte
// picking IPv4 (bit 0) for the builders. Shorter inputs use zeros.
struct Fields {
  MacAddress mac{};
  Gid ip{};
  Gid other_ip{};
  MacAddress other_mac{};
  bool ipv4 = false;
};

Fields TakeFields(const uint8_t* data, size_t size) {
  uint8_t raw[6 + 16 + 16 + 6 + 1] = {};
  std::memcpy(raw, data, std::min(size, sizeof(raw)));
  Fields f;
  std::memcpy(f.mac.data(), raw, 6);
  std::memcpy(f.ip.data(), raw + 6, 16);
  std::memcpy(f.other_ip.data(), raw + 22, 16);
  std::memcpy(f.other_mac.data(), raw + 38, 6);
  f.ipv4 = (raw[44] & 1) != 0;
  if (f.ipv4) {
    f.ip = transport::Ipv4MappedGid(raw + 6);
    f.other_ip = transport::Ipv4MappedGid(raw + 22);
  }
  return f;
}

NeighborMessage Parse(const uint8_t* frame, size_t length) {
  if (length < kMinEthernetFrame || length > kMaxNeighborFrame) abort();
  return ParseNeighborMessage(frame, length);
}

void Expect(bool ok) {
  if (!ok) abort();
}

bool Unicast(const MacAddress& mac) { return (mac[0] & 1) == 0; }

void CheckBuilders(const Fields& f) {
  const std::unique_ptr<uint8_t[]> out(new uint8_t[kMaxNeighborFrame]);
  if (f.ipv4) {
    size_t n = BuildArpRequest(out.get(), f.mac, f.ip, f.other_ip);
    NeighborMessage m = Parse(out.get(), n);
    Expect(m.kind == NeighborMessageKind::kArpRequest && m.sender_ip == f.ip && m.target_ip == f.other_ip &&
           m.sender_mac == f.mac && m.eth_src == f.mac);
    n = BuildArpReply(out.get(), f.mac, f.ip, f.other_mac, f.other_ip);
    m = Parse(out.get(), n);
    Expect(m.kind == NeighborMessageKind::kArpReply && m.sender_ip == f.ip && m.target_ip == f.other_ip &&
           m.sender_mac == f.mac && m.eth_src == f.mac);
    return;
  }
  static constexpr Gid kUnspecified{};
  size_t n = BuildNeighborSolicitation(out.get(), f.mac, f.ip, f.other_ip);
  NeighborMessage m = Parse(out.get(), n);
  if (f.other_ip[0] == 0xFF || (f.ip == kUnspecified && Unicast(f.mac))) {
    Expect(m.kind == NeighborMessageKind::kNone);
  } else {
    Expect(m.kind == NeighborMessageKind::kNeighborSolicitation && m.sender_ip == f.ip && m.target_ip == f.other_ip &&
           m.sender_mac == f.mac && m.has_sender_mac == Unicast(f.mac) && m.eth_src == f.mac);
  }
  n = BuildNeighborAdvertisement(out.get(), f.mac, f.ip, f.other_mac, f.other_ip);
  m = Parse(out.get(), n);
  if (f.ip[0] == 0xFF) {
    Expect(m.kind == NeighborMessageKind::kNone);
  } else {
    Expect(m.kind == NeighborMessageKind::kNeighborAdvertisement && m.sender_ip == f.ip && m.target_ip == f.ip &&
           m.sender_mac == f.mac && m.solicited && m.eth_src == f.mac);
  }
}

void CheckQuestion(const NeighborMessage& asked, const MacAddress& uplink_mac) {
  const std::unique_ptr<uint8_t[]> out(new uint8_t[kMaxNeighborFrame]);
  NeighborRefusal why = NeighborRefusal::kNone;
  const size_t n = BuildNeighborQuestion(out.get(), asked, uplink_mac, asked.sender_ip, &why);
  if (n == 0) {
    Expect(why != NeighborRefusal::kNone);
    return;
  }
  Expect(why == NeighborRefusal::kNone);
  Expect(asked.kind == NeighborMessageKind::kArpRequest || asked.kind == NeighborMessageKind::kNeighborSolicitation);
  const NeighborMessage q = Parse(out.get(), n);
  Expect(q.kind == asked.kind && q.sender_mac == uplink_mac && q.eth_src == uplink_mac &&
         q.sender_ip == asked.sender_ip && q.target_ip == asked.target_ip && q.target_ip != q.sender_ip);
}

}  // namespace
}  // namespace uroce::host

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::host;
  // The input as a frame, in a buffer of exactly its size.
  const std::unique_ptr<uint8_t[]> frame(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(frame.get(), data, size);
  const NeighborMessage parsed = ParseNeighborMessage(frame.get(), size);
  const Fields fields = TakeFields(frame.get(), size);
  CheckBuilders(fields);
  // The uplink's MAC: a unicast one, from the input.
  uroce::transport::MacAddress uplink_mac = fields.other_mac;
  uplink_mac[0] &= 0xFE;
  CheckQuestion(parsed, uplink_mac);
  return 0;
}
