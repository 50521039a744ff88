#include "sm90/reductions.cuh"

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "moegemm/error.hpp"
#include "sm90/scheduler.cuh"

namespace moegemm::sm90 {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxExperts = 1024;

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(ErrorCode::cuda_error, std::string(what) + ": " + cudaGetErrorString(err));
}

__global__ void __launch_bounds__(kThreads) dprob_finish_kernel(const float* partials, int n_tiles, float* dprob,
                                                                const int* offsets, int num_experts, int m) {
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ int end_shared;
  int local = offsets ? 0 : m;  // no offsets: one group of every row
  for (int g = threadIdx.x; offsets && g < num_experts; g += kThreads) local = max(local, __ldg(offsets + g));
  const int block_max = Reduce(tmp).Reduce(local, cuda::maximum<int>{});
  if (threadIdx.x == 0) end_shared = min(m, block_max);
  __syncthreads();
  // 64-bit r: the grid stride would wrap past 2^31 for M near it
  for (int64_t r = blockIdx.x * int64_t{kThreads} + threadIdx.x; r < end_shared; r += int64_t{gridDim.x} * kThreads) {
    float total = 0.f;
    for (int t = 0; t < n_tiles; ++t) total += partials[static_cast<int64_t>(t) * m + r];
    dprob[r] = total;
  }
}

__global__ void __launch_bounds__(kThreads) dbias_finish_kernel(const float* partials, int cols, OutMatrix dbias,
                                                                const int* offsets, int num_experts, int m) {
  using Table = ExpertTileScheduler<kThreads, kMaxExperts>;
  __shared__ typename Table::Storage storage;
  const Table table(storage, offsets, num_experts, m, 1, 128);  // tile_start[g] = first m_index of g
  const int g = blockIdx.y;
  const int64_t col = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (col >= cols) return;
  float total = 0.f;
  for (int t = 2 * storage.tile_start[g]; t < 2 * storage.tile_start[g + 1]; ++t) {
    total += partials[static_cast<int64_t>(t) * cols + col];
  }
  const int64_t idx = static_cast<int64_t>(g) * dbias.ld + col;
  if (dbias.type == OutType::f32) static_cast<float*>(dbias.ptr)[idx] = total;
  else static_cast<__nv_bfloat16*>(dbias.ptr)[idx] = __float2bfloat16_rn(total);
}

}  // namespace

void launch_dprob_finish(const float* partials, int n_tiles, float* dprob, const int* offsets, int num_experts,
                         int m, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::clamp<int64_t>((int64_t{m} + kThreads - 1) / kThreads, 1, 1024));
  dprob_finish_kernel<<<blocks, kThreads, 0, stream>>>(partials, n_tiles, dprob, offsets, num_experts, m);
  check_launch("dprob finish kernel launch");
}

void launch_dbias_finish(const float* partials, int cols, const OutMatrix& dbias, const int* offsets,
                         int num_experts, int m, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((int64_t{cols} + kThreads - 1) / kThreads), num_experts);
  dbias_finish_kernel<<<grid, kThreads, 0, stream>>>(partials, cols, dbias, offsets, num_experts, m);
  check_launch("dbias finish kernel launch");
}

}  // namespace moegemm::sm90
