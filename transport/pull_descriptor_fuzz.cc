// libFuzzer target for what a process reads from another over a local link:
// the pull descriptor and the staged chunk (transport/pull_descriptor.h),
// each tried on every input. Any input must parse or
// be refused without reading outside it (ASan watches); whatever parses must
// hold the promises the responder relies on (counts in range, lengths that
// add up without wrapping) and write back into the same bytes.
//
//   flock -o /tmp/bazel.lock bazel build --config=fuzz //transport:pull_descriptor_fuzz
//   bazel-bin/transport/pull_descriptor_fuzz -max_total_time=300 transport/testdata/pull_descriptor_fuzz
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transport/pull_descriptor.h"

using uroce::transport::kMaxPullBytes;
using uroce::transport::kMaxStageChunks;
using uroce::transport::kStagedChunkBytes;
using uroce::transport::kStagedChunkDescriptorBytes;
using uroce::transport::ParseStagedChunk;
using uroce::transport::StagedChunk;
using uroce::transport::WriteStagedChunk;
using uroce::transport::kMaxPullPackets;
using uroce::transport::kMaxPullSegments;
using uroce::transport::ParsePullDescriptor;
using uroce::transport::PullDescriptor;
using uroce::transport::PullDescriptorBytes;
using uroce::transport::WritePullDescriptor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so that a read one byte past the input is caught.
  std::vector<uint8_t> input(data, data + size);
  StagedChunk c;
  if (ParseStagedChunk(size ? input.data() : nullptr, size, &c)) {
    if (size != kStagedChunkDescriptorBytes || c.chunk >= kMaxStageChunks || c.length == 0 ||
        c.length > kStagedChunkBytes || c.sequence == 0 || (c.sequence & 1) != 0) {
      abort();
    }
    uint8_t again[kStagedChunkDescriptorBytes];
    if (WriteStagedChunk(c, again) != size || std::memcmp(again, input.data(), size) != 0) abort();
  }
  PullDescriptor d;
  if (!ParsePullDescriptor(size ? input.data() : nullptr, size, &d)) return 0;
  if (d.count == 0 || d.count > kMaxPullSegments || d.packets == 0 || d.packets > kMaxPullPackets ||
      d.total == 0 || d.total > kMaxPullBytes || size != PullDescriptorBytes(d.count)) {
    abort();
  }
  uint64_t sum = 0;
  for (uint32_t i = 0; i < d.count; ++i) {
    if (d.segments[i].length == 0 || d.segments[i].address + d.segments[i].length < d.segments[i].address) abort();
    sum += d.segments[i].length;
  }
  if (sum != d.total) abort();
  std::vector<uint8_t> again(PullDescriptorBytes(d.count));
  if (WritePullDescriptor(d, again.data()) != size || std::memcmp(again.data(), input.data(), size) != 0) abort();
  return 0;
}
