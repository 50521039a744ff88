// Instantiations of the dGLU epilogue's kernels: BN = 128 only (a tile stages 256 dC columns).
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/dglu.cuh"

namespace moegemm::sm90 {

void launch_dglu(const KernelParams& p, int /*block_n*/, BLayout layout, int grid, cudaStream_t stream) {
  if (layout == BLayout::nk) launch_kernel<TileShape<128, Major::k>, MGroupedScheduler, DgluEpilogue>(p, grid, stream);
  else launch_kernel<TileShape<128, Major::mn>, MGroupedScheduler, DgluEpilogue>(p, grid, stream);
}

}  // namespace moegemm::sm90
