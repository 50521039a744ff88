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

}  // namespace

CUtensorMap* launch_expert_maps(const CUtensorMap& tmpl, const int64_t* ptrs, int num_experts, void* workspace,
                                cudaStream_t stream) {
  auto* maps = reinterpret_cast<CUtensorMap*>((reinterpret_cast<uintptr_t>(workspace) + 127) & ~uintptr_t(127));
  expert_maps_kernel<<<num_experts, 32, 0, stream>>>(tmpl, ptrs, maps);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw Error(ErrorCode::cuda_error, std::string("per-expert tensor map launch failed: ") + cudaGetErrorString(err));
  }
  return maps;
}

}  // namespace moegemm::sm90
