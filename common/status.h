// uroce's internal error convention: a Status (code + message) on the control
// path. Verbs callers get a positive errno and libfabric callers -FI_E* from
// the API layer, which translates with ToErrno(). Fast-path functions return a
// plain enum of their own instead, so they never build strings.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <utility>

namespace uroce {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // EINVAL: the caller passed something wrong.
  kNotFound,           // ENOENT
  kAlreadyExists,      // EEXIST
  kResourceExhausted,  // ENOMEM / ENOSPC: a pool, ring or table is full.
  kFailedPrecondition, // EINVAL in verbs terms: wrong state for the call.
  kBusy,               // EBUSY: the object is still in use (ibv_dealloc_pd(3), ibv_destroy_cq(3)).
  kUnavailable,        // EAGAIN: try again later.
  kPermissionDenied,   // EACCES
  kNotSupported,       // EOPNOTSUPP
  kIoError,            // EIO: a device or file failed.
  kInternal,           // A bug of ours; never the caller's fault.
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;
  // The positive errno a verbs caller expects for this status.
  int ToErrno() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}            // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {     // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("StatusOr built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace uroce

// Returns from the enclosing function when `expr` is not OK.
#define UROCE_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::uroce::Status uroce_status_ = (expr);  \
    if (!uroce_status_.ok()) return uroce_status_; \
  } while (0)
