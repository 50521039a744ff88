#include "dense_gemm.hpp"

#include <string>

#include <cublas_v2.h>

#include "cuda_check.hpp"
#include "tensor_store.hpp"
#include "timing.hpp"

namespace moegemm::cli {
namespace {

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::cuda_error, std::string(what) + ": " + cublasGetStatusString(status));
}

}  // namespace

DenseGemmTimer::DenseGemmTimer() {
  cublasHandle_t h = nullptr;
  cublas_check(cublasCreate(&h), "cublasCreate");
  handle_ = h;
}

DenseGemmTimer::~DenseGemmTimer() { cublasDestroy(static_cast<cublasHandle_t>(handle_)); }

double DenseGemmTimer::median_us(int64_t m, int64_t n, int64_t k, cudaStream_t stream, int warmup, int iters) {
  auto h = static_cast<cublasHandle_t>(handle_);
  cublas_check(cublasSetStream(h, stream), "cublasSetStream");
  const OwnedTensor a = make_tensor(Device::cuda, DType::bf16, {m, k});
  const OwnedTensor b = make_tensor(Device::cuda, DType::bf16, {k, n});
  const OwnedTensor c = make_tensor(Device::cuda, DType::bf16, {m, n});
  fill_synthetic(a.view, 101, 1.0f);
  fill_synthetic(b.view, 102, 1.0f);
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  auto gemm = [&](cudaStream_t) {
    cublas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(k), &one, b.view.data, CUDA_R_16BF, static_cast<int>(n), a.view.data,
                              CUDA_R_16BF, static_cast<int>(k), &zero, c.view.data, CUDA_R_16BF, static_cast<int>(n),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };
  const double us = median_device_us(gemm, stream, warmup, iters);
  MOEGEMM_CLI_CUDA(cudaDeviceSynchronize());  // the buffers are freed on return
  return us;
}

}  // namespace moegemm::cli
