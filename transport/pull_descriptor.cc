#include "transport/pull_descriptor.h"

#include <cstring>

namespace uroce::transport {
namespace {

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

size_t WritePullDescriptor(const PullDescriptor& d, uint8_t* out) {
  Put32(out, d.packets);
  Put32(out + 4, d.count);
  Put64(out + 8, d.total);
  uint8_t* p = out + kPullDescriptorHeader;
  for (uint32_t i = 0; i < d.count; ++i, p += kPullSegmentBytes) {
    Put64(p, d.segments[i].address);
    Put64(p + 8, d.segments[i].length);
  }
  return PullDescriptorBytes(d.count);
}

bool ParsePullDescriptor(const uint8_t* data, size_t length, PullDescriptor* out) {
  if (data == nullptr || length < kPullDescriptorHeader) return false;
  PullDescriptor d;
  d.packets = Get32(data);
  d.count = Get32(data + 4);
  d.total = Get64(data + 8);
  if (d.packets == 0 || d.packets > kMaxPullPackets || d.count == 0 || d.count > kMaxPullSegments ||
      d.total == 0 || d.total > kMaxPullBytes || length != PullDescriptorBytes(d.count)) {
    return false;
  }
  uint64_t sum = 0;
  const uint8_t* p = data + kPullDescriptorHeader;
  for (uint32_t i = 0; i < d.count; ++i, p += kPullSegmentBytes) {
    PullSegment& s = d.segments[i];
    s.address = Get64(p);
    s.length = Get64(p + 8);
    // Each length at most the total, so the sum cannot overflow 64 bits.
    if (s.length == 0 || s.length > d.total || s.address + s.length < s.address) return false;
    sum += s.length;
  }
  if (sum != d.total) return false;
  *out = d;
  return true;
}

size_t WriteStagedChunk(const StagedChunk& c, uint8_t* out) {
  Put32(out, c.chunk);
  Put32(out + 4, c.length);
  Put64(out + 8, c.sequence);
  return kStagedChunkDescriptorBytes;
}

bool ParseStagedChunk(const uint8_t* data, size_t length, StagedChunk* out) {
  if (data == nullptr || length != kStagedChunkDescriptorBytes) return false;
  StagedChunk c;
  c.chunk = Get32(data);
  c.length = Get32(data + 4);
  c.sequence = Get64(data + 8);
  if (c.chunk >= kMaxStageChunks || c.length == 0 || c.length > kStagedChunkBytes || c.sequence == 0 ||
      (c.sequence & 1) != 0) {
    return false;
  }
  *out = c;
  return true;
}

}  // namespace uroce::transport
