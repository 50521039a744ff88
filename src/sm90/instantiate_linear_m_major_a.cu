// Instantiations of the linear epilogue's cooperative kernel with M-major A tiles (grouped_gemm with a
// column-major A), in their own translation unit so that they compile in parallel with the others.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/linear.cuh"

namespace moegemm::sm90 {

void launch_linear_m_major_a(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  using S = MGroupedScheduler;
  using E = LinearEpilogue;
  if (layout == BLayout::nk) {
    if (block_n == 256) launch_kernel<TileShape<256, Major::k, Major::mn>, S, E>(p, grid, stream);
    else launch_kernel<TileShape<128, Major::k, Major::mn>, S, E>(p, grid, stream);
  } else {
    if (block_n == 256) launch_kernel<TileShape<256, Major::mn, Major::mn>, S, E>(p, grid, stream);
    else launch_kernel<TileShape<128, Major::mn, Major::mn>, S, E>(p, grid, stream);
  }
}

}  // namespace moegemm::sm90
