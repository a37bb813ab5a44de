// libFuzzer target for the CM MAD decoder (cm_mad.h). Any input must decode
// or be refused without reading outside it (ASan watches); whatever decodes
// must encode into bytes that decode and encode again to the very same bytes
// (encoding is a fixed point: reserved bits are dropped once, nothing else).
//
//   flock -o /tmp/uroce-bazel.lock bazel build --config=fuzz //cm:cm_mad_fuzz
//   bazel-bin/cm/cm_mad_fuzz -max_total_time=300 cm/testdata/cm_mad_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cm/cm_mad.h"

using uroce::cm::CmMad;
using uroce::cm::CmMadError;
using uroce::cm::CmReq;
using uroce::cm::DecodeCmMad;
using uroce::cm::DecodeIpCmHeader;
using uroce::cm::EncodeCmMad;
using uroce::cm::EncodeIpCmHeader;
using uroce::cm::IpCmHeader;
using uroce::cm::kIpCmHeaderBytes;
using uroce::cm::kMadBytes;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so that a read one byte past the input is caught.
  std::vector<uint8_t> input(data, data + size);
  const uint8_t* p = size ? input.data() : nullptr;

  IpCmHeader ip;
  if (DecodeIpCmHeader(p, size, &ip) == CmMadError::kOk) {
    uint8_t once[kIpCmHeaderBytes], twice[kIpCmHeaderBytes];
    if (!EncodeIpCmHeader(ip, once)) __builtin_trap();
    IpCmHeader again;
    if (DecodeIpCmHeader(once, sizeof once, &again) != CmMadError::kOk || !EncodeIpCmHeader(again, twice) ||
        std::memcmp(once, twice, sizeof once) != 0) {
      __builtin_trap();
    }
  }

  CmMad mad;
  if (DecodeCmMad(p, size, &mad) != CmMadError::kOk) return 0;
  uint8_t once[kMadBytes], twice[kMadBytes];
  EncodeCmMad(mad, once);
  CmMad again;
  if (DecodeCmMad(once, sizeof once, &again) != CmMadError::kOk) __builtin_trap();
  EncodeCmMad(again, twice);
  if (std::memcmp(once, twice, sizeof once) != 0) __builtin_trap();
  // A REQ's private data always holds room for the IP CM header.
  if (auto* req = std::get_if<CmReq>(&mad.message)) {
    (void)DecodeIpCmHeader(req->private_data.data(), req->private_data.size(), &ip);
  }
  return 0;
}
