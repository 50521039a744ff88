// XLA FFI call frames as moegemm views: buffers -> TensorView, attribute dictionary -> Options.
#pragma once

#include <cstddef>

#include "xla/ffi/api/ffi.h"

#include "binding_call.hpp"

namespace moegemm::jax_binding {

namespace ffi = ::xla::ffi;

/// A dense row-major view of an XLA buffer on `device` (XLA hands custom calls row-major buffers).
/// Throws Error(invalid_argument) for element types moegemm has no DType for, rank 0 or rank > 4.
TensorView view_of(const ffi::AnyBuffer& buffer, Device device, const char* what);

/// Options read from the call's attributes.
class FfiOptions final : public Options {
 public:
  explicit FfiOptions(const ffi::Dictionary& attrs) : attrs_(attrs) {}
  bool flag(std::string_view name) const override;
  float real(std::string_view name) const override;
  std::string text(std::string_view name) const override;
  /// An i64 attribute (a count); invalid_argument naming it where it has another type.
  int64_t count(std::string_view name) const;

 private:
  const ffi::Dictionary& attrs_;
};

/// The call's operands (every argument; every result but the last) and its workspace (the last result,
/// a u8 buffer). Throws Error when a buffer cannot be viewed or the workspace is missing.
struct DecodedCall {
  Operands operands;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
DecodedCall decode_call(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets, Device device);

/// moegemm::Error as ffi::Error with its message (jax_message: dtypes spelled as numpy does;
/// invalid_argument -> kInvalidArgument, unsupported -> kUnimplemented, others -> kInternal).
ffi::Error to_ffi_error(const Error& e);

}  // namespace moegemm::jax_binding
