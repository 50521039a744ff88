// The problems the host launcher sees, decoded from the ops' arguments.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "moegemm/ops.hpp"
#include "sm90/instances.hpp"

namespace moegemm::sm90 {

/// An m-grouped GEMM (every op but the weight gradient): D = epilogue(A (M, K) x B_g^T) over each expert's
/// rows. For the backward epilogues A is the incoming gradient and B the weights seen from the backward.
struct ForwardProblem {
  const char* op;
  TensorView a;             // (M, K) bf16, row-major or (a_column_major) column-major
  bool a_column_major = false;  // stride(0) == 1: M-major A tiles (grouped_gemm only, the linear epilogue)
  const void* b = nullptr;        // dense weights, (E, N, K) for nk or (E, K, N) for kn
  int64_t b_row_stride = 0, b_expert_stride = 0;  // their strides in elements (dims 1 and 0 of the stack)
  const int64_t* b_ptrs = nullptr;  // or (E,) device addresses of per-expert (N, K) / (K, N) matrices
  bool pointer_weights = false;      // b_ptrs given: sizes the workspace, whose query may carry a null table
  void* workspace = nullptr;      // workspace_bytes(problem) bytes
  BLayout b_layout = BLayout::nk;
  const int* offsets = nullptr;  // nullptr: one group of M rows
  int64_t num_experts = 1, m = 0, n = 0, k = 0;
  const float* alpha = nullptr;
  float alpha_scalar = 1.0f;
  const float* prob = nullptr;
  const void* bias = nullptr;
  bool bias_f32 = false;
  TensorView d, c;  // c may be undefined; for dglu/dsrelu d is dC
  EpilogueKind epilogue = EpilogueKind::linear;
  GluParams glu;
  bool zero_tail = false;
  // Backward epilogues (dglu, dsrelu) and gemm_amax.
  TensorView preact;  // the saved pre-activation
  const float* beta = nullptr;
  TensorView dprob, dbias, amax;
};

/// The weight gradient: W_g = A[rows_g]^T B[rows_g] for every expert, A (T, m) and B (T, n) token-major.
struct WgradProblem {
  TensorView a, b;  // bf16, row-major; W's rows are A's columns
  const int* offsets = nullptr;
  int64_t num_experts = 1;
  TensorView w;                      // dense (E, m, n), or undefined with w_ptrs
  const int64_t* w_ptrs = nullptr;   // (E,) addresses of row-major (m, n) buffers of w_dtype
  DType w_dtype = DType::f32;
  bool accumulate = false;
  void* workspace = nullptr;  // wgrad_workspace_bytes(E)
};

/// Device workspace of an m-grouped problem: per-expert B maps (pointer weights), dprob and dbias partials.
std::size_t workspace_bytes(const ForwardProblem& problem);
std::size_t wgrad_workspace_bytes(int64_t num_experts);

/// Enqueue the kernels of a problem on `stream` (plus the finish and zero_tail kernels it needs). Never
/// synchronise.
void launch_forward(const ForwardProblem& problem, cudaStream_t stream);
void launch_wgrad(const WgradProblem& problem, cudaStream_t stream);

}  // namespace moegemm::sm90
