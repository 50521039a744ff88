// Instantiations of the ping-pong kernel (128 x 128 tiles) for the linear epilogue and the weight gradient.
// The dGLU's live with its activation's other kernels (glu_kernels.cuh).
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/linear.cuh"
#include "sm90/epilogues/wgrad.cuh"

namespace moegemm::sm90 {

void launch_linear_pingpong(const KernelParams& p, BLayout layout, int grid, cudaStream_t stream) {
  if (layout == BLayout::nk) launch_pingpong_kernel<TileShape<128, Major::k>, MGroupedScheduler, LinearEpilogue>(p, grid, stream);
  else launch_pingpong_kernel<TileShape<128, Major::mn>, MGroupedScheduler, LinearEpilogue>(p, grid, stream);
}

void launch_wgrad_pingpong(const KernelParams& p, int grid, cudaStream_t stream) {
  // f32 tiles are staged in one pass (32 KiB per warpgroup), which leaves room for 4 stages.
  if (p.d.type == OutType::f32) {
    launch_pingpong_kernel<TileShape<128, Major::mn, Major::mn, 4>, KGroupedScheduler, WgradEpilogue<256>>(p, grid, stream);
  } else {
    launch_pingpong_kernel<TileShape<128, Major::mn, Major::mn>, KGroupedScheduler, WgradEpilogue<>>(p, grid, stream);
  }
}

}  // namespace moegemm::sm90
