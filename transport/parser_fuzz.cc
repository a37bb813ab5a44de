// libFuzzer target for the packet parser. Any input must parse or be refused
// without reading outside it (ASan watches); and whatever parses must build
// again into the same bytes (a differential check of parser and builder).
// The same for the input read as a link frame (ParseLinkFrame).
//
//   flock /tmp/uroce-bazel.lock bazel build --config=fuzz //transport:parser_fuzz
//   bazel-bin/transport/parser_fuzz -max_total_time=300 transport/testdata/parser_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/headers.h"
#include "transport/link_frame.h"
#include "transport/packet_builder.h"
#include "transport/packet_parser.h"

using uroce::transport::BuildError;
using uroce::transport::BuildPacket;
using uroce::transport::FrameLength;
using uroce::transport::IpVersion;
using uroce::transport::kIcrcBytes;
using uroce::transport::PacketView;
using uroce::transport::ParseLinkFrame;
using uroce::transport::WriteLinkFrame;
using uroce::transport::ParseError;
using uroce::transport::ParseOptions;
using uroce::transport::ParsePacket;

namespace {

// The same bytes as a frame that came over a local link in link form
// (transport/link_frame.h): what parses must be what the link form of the
// wire frame built from the same fields is, byte for byte.
void CheckLinkForm(const uint8_t* p, size_t size) {
  PacketView view;
  if (ParseLinkFrame(p, size, &view) != ParseError::kOk) return;
  const uint8_t* pad = view.payload + view.fields.payload_length;
  for (uint8_t i = 0; i < view.fields.bth.pad_count; ++i) {
    if (pad[i] != 0) return;  // the builder writes zero pad bytes
  }
  std::vector<uint8_t> wire(FrameLength(view.fields));
  size_t length = 0;
  if (BuildPacket(view.fields, view.payload, wire.data(), wire.size(), &length) != BuildError::kOk) __builtin_trap();
  std::vector<uint8_t> link(length);
  if (WriteLinkFrame(wire.data(), length, link.data(), link.size()) != size ||
      std::memcmp(link.data(), p, size) != 0) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so that a read one byte past the input is caught.
  std::vector<uint8_t> frame(data, data + size);
  const uint8_t* p = size ? frame.data() : nullptr;

  PacketView view;
  (void)ParsePacket(p, size, ParseOptions{}, &view);
  CheckLinkForm(p, size);

  // Random bytes rarely carry a right ICRC; without that check the parser
  // goes deeper, and what it accepts must survive a rebuild.
  const ParseError e = ParsePacket(p, size, {.verify_icrc = false, .verify_ipv4_checksum = true}, &view);
  if (e != ParseError::kOk) return 0;
  // The builder writes no IPv4 options and zero pad bytes.
  const bool plain_ip = view.fields.ip_version == IpVersion::kIpv6 || view.ip_header_bytes == 20;
  const uint8_t* pad = view.payload + view.fields.payload_length;
  bool zero_pad = true;
  for (uint8_t i = 0; i < view.fields.bth.pad_count; ++i) zero_pad &= pad[i] == 0;
  if (!plain_ip || !zero_pad) return 0;

  std::vector<uint8_t> rebuilt(FrameLength(view.fields));
  size_t length = 0;
  if (BuildPacket(view.fields, view.payload, rebuilt.data(), rebuilt.size(), &length) != BuildError::kOk ||
      length != view.packet_end ||
      std::memcmp(rebuilt.data(), frame.data(), view.packet_end - kIcrcBytes) != 0) {
    __builtin_trap();
  }
  // And what the builder makes, the parser accepts with its ICRC.
  if (ParsePacket(rebuilt.data(), length, ParseOptions{}, &view) != ParseError::kOk) __builtin_trap();
  return 0;
}
