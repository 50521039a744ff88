// Instantiations of the linear epilogue's kernels.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/linear.cuh"

namespace moegemm::sm90 {

void launch_linear(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  dispatch_m_grouped<LinearEpilogue>(p, block_n, layout, grid, stream);
}

void launch_linear_pairs(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  dispatch_m_grouped<LinearEpilogue, 2>(p, block_n, layout, grid, stream);
}

}  // namespace moegemm::sm90
