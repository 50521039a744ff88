// Error type of every moegemm call.
#pragma once

#include <stdexcept>
#include <string>

namespace moegemm {

/// What kind of failure an Error reports.
enum class ErrorCode {
  invalid_argument,  ///< shape, dtype, rank, stride, alignment or value does not fit the op's contract
  unsupported,       ///< a valid request this build or device cannot serve (e.g. FP4 on sm_90)
  cuda_error,        ///< a CUDA runtime or driver call failed
  internal,          ///< a moegemm bug
};

/// Thrown by every moegemm entry point. what() names the operand, what was expected and what was given,
/// e.g. "grouped_gemm: b: expected shape (E=3, N, K=16) with E from offsets, K from a, got (3, 24, 8)".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace moegemm
