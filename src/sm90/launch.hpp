// The forward problem as the host launcher sees it, decoded from any forward op's arguments.
#pragma once

#include <cuda_runtime_api.h>

#include "moegemm/ops.hpp"

namespace moegemm::sm90 {

struct ForwardProblem {
  const char* op;
  TensorView a;             // (M, K) bf16
  const void* b = nullptr;        // dense weights, (E, N, K) for nk or (E, K, N) for kn
  const int64_t* b_ptrs = nullptr;  // or (E,) device addresses of per-expert (N, K) / (K, N) matrices
  void* workspace = nullptr;      // expert_maps_bytes(E) bytes with b_ptrs
  BLayout b_layout = BLayout::nk;
  const int* offsets = nullptr;  // nullptr: one group of M rows
  int64_t num_experts = 1, m = 0, n = 0, k = 0;
  const float* alpha = nullptr;
  float alpha_scalar = 1.0f;
  const float* prob = nullptr;
  const void* bias = nullptr;
  bool bias_f32 = false;
  TensorView d, c;  // c may be undefined
  bool glu_epilogue = false;
  GluParams glu;
  bool zero_tail = false;
};

/// Enqueues the forward kernel (and the zero_tail kernel when asked) on `stream`. Never synchronises.
void launch_forward(const ForwardProblem& problem, cudaStream_t stream);

}  // namespace moegemm::sm90
