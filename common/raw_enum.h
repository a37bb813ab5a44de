// Reads an enum field that came from a caller of a C API as the integer it
// holds. A C caller may store any value in an enum field; loading one that is
// not an enumerator through the enum type is undefined behaviour in C++
// (UBSan's -fsanitize=enum reports it), so the API layers read such fields
// with RawEnum and validate the integer before converting it back.
#pragma once

#include <cstring>
#include <type_traits>

namespace uroce {

template <typename Enum>
std::underlying_type_t<Enum> RawEnum(const Enum& field) {
  std::underlying_type_t<Enum> value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

}  // namespace uroce
