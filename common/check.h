// UROCE_DCHECK: the project's rules that comments state ("engine thread
// only", "the token's holder") checked in code, where bugs are hunted.
//
// The checks are compiled in when UROCE_DCHECKS is defined: by the sanitizer
// and debug configurations of .bazelrc, which the test command's sanitizer
// pass uses, and by --config=dcheck. A plain (optimized) build compiles them
// to nothing, so the fast path pays no branch for them. The condition is
// then not evaluated, but stays compiled, so it cannot rot.
//
// A failed check prints one line to stderr and aborts: it is a bug in uroce,
// never a reaction to outside input (which is counted and dropped instead).
// fprintf, not the logging path, so that it works before EAL starts.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace uroce {

#ifdef UROCE_DCHECKS
inline constexpr bool kDchecksEnabled = true;
#else
inline constexpr bool kDchecksEnabled = false;
#endif

namespace check_internal {
[[noreturn]] inline void DcheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: UROCE_DCHECK(%s) failed\n", file, line, condition);
  std::abort();
}
}  // namespace check_internal

}  // namespace uroce

#ifdef UROCE_DCHECKS
#define UROCE_DCHECK(condition) \
  ((condition) ? static_cast<void>(0) : ::uroce::check_internal::DcheckFailed(#condition, __FILE__, __LINE__))
#else
// sizeof: the condition is type-checked but never evaluated.
#define UROCE_DCHECK(condition) static_cast<void>(sizeof(static_cast<bool>(condition)))
#endif
