// The operand rules of docs/ops.md §0 ("Operand rules"), one method per rule, shared by every op's check.
// Success paths build no strings; a broken rule throws Error with
// "<op>: <operand>: expected <what>, got <what>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "moegemm/error.hpp"
#include "moegemm/tensor.hpp"

namespace moegemm::contract {

/// Operands by name, as a check lists them.
using NamedViews = std::initializer_list<std::pair<const char*, const TensorView*>>;

/// What the op does with an operand: reads it, writes it, or both (`updated`: the weight gradient's w with
/// accumulate, which the rules on outputs also cover: it overlaps no input, nor another output).
enum class Role : uint8_t { input, output, updated };

/// An operand of a call as a check places it: its name, its view and its role.
struct Operand {
  const char* name;
  const TensorView* view;
  Role role;
};

/// Whether the rules that read pointer values (non-null data, 16-byte aligned base addresses, host
/// per-expert pointer tables, no aliasing) run. Workspace queries skip them (ignore): bindings size workspaces
/// at trace time, before any buffer exists. `given` runs them on the operands that have data and skips the
/// outputs without (planned but not allocated yet): the check a binding makes before it allocates. Any other
/// operand without data (an input, an updated output) is refused as with `check`.
enum class Pointers : uint8_t { check, ignore, given };

/// One expected dimension of a shape: `value` < 0 means any size. `symbol` names it ("M", "K");
/// `from` names the operand that fixed it ("a", "offsets"), or nullptr.
struct Dim {
  const char* symbol;
  int64_t value = -1;
  const char* from = nullptr;
};

/// The rules of one call of one op. Register every operand with place() first, then settle() the backend;
/// the dtype rules depend on it (f32/f64 inputs are host-only).
class Rules {
 public:
  Rules(const char* op, Pointers pointers) : op_(op), pointers_(pointers) {}

  const char* op() const { return op_; }
  /// Whether the pointer rules read `t`'s data pointer (see Pointers; `t` is the view placed, not a copy).
  bool reads_pointer(const TensorView& t) const;
  Device backend() const { return backend_; }

  /// Records an operand's device, view and role, in order (absent operands are ignored); every operand of a
  /// call is placed, so that settle() and disjoint() see them all.
  void place(std::initializer_list<Operand> operands);
  /// Fixes the backend: the device most operands are on (ties: the first operand's). Throws naming the first
  /// operand (inputs before outputs) whose sizes span more than 2^62 bytes, or the first on the other device.
  Device settle();

  /// Throws Error(code, "<op>: <operand>: expected <expected>, got <got>").
  [[noreturn]] void fail(ErrorCode code, const char* operand, const std::string& expected,
                         const std::string& got) const;

  /// The operand is given (rank != 0; a negative rank is refused by place()).
  void present(const char* name, const TensorView& t, std::initializer_list<Dim> dims) const;
  /// Rank and sizes match `dims` (also checks presence).
  void shape(const char* name, const TensorView& t, std::initializer_list<Dim> dims) const;
  /// A size that must be positive (K, N, H, b.n).
  void positive(const char* name, const char* symbol, int64_t value) const;

  /// GEMM input (A, B, X, dY): bf16/f16; f32/f64 on the host backend; 8-bit and FP4 are unsupported.
  void input_dtype(const char* name, DType t) const;
  /// Same dtype as the operand `ref_name`.
  void same_dtype(const char* name, DType t, const char* ref_name, DType ref) const;
  /// Floating output (D, C, dC, ab12, W) or saved pre-activation: bf16/f16/f32; f64 on the host backend.
  void output_dtype(const char* name, DType t) const;
  /// Bias: bf16/f32; f64 on the host backend.
  void bias_dtype(const char* name, DType t) const;
  /// Exactly one dtype.
  void dtype_is(const char* name, DType t, DType expected) const;
  /// One of two dtypes.
  void dtype_in(const char* name, DType t, DType first, DType second) const;

  /// 2-D operand: stride(1) == 1, stride(0) >= columns, and the 16-byte rule (base address, row length
  /// and row stride in bytes multiples of 16). `cols` names the column dimension for messages.
  void matrix(const char* name, const TensorView& t, const char* cols) const;
  /// 2-D operand row-major (as `matrix`) or column-major: stride(0) == 1 with more than one row and column,
  /// stride(1) >= the rows and a multiple of 16 bytes, 16-byte aligned (grouped_gemm's A, the transposed view
  /// of a row-major (K, M) tensor). `rows` and `cols` name the dimensions for messages.
  void matrix_either_order(const char* name, const TensorView& t, const char* rows, const char* cols) const;
  /// 3-D output (dense wgrad W): contiguous, 16-byte aligned, rows a multiple of 16 bytes.
  void stacked_matrices(const char* name, const TensorView& t, const char* cols) const;
  /// 3-D input read through one tensor map (dense B): unit stride in the last dim; a row stride >= the
  /// columns; row and expert strides positive multiples of 16 bytes (padded rows, any expert stride: every
  /// other expert of a stack, a slice of a wider one), below the tensor map's 2^40 bytes on the cuda
  /// backend; 16-byte aligned, rows a multiple of 16 bytes. A stride the tensor never steps (a dim of
  /// one) is free.
  void expert_matrices(const char* name, const TensorView& t, const char* cols) const;
  /// 1-D operand: contiguous, base address aligned to its element size.
  void vector(const char* name, const TensorView& t) const;
  /// `value` elements of `dtype` span a multiple of 16 bytes (dimensions the kernels split or tile by
  /// TMA: K and N of B, the I of a halves split).
  void row_bytes(const char* name, const char* symbol, int64_t value, DType dtype) const;
  /// The matrix behind each entry of a pointer table `name` (b.ptrs, w_ptrs), `rows` x `cols` elements of
  /// `dtype` as the other operands give them, spans at most 2^62 bytes: the rule of every operand (rule 4),
  /// which the table's own view does not carry. An extent that is not positive is left to its own rule.
  void table_matrices(const char* name, const char* row_symbol, int64_t rows, const char* col_symbol, int64_t cols,
                      DType dtype) const;
  /// On the cuda backend, an extent the sm_90a kernels hold in a 32-bit integer (M, N, K, H) is at most
  /// 2147483647 (unsupported past it); the host backend takes any.
  void kernel_extent(const char* name, const char* symbol, int64_t value) const;
  /// On the cuda backend, a matrix whose rows the sm_90a kernels address as contiguous (the dense ops'
  /// bias) has stride(0) == its columns when it has more than one row (unsupported otherwise).
  void contiguous_rows_on_device(const char* name, const TensorView& t, const char* cols) const;
  /// An enum option within its values: `value` indexes `names` (count of them); otherwise invalid_argument
  /// naming the option and listing the values.
  void option(const char* name, int value, std::initializer_list<const char*> names) const;
  /// Host pointer table (b.ptrs, w_ptrs on the host backend): every entry non-null and 16-byte aligned.
  void pointer_table(const char* name, const TensorView& t) const;
  /// No aliasing (docs/ops.md §0.2, rule 9): no placed output shares memory with a later output or with an
  /// input (views_overlap: exact for the outputs' layouts, a strided weight stack counted as its whole span);
  /// the first such pair in placement order is named. Pointer rules only; run after them.
  void disjoint() const;

 private:
  /// A matrix operand's data pointer: non-null and 16-byte aligned (the 16-byte rule).
  void aligned_base(const char* name, const TensorView& t) const;

  const char* op_;
  Pointers pointers_;
  Device backend_ = Device::host;
  static constexpr int kMaxOperands = 16;
  Operand operands_[kMaxOperands] = {};
  int count_ = 0;
};

/// "(8, 128, 32)".
std::string format_shape(const TensorView& t);
/// "(1024, 1)", the strides in elements.
std::string format_strides(const TensorView& t);
/// "(E=8, N, K=64) with E from offsets, K from a".
std::string format_dims(std::initializer_list<Dim> dims);

}  // namespace moegemm::contract
