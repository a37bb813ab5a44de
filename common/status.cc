#include "common/status.h"

namespace uroce {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kBusy: return "BUSY";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kNotSupported: return "NOT_SUPPORTED";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

int Status::ToErrno() const {
  switch (code_) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return EINVAL;
    case StatusCode::kNotFound: return ENOENT;
    case StatusCode::kAlreadyExists: return EEXIST;
    case StatusCode::kResourceExhausted: return ENOMEM;
    case StatusCode::kFailedPrecondition: return EINVAL;
    case StatusCode::kBusy: return EBUSY;
    case StatusCode::kUnavailable: return EAGAIN;
    case StatusCode::kPermissionDenied: return EACCES;
    case StatusCode::kNotSupported: return EOPNOTSUPP;
    case StatusCode::kIoError: return EIO;
    case StatusCode::kInternal: return EFAULT;
  }
  return EINVAL;
}

}  // namespace uroce
