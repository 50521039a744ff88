// Instantiations of the dsrelu epilogue's kernels.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/dsrelu.cuh"

namespace moegemm::sm90 {

void launch_dsrelu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  dispatch_m_grouped<DsreluEpilogue>(p, block_n, layout, grid, stream);
}

}  // namespace moegemm::sm90
