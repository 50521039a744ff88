// What the torch layer checks itself before allocating outputs: the ranks it needs to size them, and
// that all operands share one device. The moegemm contract checks everything else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "moegemm/ops.hpp"

namespace moegemm::torch_ops {

/// "(2, 3, 4)", and "(64,)" for one dim. Messages format numbers with std::to_string, not iostreams: this
/// library may carry a different C++ runtime than torch's, and number formatting through torch's locale
/// facets can crash.
std::string shape_text(at::IntArrayRef sizes);

/// ValueError "op: operand: expected a <rank>-D <what> tensor, got shape [...]" unless t.dim() == rank.
void expect_rank(const at::Tensor& t, int64_t rank, const char* op, const char* operand, const char* what);

/// ValueError "op: operand: expected a tensor on <device> (the device of <anchor_name>), got one on <device>"
/// unless `t` (when present) is on `anchor`'s device (type and index); `anchor_name` is the op's first operand.
/// A required `t` that is undefined: ValueError "op: operand: expected a tensor, got an undefined one".
void expect_device(const at::Tensor& anchor, const char* anchor_name, const at::Tensor& t, const char* op,
                   const char* operand);
void expect_device(const at::Tensor& anchor, const char* anchor_name, const std::optional<at::Tensor>& t,
                   const char* op, const char* operand);

/// Dense expert weights `b` stored as (E, N, K) ("nk") or (E, K, N) ("kn"); rank checked.
ExpertWeights dense_weights(const at::Tensor& b, BLayout layout, const char* op);

/// N of dense expert weights (the GEMM's output columns).
inline int64_t weights_n(const at::Tensor& b, BLayout layout) {
  return layout == BLayout::nk ? b.size(-2) : b.size(-1);
}

/// The GEMM's N of a single (non-grouped) weight matrix: (N, K) for nk, (K, N) for kn; rank checked.
int64_t matrix_n(const at::Tensor& b, BLayout layout, const char* op);

/// The placeholder returned for an output that was not requested: an empty (0,) tensor.
at::Tensor not_requested(const at::Tensor& like);

}  // namespace moegemm::torch_ops
