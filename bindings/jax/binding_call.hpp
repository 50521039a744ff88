// What one JAX custom call hands an op: its operand views in a fixed order, and its attributes.
//
// The same description is produced twice: from XLA FFI buffers when the op runs (ffi_decode.hpp), and
// from shapes and dtypes alone when Python asks for the workspace size at trace time
// (workspace_query.cpp). Both paths then go through one builder per op (op_builders.hpp), so the
// workspace that is sized is exactly the workspace that is used.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "moegemm/moegemm.hpp"

namespace moegemm::jax_binding {

/// The attributes of one call. Every accessor throws Error(invalid_argument) naming the attribute when
/// it is absent or has the wrong type (the Python layer always passes every attribute of the op).
class Options {
 public:
  virtual ~Options() = default;
  virtual bool flag(std::string_view name) const = 0;
  virtual float real(std::string_view name) const = 0;
  virtual std::string text(std::string_view name) const = 0;
};

/// Operand views in call order; `out` excludes the trailing workspace output.
struct Operands {
  std::vector<TensorView> in;
  std::vector<TensorView> out;
};

/// Hands out the operands of a call one by one, in order, and reports a count mismatch by op and
/// operand name (a mismatch means the Python layer and the handler disagree: a moegemm bug).
class OperandCursor {
 public:
  OperandCursor(const char* op, const Operands& operands) : op_(op), ops_(operands) {}
  const TensorView& input(const char* name);
  const TensorView& output(const char* name);
  /// An optional operand: taken when `present`, else an absent (rank 0) view.
  TensorView input_if(bool present, const char* name);
  TensorView output_if(bool present, const char* name);
  /// Throws when operands were left over.
  void finish() const;

 private:
  const char* op_;
  const Operands& ops_;
  std::size_t next_in_ = 0;
  std::size_t next_out_ = 0;
};

}  // namespace moegemm::jax_binding
