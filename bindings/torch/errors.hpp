// moegemm::Error -> torch errors, keeping the message (its dtypes spelled as torch spells them):
// invalid_argument -> ValueError, unsupported -> NotImplementedError (a RuntimeError), anything else ->
// RuntimeError.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <c10/util/Exception.h>

#include "moegemm/error.hpp"

namespace moegemm::torch_ops {

/// `message` with each of the contract's dtype names (bf16, f32, i32, ..., docs/ops.md) that stands as a word
/// of its own replaced by the torch dtype the binding maps to it (torch.bfloat16, torch.float32,
/// torch.int32, ...), so that an error names dtypes the way the caller wrote them.
std::string torch_dtype_spelling(std::string_view message);

[[noreturn]] inline void rethrow_as_torch_error(const Error& e) {
  const std::string message = torch_dtype_spelling(e.what());
  switch (e.code()) {
    case ErrorCode::invalid_argument:
      TORCH_CHECK_VALUE(false, message);
    case ErrorCode::unsupported:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

/// `e` with the op name that leads its message (up to the first ": ", the C++ function's) replaced by `op`.
inline Error named_as(const Error& e, std::string_view op) {
  const std::string message = e.what();
  const std::size_t colon = message.find(": ");
  return colon == std::string::npos ? e : Error(e.code(), std::string(op) + message.substr(colon));
}

/// Calls f(); a moegemm::Error it throws becomes the matching torch error, named after `op` when given (an
/// overload whose errors name it, such as grouped_gemm_wgrad.accumulate).
template <class F>
decltype(auto) with_torch_errors(F&& f, const char* op = nullptr) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    rethrow_as_torch_error(op ? named_as(e, op) : e);
  }
}

}  // namespace moegemm::torch_ops
