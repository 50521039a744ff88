// The device's dense-GEMM rate: one cuBLAS bf16 GEMM (f32 accumulation) of a given shape, timed in this run.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace moegemm::cli {

class DenseGemmTimer {
 public:
  DenseGemmTimer();
  ~DenseGemmTimer();
  DenseGemmTimer(const DenseGemmTimer&) = delete;
  DenseGemmTimer& operator=(const DenseGemmTimer&) = delete;

  /// Median device time (µs) of C (m, n) = A (m, k) @ B (k, n), all bf16 row-major, random data.
  double median_us(int64_t m, int64_t n, int64_t k, cudaStream_t stream, int warmup, int iters);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace moegemm::cli
