// CPU reference of every op: the oracle of the GPU kernels and the CPU backend of both bindings.
// Inputs are contract-checked host tensors. Writes exactly what docs/ops.md says, and nothing else.
//
// Numerics and conventions every run() follows (the GPU kernels are tested against them):
//  - Inputs bf16/f16/f32 compute in f32; f64 inputs (the gradient-check path) compute in f64. Products
//    sum over k in ascending order. Outputs are rounded once, to nearest even (an f64 value headed for a
//    16-bit output is rounded to f32 first).
//  - Epilogues use the unrounded values: D, dC, dprob, dbias and amax come from the f32 pre-activation,
//    never from the rounded C. dprob sums columns in ascending order; dbias and amax combine fixed
//    64-row blocks in row order, so results are bitwise identical run to run, whatever the thread count.
//  - offsets: every end is clamped into [previous end, M]; rows at or past the clamped last end are left
//    alone unless zero_tail, which zeros exactly those rows of d, c, dc and dprob.
//  - dglu/dsrelu: dH = alpha[g] * dY @ B_g^T (alpha once). dglu evaluates the activation at beta[g] * C
//    and dC is the gradient with respect to that scaled pre-activation (no extra beta factor).
//    swiglu_clamped's gradient passes where gate <= limit and -limit <= up <= limit (boundaries
//    included, docs/ops.md §3) and is zero beyond.
//  - dbias rows of empty experts are written as exact zeros; amax is written even with no rows (0).
//  - wgrad: empty experts get exact zeros, or are left untouched with accumulate; accumulate adds the
//    f32 product to the stored value and rounds once.
//  - gemm_dsrelu follows the grouped convention (the GEMM gives dH, C is the saved pre-activation).
// Throws Error(invalid_argument) for an interleaved GLU layout whose pre-activation width is not a
// multiple of 64 (a guard; the contract check rejects it first).
#pragma once

#include "moegemm/ops.hpp"

namespace moegemm::reference {

void run(const GroupedGemmArgs& args);
void run(const GroupedGemmGluArgs& args);
void run(const GroupedGemmDgluArgs& args);
void run(const GroupedGemmSreluArgs& args);
void run(const GroupedGemmDsreluArgs& args);
void run(const GroupedGemmWgradArgs& args);
void run(const GemmSwigluArgs& args);
void run(const GemmAmaxArgs& args);
void run(const GemmSreluArgs& args);
void run(const GemmDsreluArgs& args);

}  // namespace moegemm::reference
