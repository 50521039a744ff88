// Instantiations of the glu epilogue's kernels.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/glu.cuh"

namespace moegemm::sm90 {

void launch_glu(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  dispatch_m_grouped<GluEpilogue>(p, block_n, layout, grid, stream);
}

}  // namespace moegemm::sm90
