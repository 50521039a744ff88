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
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      PipeState ps;
      int acquired_expert = -1;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const auto tile = sched.tile(t);
        const bool half = p.half_tiles && tile.row_end - tile.row0 <= 64;
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, Shape::kBN, half);
        int b_col[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) b_col[j] = cols.base[j];
        const void* b_map = &p.tma_b;
        int b_expert = tile.expert;
        if (p.b_maps) {  // pointer-mode weights: the expert's own map, written by a prologue kernel
          b_map = p.b_maps + tile.expert;
          b_expert = 0;
          if (tile.expert != acquired_expert) {
            cuda::ptx::fence_proxy_tensormap_generic(cuda::ptx::sem_acquire, cuda::ptx::scope_gpu, b_map,
                                                     cuda::ptx::n32_t<128>{});
            acquired_expert = tile.expert;
          }
        }
        mainloop.load_tile(p, ps, tile.row0, b_map, b_expert, b_col);
      }
    }
  } else {
    setmaxnreg_inc<240>();
    const int cw = wg - 1;
    constexpr int kBN = Shape::kBN;
    const Staging<kBN> staging{smem + Layout::kStagingOffset + cw * Staging<kBN>::kBytes,
                               static_cast<int>(threadIdx.x % 128), static_cast<uint32_t>(1 + cw)};
    PipeState ps;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const auto tile = sched.tile(t);
      const bool half = p.half_tiles && tile.row_end - tile.row0 <= 64;
      // Column maps are derived after the mainloop so that nothing but the accumulators lives across it.
      float acc[kBN / 2];
      if (half) {
        // The first kBN/4 accumulators of the same registers hold the warpgroup's 64 x kBN/2 slice.
        float (&acc_half)[kBN / 4] = *reinterpret_cast<float(*)[kBN / 4]>(&acc[0]);
        mainloop.template mma_tile<kBN / 2>(p, ps, 0, cw * kBN * 64, acc_half);
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, kBN, true);
        const int d_col0 = tile.n_tile * (kBN / 2);  // GLU output columns of the tile
        const Staging<kBN / 2> half_staging{staging.buf, staging.tid, staging.barrier_id};
        Epilogue::template apply<kBN / 2>(acc_half, p, tile.expert, half_columns(cols, cw, kBN / 128),
                                          d_col0 + cw * (kBN / 4), tile.row0, tile.row_end, half_staging);
      } else {
        mainloop.template mma_tile<kBN>(p, ps, cw * 64 * 128, 0, acc);
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, kBN, false);
        Epilogue::template apply<kBN>(acc, p, tile.expert, cols, tile.n_tile * (kBN / 2),
                                      static_cast<int64_t>(tile.row0) + 64 * cw,
                                      tile.row_end, staging);
      }
    }
    staging.drain();
  }
}

}  // namespace moegemm::sm90
