// One builder per op: the op's argument struct from the operands and attributes of a JAX call.
//
// Operand order of each call (optional operands only when their flag attribute is true; every call
// ends with one extra u8 workspace output that is not listed here):
//   grouped_gemm, grouped_gemm_srelu: in  a, b, offsets, [alpha: has_alpha], [prob: has_prob],
//                                         [bias: has_bias];  out d, [c: generate_c]
//   grouped_gemm_glu:                 as grouped_gemm, plus the GLU attributes
//   grouped_gemm_dglu:                in  a, b, c, offsets, [alpha], [beta: has_beta], [prob];
//                                     out dc, [dprob: compute_dprob], [dbias: compute_dbias],
//                                         [amax: compute_amax]
//   grouped_gemm_dsrelu:              in  a, b, c, offsets, [alpha], [prob];  out as dglu
//   grouped_gemm_wgrad:               in  x, dy, offsets;  out w
//   gemm_swiglu:                      in  a, b;  out ab12, c
//   gemm_amax:                        in  a, b;  out c, amax
//   gemm_srelu:                       in  a, b, [prob];  out d, [c: generate_c]
//   gemm_dsrelu:                      in  a, b, c, [prob];  out dc, [dprob: compute_dprob]
// Attributes: b_layout ("nk" | "kn") for every op with B; zero_tail (bool) for the grouped row-indexed
// ops; transpose_output (bool) for wgrad; alpha (f32) for the dense ops; activation ("swiglu" | "geglu"
// | "swiglu_clamped"), glu_layout ("halves" | "interleaved32" | "interleaved32_up_first"), limit,
// act_alpha, linear_offset (f32) for the GLU ops.
#pragma once

#include "binding_call.hpp"

namespace moegemm::jax_binding {

GroupedGemmArgs build_grouped_gemm(const Operands& ops, const Options& opt);
GroupedGemmGluArgs build_grouped_gemm_glu(const Operands& ops, const Options& opt);
GroupedGemmSreluArgs build_grouped_gemm_srelu(const Operands& ops, const Options& opt);
GroupedGemmDgluArgs build_grouped_gemm_dglu(const Operands& ops, const Options& opt);
GroupedGemmDsreluArgs build_grouped_gemm_dsrelu(const Operands& ops, const Options& opt);
GroupedGemmWgradArgs build_grouped_gemm_wgrad(const Operands& ops, const Options& opt);
GemmSwigluArgs build_gemm_swiglu(const Operands& ops, const Options& opt);
GemmAmaxArgs build_gemm_amax(const Operands& ops, const Options& opt);
GemmSreluArgs build_gemm_srelu(const Operands& ops, const Options& opt);
GemmDsreluArgs build_gemm_dsrelu(const Operands& ops, const Options& opt);

/// Attribute values of the enums; throw Error(invalid_argument) naming the attribute and the choices.
BLayout parse_b_layout(const std::string& text);
GluLayout parse_glu_layout(const std::string& text);
GluParams parse_glu(const Options& opt);
/// Dense expert weights from a (E, N, K) or (E, K, N) view.
ExpertWeights dense_weights(const TensorView& b, BLayout layout);

}  // namespace moegemm::jax_binding
