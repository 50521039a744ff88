// Instantiations of the srelu epilogue's kernels.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/srelu.cuh"

namespace moegemm::sm90 {

void launch_srelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  dispatch_m_grouped<SreluEpilogue>(p, block_n, layout, grid, stream);
}

}  // namespace moegemm::sm90
