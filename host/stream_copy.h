// Copying a staged chunk into a link's payload area (host/shm_channel.h)
// with non-temporal stores, which write the lines to memory without taking
// them into our cache first: what LocalLinks::Stage does for a READ's
// answer (transport::StageCopy::kStreaming).
//
// Why: the other process read the chunk's lines the last time it was
// filled, so they sit in the other core's cache. An ordinary store must
// first take each line from there (a read for ownership, one cross-core
// transfer per 64 bytes), and a 64 KiB chunk is 1024 of them. On the
// 2-core development VM (AMD EPYC, 2026-11-29), one process filling 64 KiB
// chunks and another copying each out, eight chunks in turn: memcpy 330 µs
// per MiB for the filler, streaming stores 34 µs (48 µs per MiB through
// both), a plain copy of cold memory 20 µs. The reader then takes the
// lines from memory, not from our cache. (SEND chunks filled this way went
// slower end to end, for reasons not known: docs/performance.md.)
//
// Threads: any; StreamCopy's stores are weakly ordered (Intel SDM vol. 1,
// 10.4.6.2), so the caller ends a run of them with StreamFence before it
// publishes the data (the chunk's sequence, a release store).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace uroce::host {

inline void StreamCopy(uint8_t* dest, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  // Ordinary stores up to the first 16-byte boundary (a piece may start
  // anywhere in the chunk), then 64 bytes per round, then the tail.
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(dest) & 15)) & 15);
  std::memcpy(dest, src, head);
  dest += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, dest += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dest), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dest + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dest + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dest + 48), d);
  }
  std::memcpy(dest, src, n);
#else
  std::memcpy(dest, src, n);
#endif
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace uroce::host
