// Launchers of the GLU (forward) and dGLU kernels of one activation: the gate/up pairing, tile width and B
// layout are picked at run time among that activation's instantiations. Each activation compiles in a
// translation unit of its own (instantiate_activation.cu.in), so the 2 x 3 units build in parallel.
#pragma once

#include "sm90/dispatch.cuh"
#include "sm90/epilogues/dglu.cuh"
#include "sm90/epilogues/glu.cuh"

namespace moegemm::sm90 {

/// Calls f.template operator()<kPair>() for the run-time pairing.
template <class F>
void with_pairing(PairKind pairing, F&& f) {
  switch (pairing) {
    case PairKind::halves: return f.template operator()<PairKind::halves>();
    case PairKind::interleaved32: return f.template operator()<PairKind::interleaved32>();
    case PairKind::interleaved32_up_first: return f.template operator()<PairKind::interleaved32_up_first>();
  }
}

/// GLU tiles: the cooperative kernel with BN = block_n, or the ping-pong kernel's 128 x 128 tiles (one
/// warpgroup's C and D stores under the other's mainloop).
template <ActKind kAct>
void launch_glu_act(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                    cudaStream_t stream) {
  with_pairing(p.pairing, [&]<PairKind kPair>() {
    using Epilogue = GluEpilogue<kAct, kPair>;
    if (schedule == Schedule::cooperative) return dispatch_m_grouped<Epilogue>(p, block_n, layout, grid, stream);
    if (layout == BLayout::nk) launch_pingpong_kernel<TileShape<128, Major::k>, MGroupedScheduler, Epilogue>(p, grid, stream);
    else launch_pingpong_kernel<TileShape<128, Major::mn>, MGroupedScheduler, Epilogue>(p, grid, stream);
  });
}

/// dGLU tiles: BN = 128 with 4 stages (one saved-tile pass, or preact read from global memory), or, with a
/// saved tile only, BN = 256 with 3 stages (two passes through the same 64 KiB staging area), or, with a
/// saved tile only, ping-pong 128 x 128 tiles with 4 stages.
template <ActKind kAct>
void launch_dglu_act(const KernelParams& p, int block_n, Schedule schedule, BLayout layout, int grid,
                     cudaStream_t stream) {
  with_pairing(p.pairing, [&]<PairKind kPair>() {
    using Epilogue = DgluEpilogue<kAct, kPair>;
    using NK128 = TileShape<128, Major::k, Major::k, 4>;
    using KN128 = TileShape<128, Major::mn, Major::k, 4>;
    if (schedule == Schedule::pingpong) {
      if (layout == BLayout::nk) launch_pingpong_kernel<NK128, MGroupedScheduler, Epilogue>(p, grid, stream);
      else launch_pingpong_kernel<KN128, MGroupedScheduler, Epilogue>(p, grid, stream);
    } else if (layout == BLayout::nk) {
      if (block_n == 256) launch_kernel<TileShape<256, Major::k>, MGroupedScheduler, Epilogue>(p, grid, stream);
      else launch_kernel<NK128, MGroupedScheduler, Epilogue>(p, grid, stream);
    } else {
      if (block_n == 256) launch_kernel<TileShape<256, Major::mn>, MGroupedScheduler, Epilogue>(p, grid, stream);
      else launch_kernel<KN128, MGroupedScheduler, Epilogue>(p, grid, stream);
    }
  });
}

}  // namespace moegemm::sm90
