#include "sm90/tail.cuh"

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "moegemm/error.hpp"

namespace moegemm::sm90 {
namespace {

constexpr int kTailThreads = 256;

__global__ void __launch_bounds__(kTailThreads) zero_tail_kernel(OutMatrix out, int64_t row_bytes,
                                                                 const int* offsets, int num_experts, int m) {
  using Reduce = cub::BlockReduce<int, kTailThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ int end_shared;
  int local = 0;
  for (int g = threadIdx.x; g < num_experts; g += kTailThreads) local = max(local, __ldg(offsets + g));
  const int block_max = Reduce(tmp).Reduce(local, cuda::maximum<int>{});
  if (threadIdx.x == 0) end_shared = min(m, block_max);
  __syncthreads();
  const int64_t end = end_shared;
  // 16-byte stores for matrices (rows are multiples of 16 bytes), 4-byte ones for a vector such as dprob.
  const int unit = row_bytes % 16 == 0 ? 16 : 4;
  const int64_t units_per_row = row_bytes / unit;
  const int64_t total = (static_cast<int64_t>(m) - end) * units_per_row;
  const int esize = out.type == OutType::f32 ? 4 : 2;
  uint8_t* base = static_cast<uint8_t*>(out.ptr);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kTailThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kTailThreads) {
    uint8_t* at = base + (end + i / units_per_row) * out.ld * esize + (i % units_per_row) * unit;
    if (unit == 16) *reinterpret_cast<uint4*>(at) = make_uint4(0, 0, 0, 0);
    else *reinterpret_cast<uint32_t*>(at) = 0;
  }
}

}  // namespace

void launch_zero_tail(const OutMatrix& out, int64_t cols, const int* offsets, int num_experts, int m, int sms,
                      cudaStream_t stream) {
  if (!out.ptr || m == 0 || !offsets) return;
  const int esize = out.type == OutType::f32 ? 4 : 2;
  zero_tail_kernel<<<2 * sms, kTailThreads, 0, stream>>>(out, cols * esize, offsets, num_experts, m);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw Error(ErrorCode::cuda_error, std::string("zero_tail launch failed: ") + cudaGetErrorString(err));
  }
}

}  // namespace moegemm::sm90
