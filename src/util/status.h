// Status and StatusOr: the one error model of ctrbox (leveldb / abseil style).
//
// Every operation that can fail at run time (I/O, bad input, bad configuration) returns a
// Status or a StatusOr<T>; both are [[nodiscard]]. Asserts are only for programmer errors.
// Thread safety: value types; distinct objects may be used from distinct threads.
#ifndef CTRBOX_UTIL_STATUS_H_
#define CTRBOX_UTIL_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ctrbox {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad configuration or a bad call argument
  kNotFound,         // a file, key or model that does not exist
  kAlreadyExists,
  kCorruption,  // checksum mismatch, malformed file
  kDataLoss,    // malformed input beyond the configured error rate
  kIOError,     // the operating system reported an error
  kOutOfRange,  // end of input, out-of-range index
  kResourceExhausted,
  kFailedPrecondition,
  kCancelled,  // stopped on request (signal, another stage failed)
  kInternal,
};

// Returns the lower-case name of `code`, e.g. "io_error".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message without the code name; empty for OK.
  const std::string& message() const;
  // "code: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (OK stays OK).
  Status WithContext(std::string_view context) const;

  // Marks an error as deliberately ignored (the caller states why at the call site).
  void IgnoreError() const {}

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null means OK; shared so copies are cheap
};

inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status CorruptionError(std::string m) {
  return Status(StatusCode::kCorruption, std::move(m));
}
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status IOError(std::string m) { return Status(StatusCode::kIOError, std::move(m)); }
inline Status OutOfRangeError(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status CancelledError(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}

// Holds either a value of T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok()
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok()
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ctrbox

#define CTRBOX_CONCAT_INNER_(a, b) a##b
#define CTRBOX_CONCAT_(a, b) CTRBOX_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::ctrbox::Status _ctrbox_status = (expr);        \
    if (!_ctrbox_status.ok()) return _ctrbox_status; \
  } while (0)

// `lhs = value of expr` (a StatusOr), or returns its Status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(CTRBOX_CONCAT_(_ctrbox_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // CTRBOX_UTIL_STATUS_H_
