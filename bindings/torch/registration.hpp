// Each op family registers its kernels through one function, used for both the CPU and the CUDA
// dispatch key: the same code runs on host tensors (CPU reference backend) and device tensors (sm_90a).
#pragma once

#include <torch/library.h>

namespace moegemm::torch_ops {

void register_grouped_forward(torch::Library& m);   // grouped_gemm, grouped_gemm_glu, grouped_gemm_srelu
void register_grouped_backward(torch::Library& m);  // grouped_gemm_dglu, grouped_gemm_dsrelu
void register_wgrad(torch::Library& m);             // grouped_gemm_wgrad (+ .accumulate)
void register_dense(torch::Library& m);             // gemm_swiglu, gemm_amax, gemm_srelu, gemm_dsrelu

}  // namespace moegemm::torch_ops
