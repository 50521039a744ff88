// moegemm::Error -> torch errors, keeping the message: invalid_argument -> ValueError,
// unsupported -> NotImplementedError (a RuntimeError), anything else -> RuntimeError.
#pragma once

#include <utility>

#include <c10/util/Exception.h>

#include "moegemm/error.hpp"

namespace moegemm::torch_ops {

[[noreturn]] inline void rethrow_as_torch_error(const Error& e) {
  switch (e.code()) {
    case ErrorCode::invalid_argument:
      TORCH_CHECK_VALUE(false, e.what());
    case ErrorCode::unsupported:
      TORCH_CHECK_NOT_IMPLEMENTED(false, e.what());
    default:
      TORCH_CHECK(false, e.what());
  }
}

/// Calls f(); a moegemm::Error it throws becomes the matching torch error.
template <class F>
decltype(auto) with_torch_errors(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    rethrow_as_torch_error(e);
  }
}

}  // namespace moegemm::torch_ops
