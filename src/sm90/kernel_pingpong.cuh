// The ping-pong variant of the persistent kernel: each consumer warpgroup owns whole 128 x BN tiles,
// alternate tiles of the CTA's sequence, and runs its epilogue while the other warpgroup's mainloop has the
// tensor cores. In the cooperative kernel (kernel.cuh) both warpgroups run the epilogue of their shared tile
// and the tensor cores idle meanwhile. It pays where the epilogue is long against the mainloop (the GLU,
// the dGLU with a saved tile, f32 weight gradients of mid-length experts) and, for the linear epilogue, where the
// cooperative tile would be 128 columns wide too or N pads badly to 256 (heuristic.hpp); its 128 x 128
// tiles read more operand bytes per FLOP than the cooperative 128 x 256 ones.
//
// 384 threads: warpgroup 0 is the producer: warp 0 issues the operand loads of every tile, in the CTA's
// tile order; with a saved tile (dGLU), warps 1 and 2 issue the saved-tile loads of consumer warpgroups 1
// and 2, one 64-row slice at a time into that warpgroup's staging area. Warpgroups 1 and 2 are the
// consumers. The mainloops take turns (one mbarrier per warpgroup), so the stage ring is consumed in the
// order the producer fills it, and a consumer never waits on a stage more than one phase ahead of it.
// Either scheduler: m-grouped tiles all run p.k_blocks, k-grouped ones their expert's k-blocks.
#pragma once

#include "sm90/kernel.cuh"

namespace moegemm::sm90 {

/// Staging for one 64-row slice per warpgroup (of the saved tile, the tile, or as wide as the epilogue asks);
/// barriers full/empty per stage, then per consumer warpgroup: saved tile full, saved tile empty, turn.
template <class Shape, class Scheduler, class Epilogue>
using PingPongLayout =
    SmemLayout<Shape, Scheduler,
               Staging<std::max({Shape::kBN, saved_tile_cols<Epilogue>(), staging_cols<Epilogue>()})>::kBytes,
               epilogue_scratch_bytes<Epilogue>(), 2 * Shape::kStages + 6>;

template <class Shape, class Scheduler, class Epilogue>
__global__ void __launch_bounds__(kKernelThreads, 1)
    grouped_gemm_pingpong_kernel(const __grid_constant__ KernelParams p) {
  using Layout = PingPongLayout<Shape, Scheduler, Epilogue>;
  constexpr int kBN = Shape::kBN;
  constexpr bool kSavedTile = saved_tile_cols<Epilogue>() > 0;
  static_assert(!kSavedTile || (Scheduler::kUniformK && saved_passes<Epilogue, kBN>() == 1),
                "a saved tile: m-grouped, one saved-tile pass per 64-row slice");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t misalign = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023u;  // kernel.cuh
  uint8_t* smem = smem_raw + ((1024u - misalign) & 1023u);
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset);
  Mainloop<Shape> mainloop{smem + Layout::kAOffset, smem + Layout::kBOffset, barriers, barriers + Shape::kStages};
  uint64_t* saved_full = barriers + 2 * Shape::kStages;  // [consumer warpgroup]
  uint64_t* saved_empty = saved_full + 2;
  uint64_t* turn = saved_empty + 2;  // turn[c] completes when warpgroup c may start its next mainloop
  if (threadIdx.x == 0) {
    mainloop.init_barriers(1);  // only the warpgroup that consumed a stage releases it
    for (int c = 0; c < 2; ++c) {
      cuda::ptx::mbarrier_init(&saved_full[c], 1);
      cuda::ptx::mbarrier_init(&saved_empty[c], 1);
      cuda::ptx::mbarrier_init(&turn[c], 128);  // every thread of the other warpgroup, after its mainloop
    }
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    if constexpr (kSavedTile) prefetch_maps(p, true, true, true);  // dGLU stores D; tma_c maps the saved tile
    else prefetch_maps(p, Scheduler::kUniformK, p.d.ptr != nullptr, p.c.ptr != nullptr);
  }
  // Builds the tile table; its __syncthreads also publishes the barrier initialisation.
  const Scheduler sched(*reinterpret_cast<typename Scheduler::Storage*>(smem + Layout::kSchedulerOffset), p);
  const int total = sched.total_tiles();
  const int stride = static_cast<int>(gridDim.x);
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    setmaxnreg_dec<40>();
    const int warp = threadIdx.x / 32;
    if (threadIdx.x == 0) {
      PipeState ps;
      int acquired_expert = -1;
      for (int t = blockIdx.x; t < total; t += stride) {
        const LoadPlan plan = load_plan<Shape, Scheduler, Epilogue, false>(p, sched.tile(t), acquired_expert);
        mainloop.load_tile(ps, plan, 0, plan.k_blocks);
      }
    } else if constexpr (kSavedTile) {
      if ((warp == 1 || warp == 2) && threadIdx.x % 32 == 0) {
        // The saved tile of consumer warpgroup c's tiles, 64 rows at a time, each once the warpgroup has
        // released the previous slice.
        const int c = warp - 1;
        uint8_t* area = smem + Layout::kStagingOffset + c * Layout::kStagingBytes;
        uint32_t phase = 0;
        for (int t = blockIdx.x + c * stride; t < total; t += 2 * stride) {
          const WorkTile tile = sched.tile(t);
          const ColumnMap saved = Epilogue::saved_columns(p, tile.n_tile * kBN);
          for (int slice = 0; slice < 2; ++slice) {
            mbar_wait(&saved_empty[c], phase ^ 1);
            cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                                 &saved_full[c], Layout::kStagingBytes);
#pragma unroll
            for (int seg = 0; seg < saved_tile_cols<Epilogue>() / 64; ++seg) {
              const int32_t coord[2] = {saved.base[seg], tile.row0 + 64 * slice};
              cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, area + seg * 8192,
                                              &p.tma_c, coord, &saved_full[c]);
            }
            phase ^= 1;
          }
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int c = wg - 1;
    const Staging<kBN> staging{smem + Layout::kStagingOffset + c * Layout::kStagingBytes,
                               static_cast<int>(threadIdx.x % 128), static_cast<uint32_t>(1 + c),
                               reinterpret_cast<float*>(smem + Layout::kScratchOffset + c * Layout::kScratchBytes)};
    // k-blocks of the CTA's tile t (0 past the last): uniform for m-grouped tiles, the expert's for k-grouped.
    auto k_blocks_of = [&](int t) {
      if constexpr (Scheduler::kUniformK) return p.k_blocks;
      else return t < total ? sched.tile(t).k_blocks : 0;
    };
    PipeState ps;
    ps.skip<Shape::kStages>(c * k_blocks_of(static_cast<int>(blockIdx.x)));  // warpgroup 1's first tile is the CTA's second
    uint32_t turn_phase = 0, saved_phase = 0;
    for (int t = blockIdx.x + c * stride; t < total; t += 2 * stride) {
      const WorkTile tile = sched.tile(t);
      if (c == 1 || t != static_cast<int>(blockIdx.x)) {  // the CTA's first mainloop waits for nobody
        mbar_wait(&turn[c], turn_phase);
        turn_phase ^= 1;
      }
      // Rows 0-63 of the tile in acc[0, kBN/2), rows 64-127 in acc[kBN/2, kBN).
      float acc[kBN];
      float (&top)[kBN / 2] = *reinterpret_cast<float(*)[kBN / 2]>(&acc[0]);
      float (&bottom)[kBN / 2] = *reinterpret_cast<float(*)[kBN / 2]>(&acc[kBN / 2]);
      mainloop.template mma_tile<kBN, Scheduler::kUniformK>(p, ps, tile.k_blocks, 0, 0, top, bottom);
      cuda::ptx::mbarrier_arrive(&turn[1 - c]);
      ps.skip<Shape::kStages>(k_blocks_of(t + stride));  // the other warpgroup's next tile
      if (!Scheduler::kUniformK && tile.k_blocks == 0) zero_registers(acc);
      const int64_t row0 = tile.row0;
      if constexpr (kSavedTile) {
#pragma unroll 1
        for (int slice = 0; slice < 2; ++slice) {
          mbar_wait(&saved_full[c], saved_phase);
          Epilogue::template apply_saved<kBN>(top, p, tile, 0, row0 + 64 * slice, staging);
          staging.release(&saved_empty[c]);
          saved_phase ^= 1;
          shift_registers<kBN / 2>(acc);
        }
      } else {
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, kBN, false);
#pragma unroll 1
        for (int slice = 0; slice < 2; ++slice) {
          Epilogue::template apply<kBN>(top, p, tile, cols, tile.n_tile * (kBN / 2), row0 + 64 * slice, staging);
          shift_registers<kBN / 2>(acc);
        }
      }
    }
    staging.drain();
  }
}

}  // namespace moegemm::sm90
