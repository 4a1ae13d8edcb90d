// Typed errors. The Python bindings translate them:
//   InvalidArgument -> ValueError, NotImplemented -> NotImplementedError,
//   BackendError -> RuntimeError.
#ifndef POLYOPS_CORE_ERROR_H_
#define POLYOPS_CORE_ERROR_H_

#include <sstream>
#include <stdexcept>
#include <string>

namespace polyops {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something the op cannot accept (shape, dtype, stride, slot).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The request is valid but no implementation exists for it here.
class NotImplemented : public Error {
 public:
  using Error::Error;
};

// A backend call failed; the message carries the backend's own text.
class BackendError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Parts>
std::string Concat(const Parts&... parts) {
  std::ostringstream stream;
  (stream << ... << parts);
  return stream.str();
}

}  // namespace detail
}  // namespace polyops

// Like TORCH_CHECK: the message is only built when the check fails, so the
// happy path costs one branch.
#define POLYOPS_CHECK_T(cond, ErrorType, ...)                             \
  do {                                                                    \
    if (!(cond)) {                                                        \
      throw ::polyops::ErrorType(::polyops::detail::Concat(__VA_ARGS__)); \
    }                                                                     \
  } while (false)

#define POLYOPS_CHECK(cond, ...) \
  POLYOPS_CHECK_T(cond, InvalidArgument, __VA_ARGS__)

#endif  // POLYOPS_CORE_ERROR_H_
