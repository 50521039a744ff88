// The string and dtype arguments of the op schemas, parsed into moegemm's enums.
#pragma once

#include <optional>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "moegemm/ops.hpp"

namespace moegemm::torch_ops {

/// "nk" (weights stored (E, N, K), K contiguous) or "kn" ((E, K, N), N contiguous); (N, K) / (K, N) for the
/// dense ops (grouped = false), which the error message names. ValueError otherwise.
BLayout parse_b_layout(std::string_view text, const char* op, bool grouped = true);

/// "swiglu", "geglu" or "swiglu_clamped". ValueError otherwise.
Activation parse_activation(std::string_view text, const char* op);

/// "halves", "interleaved32" or "interleaved32_up_first". ValueError otherwise.
GluLayout parse_glu_layout(std::string_view text, const char* op);

/// The GLU parameters of one call from its schema arguments.
GluParams glu_params(std::string_view activation, std::string_view glu_layout, double limit,
                     double act_alpha, double linear_offset, const char* op);

/// Output dtype: `requested` when given, else `fallback`. A requested dtype that is not a floating type the
/// ops write (bf16, f16, f32, f64) is a ValueError naming the schema argument `arg`; whether the device
/// takes it (f64 on the host only) is the contract's to say.
at::ScalarType out_dtype_or(const std::optional<at::ScalarType>& requested, at::ScalarType fallback,
                            const char* op, const char* arg);

/// dbias's dtype: `requested` when given, else float32. The per-expert column sums are f32 or bf16 on every
/// backend (docs/ops.md §3); anything else is a ValueError naming `dbias_dtype`.
at::ScalarType dbias_dtype_or_f32(const std::optional<at::ScalarType>& requested, const char* op);

/// Default dtype of the outputs that default to f32 (grouped_gemm_wgrad's W, gemm_swiglu's ab12, as in the
/// cuDNN ops): float64 for float64 inputs (gradient checks on the host backend), float32 otherwise. (dprob,
/// amax and alpha/prob are float32 on every backend.)
inline at::ScalarType f32_default_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace moegemm::torch_ops
