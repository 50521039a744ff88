// Each op family registers its kernels through one function, used for both the CPU and the CUDA
// dispatch key: the same code runs on host tensors (CPU reference backend) and device tensors (sm_90a).
#pragma once

#include <array>
#include <string_view>

#include <torch/library.h>

namespace moegemm::torch_ops {

/// Every op (and overload) of the library, as m.impl names them.
inline constexpr std::array<const char*, 11> kOps = {
    "grouped_gemm",       "grouped_gemm_glu", "grouped_gemm_dglu", "grouped_gemm_srelu",
    "grouped_gemm_dsrelu", "grouped_gemm_wgrad", "grouped_gemm_wgrad.accumulate", "gemm_swiglu",
    "gemm_amax",          "gemm_srelu",       "gemm_dsrelu"};
inline constexpr std::string_view kWgradAccumulate = "grouped_gemm_wgrad.accumulate";

void register_grouped_forward(torch::Library& m);   // grouped_gemm, grouped_gemm_glu, grouped_gemm_srelu
void register_grouped_backward(torch::Library& m);  // grouped_gemm_dglu, grouped_gemm_dsrelu
void register_wgrad(torch::Library& m);             // grouped_gemm_wgrad (+ .accumulate)
void register_dense(torch::Library& m);             // gemm_swiglu, gemm_amax, gemm_srelu, gemm_dsrelu

}  // namespace moegemm::torch_ops
