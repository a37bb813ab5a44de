// Wire field types for RoCEv2 headers: big-endian integers stored as bytes
// (so a header struct has alignment 1 and can sit at any offset in a frame
// without unaligned-access undefined behaviour), and the 24-bit packet
// sequence number with its modulo-2^24 arithmetic.
//
// Thread-safety: plain values; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::transport {

// Loads and stores of big-endian ("network order", IBTA 5.2 / RFC 1700)
// integers at any address. Byte by byte: compilers turn these into one
// load/store plus a byte swap.
inline uint16_t LoadBe16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
inline uint32_t LoadBe24(const uint8_t* p) {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}
inline uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
inline uint64_t LoadBe64(const uint8_t* p) {
  return (uint64_t{LoadBe32(p)} << 32) | LoadBe32(p + 4);
}
inline void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void StoreBe24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
inline void StoreBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline void StoreBe64(uint8_t* p, uint64_t v) {
  StoreBe32(p, static_cast<uint32_t>(v >> 32));
  StoreBe32(p + 4, static_cast<uint32_t>(v));
}
// The ICRC is the one field stored least-significant byte first (see icrc.h).
inline uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

// A big-endian field of N bytes holding an unsigned integer of type T. Only
// load() and store() touch it, so a field is never read in host order by
// mistake.
template <typename T, size_t N>
class BigEndian {
 public:
  static_assert(N >= 2 && N <= sizeof(T), "a multi-byte field no wider than its host type");
  T load() const {
    T v = 0;
    for (size_t i = 0; i < N; ++i) v = static_cast<T>((v << 8) | bytes_[i]);
    return v;
  }
  void store(T v) {
    for (size_t i = N; i-- > 0;) {
      bytes_[i] = static_cast<uint8_t>(v);
      v = static_cast<T>(v >> 8);
    }
  }
  const uint8_t* data() const { return bytes_; }
  uint8_t* data() { return bytes_; }

 private:
  uint8_t bytes_[N];
};

using Be16 = BigEndian<uint16_t, 2>;
using Be24 = BigEndian<uint32_t, 3>;  // BTH destination QP and PSN, AETH MSN, DETH source QP
using Be32 = BigEndian<uint32_t, 4>;
using Be64 = BigEndian<uint64_t, 8>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be24) == 3 && alignof(Be24) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

// A 24-bit packet sequence number (IBTA 9.7.1). Arithmetic is modulo 2^24;
// comparison is by wrap-around distance: a is before b when b - a, taken
// modulo 2^24, lies in [1, 2^23). This is the rule the responder uses to tell
// a new request from a duplicate (IBTA 9.7.5.1.1) and it is not a total order
// over all 2^24 values, so Psn has no std::less and must not key a sorted map.
class Psn {
 public:
  static constexpr uint32_t kMask = 0xFFFFFF;
  static constexpr uint32_t kHalfRange = 0x800000;

  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t value) : value_(value & kMask) {}

  constexpr uint32_t value() const { return value_; }

  // Signed distance from `other` to *this, in [-2^23, 2^23).
  constexpr int32_t DistanceFrom(Psn other) const {
    const uint32_t diff = (value_ - other.value_) & kMask;
    return diff >= kHalfRange ? static_cast<int32_t>(diff) - static_cast<int32_t>(kMask + 1)
                              : static_cast<int32_t>(diff);
  }

  constexpr Psn operator+(uint32_t n) const { return Psn(value_ + n); }
  constexpr Psn operator-(uint32_t n) const { return Psn(value_ - n); }
  constexpr Psn& operator+=(uint32_t n) { return *this = *this + n; }
  constexpr Psn& operator-=(uint32_t n) { return *this = *this - n; }
  constexpr Psn& operator++() { return *this += 1; }
  constexpr Psn operator++(int) {
    Psn before = *this;
    *this += 1;
    return before;
  }

  constexpr bool operator==(Psn o) const { return value_ == o.value_; }
  constexpr bool operator!=(Psn o) const { return value_ != o.value_; }
  constexpr bool operator<(Psn o) const { return DistanceFrom(o) < 0; }
  constexpr bool operator>(Psn o) const { return DistanceFrom(o) > 0; }
  constexpr bool operator<=(Psn o) const { return DistanceFrom(o) <= 0; }
  constexpr bool operator>=(Psn o) const { return DistanceFrom(o) >= 0; }

 private:
  uint32_t value_ = 0;
};

}  // namespace uroce::transport
