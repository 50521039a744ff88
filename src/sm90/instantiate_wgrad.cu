// Instantiations of the weight-gradient kernel: A and B MN-major (token-major operands), k-grouped.
#include "sm90/dispatch.cuh"
#include "sm90/epilogues/wgrad.cuh"

namespace moegemm::sm90 {

void launch_wgrad_kernel(const KernelParams& p, int block_n, int grid, cudaStream_t stream) {
  if (block_n == 256) {
    launch_kernel<TileShape<256, Major::mn, Major::mn>, KGroupedScheduler, WgradEpilogue<>>(p, grid, stream);
  } else if (p.d.type == OutType::f32) {
    // 128 x 128 f32 tiles staged in one pass: 4 stages fit next to the 2 x 32 KiB staging.
    launch_kernel<TileShape<128, Major::mn, Major::mn, 4>, KGroupedScheduler, WgradEpilogue<256>>(p, grid, stream);
  } else {
    launch_kernel<TileShape<128, Major::mn, Major::mn>, KGroupedScheduler, WgradEpilogue<>>(p, grid, stream);
  }
}

}  // namespace moegemm::sm90
