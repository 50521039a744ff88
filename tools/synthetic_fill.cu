// Device half of fill_synthetic: the same values as the host loop, written by a grid-stride kernel.
#include <cuda_bf16.h>

#include "cuda_check.hpp"
#include "synthetic.hpp"
#include "tensor_store.hpp"

namespace moegemm::cli {
namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = T(synthetic_value(seed, static_cast<uint64_t>(i), scale, offset));
}

}  // namespace

void fill_synthetic_device(const TensorView& t, uint64_t seed, float scale, float offset) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65536));
  if (t.dtype == DType::bf16)
    fill_kernel<<<blocks, threads>>>(t.ptr<__nv_bfloat16>(), n, seed, scale, offset);
  else if (t.dtype == DType::f32)
    fill_kernel<<<blocks, threads>>>(t.ptr<float>(), n, seed, scale, offset);
  else
    throw Error(ErrorCode::internal, "fill_synthetic: only bf16 and f32 tensors");
  MOEGEMM_CLI_CUDA(cudaGetLastError());
}

}  // namespace moegemm::cli
