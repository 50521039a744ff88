#include "sm90/expert_maps.cuh"

#include <cuda/ptx>

#include <string>

#include "moegemm/error.hpp"

namespace moegemm::sm90 {
namespace {

// One warp per expert: copy the template into shared memory, replace its global address, then copy it
// to global memory with a release fence of the tensor-map proxy (acquired by the GEMM's producer).
__global__ void __launch_bounds__(32) expert_maps_kernel(const __grid_constant__ CUtensorMap tmpl,
                                                         const int64_t* ptrs, CUtensorMap* maps) {
  __shared__ alignas(128) CUtensorMap staged;
  const int g = blockIdx.x;
  reinterpret_cast<uint32_t*>(&staged)[threadIdx.x] = reinterpret_cast<const uint32_t*>(&tmpl)[threadIdx.x];
  __syncwarp();
  if (threadIdx.x == 0) cuda::ptx::tensormap_replace_global_address(cuda::ptx::space_shared, &staged, ptrs[g]);
  __syncwarp();
  cuda::ptx::tensormap_cp_fenceproxy(cuda::ptx::sem_release, cuda::ptx::scope_gpu, maps + g, &staged,
                                     cuda::ptx::n32_t<128>{});
}

// One warp per expert: the clamped row range [start, end) of expert g (end_g = min(rows, max(0,
// offsets[0..g]))), then both templates with address and row extent replaced. Block 0 also zeroes the
// dynamic tile order's counter, when there is one: the GEMM after it in the stream starts from 0 without a
// memset of its own. With a w_ptrs table, its entry g is copied into the workspace: the GEMM reads the copy,
// so that an expert's output stored over the table cannot redirect a later expert's (docs/ops.md rule 9).
__global__ void __launch_bounds__(32) ragged_k_maps_kernel(const __grid_constant__ CUtensorMap tmpl_a,
                                                           const __grid_constant__ CUtensorMap tmpl_b,
                                                           const uint8_t* a, int64_t a_row_bytes, const uint8_t* b,
                                                           int64_t b_row_bytes, const int* offsets, int rows,
                                                           CUtensorMap* a_maps, CUtensorMap* b_maps,
                                                           int* tile_counter, const int64_t* w_ptrs,
                                                           int64_t* w_ptrs_copy) {
  __shared__ alignas(128) CUtensorMap staged[2];
  const int g = blockIdx.x;
  if (g == 0 && threadIdx.x == 0 && tile_counter) *tile_counter = 0;
  if (threadIdx.x == 0 && w_ptrs) w_ptrs_copy[g] = w_ptrs[g];
  int before = 0;  // max(0, offsets[0..g-1])
  for (int h = threadIdx.x; h < g; h += 32) before = max(before, __ldg(offsets + h));
  before = __reduce_max_sync(0xffffffffu, before);
  const int start = min(rows, before);
  const int end = min(rows, max(before, __ldg(offsets + g)));
  reinterpret_cast<uint32_t*>(&staged[0])[threadIdx.x] = reinterpret_cast<const uint32_t*>(&tmpl_a)[threadIdx.x];
  reinterpret_cast<uint32_t*>(&staged[1])[threadIdx.x] = reinterpret_cast<const uint32_t*>(&tmpl_b)[threadIdx.x];
  __syncwarp();
  if (threadIdx.x == 0) {
    const int extent = max(end - start, 1);  // an empty expert's maps are never read; extents must be >= 1
    cuda::ptx::tensormap_replace_global_address(cuda::ptx::space_shared, &staged[0], a + start * a_row_bytes);
    cuda::ptx::tensormap_replace_global_dim(cuda::ptx::space_shared, &staged[0], cuda::ptx::n32_t<1>{}, extent);
    cuda::ptx::tensormap_replace_global_address(cuda::ptx::space_shared, &staged[1], b + start * b_row_bytes);
    cuda::ptx::tensormap_replace_global_dim(cuda::ptx::space_shared, &staged[1], cuda::ptx::n32_t<1>{}, extent);
  }
  __syncwarp();
  cuda::ptx::tensormap_cp_fenceproxy(cuda::ptx::sem_release, cuda::ptx::scope_gpu, a_maps + g, &staged[0],
                                     cuda::ptx::n32_t<128>{});
  cuda::ptx::tensormap_cp_fenceproxy(cuda::ptx::sem_release, cuda::ptx::scope_gpu, b_maps + g, &staged[1],
                                     cuda::ptx::n32_t<128>{});
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(ErrorCode::cuda_error, std::string(what) + cudaGetErrorString(err));
}

CUtensorMap* aligned_maps(void* workspace) {
  return reinterpret_cast<CUtensorMap*>((reinterpret_cast<uintptr_t>(workspace) + 127) & ~uintptr_t(127));
}

}  // namespace

RaggedKMaps launch_ragged_k_maps(const CUtensorMap& tmpl_a, const CUtensorMap& tmpl_b, const void* a,
                                 int64_t a_row_bytes, const void* b, int64_t b_row_bytes, const int* offsets,
                                 int num_experts, int rows, void* workspace, int* tile_counter,
                                 const int64_t* w_ptrs, int64_t* w_ptrs_copy, cudaStream_t stream) {
  CUtensorMap* a_maps = aligned_maps(workspace);
  CUtensorMap* b_maps = a_maps + num_experts;
  ragged_k_maps_kernel<<<num_experts, 32, 0, stream>>>(tmpl_a, tmpl_b, static_cast<const uint8_t*>(a), a_row_bytes,
                                                       static_cast<const uint8_t*>(b), b_row_bytes, offsets, rows,
                                                       a_maps, b_maps, tile_counter, w_ptrs, w_ptrs_copy);
  check_launch("per-expert tensor map launch failed: ");
  return {a_maps, b_maps};
}

CUtensorMap* launch_expert_maps(const CUtensorMap& tmpl, const int64_t* ptrs, int num_experts, void* workspace,
                                cudaStream_t stream) {
  CUtensorMap* maps = aligned_maps(workspace);
  expert_maps_kernel<<<num_experts, 32, 0, stream>>>(tmpl, ptrs, maps);
  check_launch("per-expert tensor map launch failed: ");
  return maps;
}

}  // namespace moegemm::sm90
