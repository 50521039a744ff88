// The persistent, warp-specialised grouped GEMM kernel: scheduler + mainloop + one epilogue.
//
// 384 threads: warpgroup 0 is the producer (one thread issues every TMA load), warpgroups 1 and 2 are
// consumers (64 rows of the 128-row tile each). One CTA per SM walks tiles t = blockIdx.x + i * gridDim.x
// of the expert tile table; producer and consumers walk the same sequence independently, so they
// communicate only through the stage ring. While consumers run a tile's epilogue the producer is already
// loading the next tile's stages.
#pragma once

#include <cuda/ptx>

#include "sm90/epilogues/store.cuh"
#include "sm90/mainloop.cuh"
#include "sm90/params.cuh"
#include "sm90/ptx.cuh"
#include "sm90/scheduler.cuh"

namespace moegemm::sm90 {

inline constexpr int kKernelThreads = 384;
inline constexpr int kSchedulerMaxExperts = 1024;

template <class Shape>
struct SharedLayout {
  using Scheduler = ExpertTileScheduler<kKernelThreads, kSchedulerMaxExperts>;
  static constexpr int kAOffset = 0;
  static constexpr int kBOffset = kAOffset + Shape::kStages * Shape::kABytes;
  static constexpr int kStagingOffset = kBOffset + Shape::kStages * Shape::kBBytes;
  static constexpr int kBarrierOffset = kStagingOffset + 2 * Staging<Shape::kBN>::kBytes;
  static constexpr int kSchedulerOffset = kBarrierOffset + 2 * Shape::kStages * 8;
  static constexpr int kBytes = kSchedulerOffset + static_cast<int>(sizeof(typename Scheduler::Storage));
  static constexpr int kAllocBytes = kBytes + 1024;  // room to align the dynamic base to 1024 B
  static_assert(kAllocBytes <= 232448, "shared memory budget of an sm_90 CTA");
};

template <class Shape, class Epilogue>
__global__ void __launch_bounds__(kKernelThreads, 1) grouped_gemm_kernel(const __grid_constant__ KernelParams p) {
  using Layout = SharedLayout<Shape>;
  using Scheduler = typename Layout::Scheduler;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  Mainloop<Shape> mainloop{smem + Layout::kAOffset, smem + Layout::kBOffset,
                           reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset),
                           reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset) + Shape::kStages};
  if (threadIdx.x == 0) {
    for (int s = 0; s < Shape::kStages; ++s) {
      cuda::ptx::mbarrier_init(&mainloop.full[s], 1);   // the producer's arrive.expect_tx
      cuda::ptx::mbarrier_init(&mainloop.empty[s], 2);  // one arrival per consumer warpgroup
    }
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_a) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_b) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_d) : "memory");
    if (p.c.ptr) asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_c) : "memory");
  }
  // Builds the expert table; its __syncthreads also publishes the barrier initialisation.
  const Scheduler sched(*reinterpret_cast<typename Scheduler::Storage*>(smem + Layout::kSchedulerOffset),
                        p.offsets, p.num_experts, p.m, p.n_tiles, Shape::kBM);
  const int total = sched.total_tiles();
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      PipeState ps;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const auto tile = sched.tile(t);
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, Shape::kBN);
        int b_col[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) b_col[j] = cols.base[j];
        mainloop.load_tile(p, ps, tile.row0, tile.expert, b_col);
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int cw = wg - 1;
    const Staging<Shape::kBN> staging{smem + Layout::kStagingOffset + cw * Staging<Shape::kBN>::kBytes,
                                      static_cast<int>(threadIdx.x % 128), static_cast<uint32_t>(1 + cw)};
    PipeState ps;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const auto tile = sched.tile(t);
      float acc[Shape::kBN / 2];
      mainloop.mma_tile(p, ps, cw, acc);
      Epilogue::template apply<Shape::kBN>(acc, p, tile.expert, tile.n_tile,
                                           static_cast<int64_t>(tile.row0) + 64 * cw, tile.row_end, staging);
    }
    staging.drain();
  }
}

}  // namespace moegemm::sm90
