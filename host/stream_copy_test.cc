// StreamCopy writes exactly the bytes memcpy would, wherever the piece
// starts and however long it is (the head before a 16-byte boundary, the
// 64-byte rounds, the tail), and nothing around them.
#include "host/stream_copy.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::host {
namespace {

TEST(StreamCopyTest, CopiesExactlyTheBytesAtAnyAlignmentAndLength) {
  std::vector<uint8_t> source(70000);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 13 + 7);
  for (size_t dest_offset : {0, 1, 7, 15, 16, 17, 63}) {
    for (size_t length : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 4096, 65536}) {
      std::vector<uint8_t> dest(length + 256, 0xEE);
      uint8_t* at = dest.data() + 64 + dest_offset;
      StreamCopy(at, source.data() + 3, length);
      StreamFence();
      for (size_t i = 0; i < length; ++i) {
        ASSERT_EQ(at[i], source[i + 3]) << "offset " << dest_offset << " length " << length << " byte " << i;
      }
      for (uint8_t* p = dest.data(); p < at; ++p) ASSERT_EQ(*p, 0xEE) << "before, length " << length;
      for (uint8_t* p = at + length; p < dest.data() + dest.size(); ++p) ASSERT_EQ(*p, 0xEE) << "after";
    }
  }
}

}  // namespace
}  // namespace uroce::host
