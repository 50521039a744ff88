// The persistent, warp-specialised grouped GEMM kernel: one tile scheduler + the mainloop + one epilogue.
//
// 384 threads: warpgroup 0 is the producer (one thread issues every TMA load), warpgroups 1 and 2 are
// consumers (64 rows of the 128-row tile each). One CTA per SM walks a sequence of tiles of the scheduler's
// table, in the static or the dynamic order (tile_order.cuh); producer and consumers walk the same
// sequence, and communicate through the stage ring (and, in the dynamic order, the ring of claimed tile
// numbers). While consumers run a tile's epilogue the producer is already loading the next tile's stages.
//
// The scheduler decides what a tile is: m-grouped (the forward ops and dgrad: tiles over each expert's
// rows, all of K) or k-grouped (the weight gradient: every expert's output tiles, K = the expert's rows).
#pragma once

#include <cuda/ptx>
#include <algorithm>

#include "sm90/epilogues/store.cuh"
#include "sm90/mainloop.cuh"
#include "sm90/params.cuh"
#include "sm90/ptx.cuh"
#include "sm90/scheduler.cuh"
#include "sm90/tile_order.cuh"

namespace moegemm::sm90 {

inline constexpr int kKernelThreads = 384;
inline constexpr int kSchedulerMaxExperts = 1024;

/// Per-warpgroup shared-memory scratch an epilogue asks for (kScratchBytes), e.g. for column sums.
template <class Epilogue>
constexpr int epilogue_scratch_bytes() {
  if constexpr (requires { Epilogue::kScratchBytes; }) return Epilogue::kScratchBytes;
  else return 0;
}

/// An epilogue that reads a saved tile (kSavedTileCols columns of the tile's rows, e.g. dGLU's
/// pre-activation) gets it in its staging area, loaded by the producer: the staging area is then
/// kSavedTileCols 16-bit columns wide (the 128B-swizzled layout a TMA box of 64 columns x 64 rows gives).
/// One load covers kSavedPassCols accumulator columns; a wider tile takes several passes through the area.
template <class Epilogue>
constexpr int saved_tile_cols() {
  if constexpr (requires { Epilogue::kSavedTileCols; }) return Epilogue::kSavedTileCols;
  else return 0;
}

/// Whether an epilogue takes half tiles (an expert's last <= 64 rows as two 64 x BN/2 slices). The
/// backward epilogues do not (kHalfTiles = false): their per-warpgroup row partials need whole tiles, and
/// their kernels then carry no half-tile code.
template <class Epilogue>
constexpr bool half_tiles_allowed() {
  if constexpr (requires { Epilogue::kHalfTiles; }) return Epilogue::kHalfTiles;
  else return true;
}

/// Accumulator columns one saved-tile pass covers (0 without a saved tile).
template <class Epilogue>
constexpr int saved_pass_cols() {
  if constexpr (requires { Epilogue::kSavedPassCols; }) return Epilogue::kSavedPassCols;
  else return 0;
}

/// Saved-tile passes of a tile of kBN accumulator columns (0 without a saved tile).
template <class Epilogue, int kBN>
constexpr int saved_passes() {
  return saved_pass_cols<Epilogue>() ? kBN / saved_pass_cols<Epilogue>() : 0;
}

/// Whether saved-tile pass `pass` of n-tile `n_tile` has columns inside the GEMM's N (a 256-column tile
/// over the last 128 or fewer columns has no second pass).
template <class Epilogue, int kBN>
__device__ __forceinline__ bool saved_pass_exists(const KernelParams& p, int n_tile, int pass) {
  return n_tile * kBN + pass * saved_pass_cols<Epilogue>() < p.n;
}

/// Moves registers [kFrom, kN) of acc down to [0, kN - kFrom): the next saved-tile pass's columns.
template <int kFrom, int kN>
__device__ __forceinline__ void shift_registers(float (&acc)[kN]) {
#pragma unroll
  for (int i = 0; i + kFrom < kN; ++i) acc[i] = acc[i + kFrom];
}

/// An epilogue may ask for a staging area wider than the tile (kStagingCols 16-bit columns), e.g. to stage
/// an f32 tile in one pass.
template <class Epilogue>
constexpr int staging_cols() {
  if constexpr (requires { Epilogue::kStagingCols; }) return Epilogue::kStagingCols;
  else return 0;
}

/// Shared memory of a persistent kernel: the stage ring (A, then B), a staging area and a scratch area per
/// consumer warpgroup, kBarriers mbarriers, kOrderBytes for the tile order's ring (cooperative kernel), the
/// scheduler's table.
template <class Shape, class Scheduler, int kStagingBytes_, int kScratchBytes_, int kBarriers, int kOrderBytes = 0>
struct SmemLayout {
  static constexpr int kAOffset = 0;
  static constexpr int kBOffset = kAOffset + Shape::kStages * Shape::kABytes;
  static constexpr int kStagingOffset = kBOffset + Shape::kStages * Shape::kBBytes;
  static constexpr int kStagingBytes = kStagingBytes_;
  static constexpr int kScratchBytes = kScratchBytes_;
  static constexpr int kScratchOffset = kStagingOffset + 2 * kStagingBytes;
  static constexpr int kBarrierOffset = kScratchOffset + 2 * kScratchBytes;
  static constexpr int kOrderOffset = kBarrierOffset + kBarriers * 8;
  static constexpr int kSchedulerOffset = kOrderOffset + kOrderBytes;
  static constexpr int kBytes = kSchedulerOffset + static_cast<int>(sizeof(typename Scheduler::Storage));
  static constexpr int kAllocBytes = kBytes + 1024;  // room to align the dynamic base to 1024 B
  static_assert(kAllocBytes <= 232448, "shared memory budget of an sm_90 CTA");
};

/// The cooperative kernel's: staging as wide as the tile, the saved tile or the epilogue asks; barriers
/// full/empty per stage, then the saved tile's full/empty pair; the tile order's ring.
template <class Shape, class Scheduler, class Epilogue>
using SharedLayout =
    SmemLayout<Shape, Scheduler,
               Staging<std::max({Shape::kBN, saved_tile_cols<Epilogue>(), staging_cols<Epilogue>()})>::kBytes,
               epilogue_scratch_bytes<Epilogue>(), 2 * Shape::kStages + 2, TileOrder::kBytes>;

/// Prefetches the tensor maps a launch loads and stores through: A's when it is the one map of A (the
/// k-grouped kernel has per-expert maps), B's unless per expert, D's and C's (C, or a saved tile loaded
/// through it) when used.
__device__ __forceinline__ void prefetch_maps(const KernelParams& p, bool a_map, bool d_map, bool c_map) {
  if (a_map) asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_a) : "memory");
  if (!p.b_maps) asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_b) : "memory");
  if (d_map) asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_d) : "memory");
  if (c_map) asm volatile("prefetch.tensormap [%0];" ::"l"(&p.tma_c) : "memory");
}

/// Makes a per-expert tensor map (written by a prologue kernel) visible to this thread's TMA loads.
__device__ __forceinline__ void acquire_map(const CUtensorMap* map) {
  cuda::ptx::fence_proxy_tensormap_generic(cuda::ptx::sem_acquire, cuda::ptx::scope_gpu, map,
                                           cuda::ptx::n32_t<128>{});
}

/// A tile without k-blocks (an empty expert's weight gradient) is zero.
template <int kN>
__device__ __forceinline__ void zero_registers(float (&acc)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = 0.f;
}

/// What the producer loads for one tile: A's rows, B's columns (of a half tile where the kernel and the
/// epilogue take them: kHalfTiles) and the tensor maps. Acquires a per-expert map the first time a run of
/// that expert's tiles needs it.
template <class Shape, class Scheduler, class Epilogue, bool kHalfTiles = half_tiles_allowed<Epilogue>()>
__device__ __forceinline__ LoadPlan load_plan(const KernelParams& p, const WorkTile& tile, int& acquired_expert) {
  const bool half = kHalfTiles && p.half_tiles && tile.row_end - tile.row0 <= 64;
  const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, Shape::kBN, half);
  LoadPlan plan;
#pragma unroll
  for (int j = 0; j < 4; ++j) plan.b_col[j] = cols.base[j];
  plan.a_row = tile.row0;
  if constexpr (Scheduler::kUniformK) {
    // m-grouped: the one map of A; B's map, or the expert's own (pointer-mode weights).
    plan.a_map = &p.tma_a;
    plan.b_map = p.b_maps ? p.b_maps + tile.expert : &p.tma_b;
    plan.b_expert = p.b_maps ? 0 : tile.expert;
    plan.k_blocks = p.k_blocks;
    if (p.b_maps && tile.expert != acquired_expert) {
      acquire_map(p.b_maps + tile.expert);
      acquired_expert = tile.expert;
    }
  } else {
    // k-grouped: both operands through the expert's own maps (row extent = the expert's rows).
    plan.a_map = p.a_maps + tile.expert;
    plan.b_map = p.b_maps + tile.expert;
    plan.b_expert = 0;
    plan.k_blocks = tile.k_blocks;
    if (plan.k_blocks > 0 && tile.expert != acquired_expert) {
      acquire_map(p.a_maps + tile.expert);
      acquire_map(p.b_maps + tile.expert);
      acquired_expert = tile.expert;
    }
  }
  return plan;
}

/// The CTA's scheduler: m-grouped tiles of 128 rows, or of 256 for a cluster pair (kPair = 2), whose CTAs
/// take 128 rows each.
template <class Scheduler, int kPair>
__device__ __forceinline__ Scheduler make_scheduler(typename Scheduler::Storage& storage, const KernelParams& p) {
  if constexpr (kPair == 1) return Scheduler(storage, p);
  else return Scheduler(storage, p.offsets, p.num_experts, p.m, p.n_tiles, 128 * kPair);
}

/// Both CTAs of a cluster pair at this point (all threads): the peer's barriers are initialised before any
/// multicast or remote arrival reaches them, and neither CTA exits while the peer may still signal it.
template <int kPair>
__device__ __forceinline__ void pair_sync() {
  if constexpr (kPair > 1) {
    cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
    cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
  }
}

/// kPair = 2 (m-grouped scheduler, linear epilogue): launched in clusters of two CTAs that share each B
/// tile by TMA multicast (Mainloop); a tile of the scheduler is then 256 rows, rows 128 * rank on being
/// the CTA's own. Such launches take neither half tiles nor the dynamic order.
template <class Shape, class Scheduler, class Epilogue, int kPair = 1>
__global__ void __launch_bounds__(kKernelThreads, 1) grouped_gemm_kernel(const __grid_constant__ KernelParams p) {
  static_assert(kPair == 1 || Scheduler::kUniformK, "cluster pairs are m-grouped");
  using Layout = SharedLayout<Shape, Scheduler, Epilogue>;
  extern __shared__ uint8_t smem_raw[];
  // Aligned by pointer arithmetic on the shared array (not through an integer), so that the compiler still
  // knows every pointer derived from it is shared and emits LDS/STS rather than generic loads and stores.
  // In the kernel body: through an inline function taking the array as a pointer, the kernels compile to
  // different (longer) SASS.
  const uint32_t misalign = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023u;
  uint8_t* smem = smem_raw + ((1024u - misalign) & 1023u);
  Mainloop<Shape, kPair> mainloop{smem + Layout::kAOffset, smem + Layout::kBOffset,
                                  reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset),
                                  reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset) + Shape::kStages};
  const int rank = kPair > 1 ? static_cast<int>(cuda::ptx::get_sreg_cluster_ctarank()) : 0;
  mainloop.rank = static_cast<uint32_t>(rank);
  // The CTA's rows of a scheduler tile.
  auto own_rows = [rank](WorkTile tile) {
    tile.row0 += 128 * rank;
    tile.m_index = kPair * tile.m_index + rank;
    return tile;
  };
  constexpr bool kSavedTile = saved_tile_cols<Epilogue>() > 0;
  constexpr int kSavedPasses = saved_passes<Epilogue, Shape::kBN>();
  uint64_t* saved_full = reinterpret_cast<uint64_t*>(smem + Layout::kBarrierOffset) + 2 * Shape::kStages;
  uint64_t* saved_empty = saved_full + 1;
  const TileOrder order(p, smem + Layout::kOrderOffset, kPair);
  if (threadIdx.x == 0) {
    mainloop.init_barriers(2);  // both consumer warpgroups read every stage
    order.init_barriers();
    cuda::ptx::mbarrier_init(saved_full, 1);
    cuda::ptx::mbarrier_init(saved_empty, 2);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
    prefetch_maps(p, Scheduler::kUniformK, p.d.ptr != nullptr, p.c.ptr != nullptr);
  }
  // Builds the tile table; its __syncthreads also publishes the barrier initialisation.
  const Scheduler sched =
      make_scheduler<Scheduler, kPair>(*reinterpret_cast<typename Scheduler::Storage*>(smem + Layout::kSchedulerOffset), p);
  pair_sync<kPair>();
  const int total = sched.total_tiles();
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      PipeState ps;
      uint32_t saved_phase = 0;
      int acquired_expert = -1;
      int pending_row0 = -1, pending_n_tile = 0;  // a tile whose second saved-tile pass is still to load
      // Waits until the consumers have released the staging area, then loads saved-tile pass `pass` of the
      // tile (rows from row0, n-tile n_tile) into it: 64 rows of each warpgroup, kSavedTileCols columns.
      auto load_saved = [&](int row0, int n_tile, int pass) {
        if constexpr (kSavedTile) {
          mbar_wait(saved_empty, saved_phase ^ 1);
          cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                               saved_full, 2 * Layout::kStagingBytes);
          const ColumnMap saved =
              Epilogue::saved_columns(p, n_tile * Shape::kBN + pass * saved_pass_cols<Epilogue>());
#pragma unroll
          for (int w = 0; w < 2; ++w) {
#pragma unroll
            for (int seg = 0; seg < saved_tile_cols<Epilogue>() / 64; ++seg) {
              const int32_t coord[2] = {saved.base[seg], row0 + 64 * w};
              cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global,
                                              smem + Layout::kStagingOffset + w * Layout::kStagingBytes + seg * 8192,
                                              &p.tma_c, coord, saved_full);
            }
          }
          saved_phase ^= 1;
        }
      };
      for (int i = 0, t = order.first;; ++i) {
        if (order.dynamic()) order.publish(i, t);
        if (t >= total) break;
        const int next = order.claim_after(t);
        const WorkTile tile = own_rows(sched.tile(t));
        const LoadPlan plan =
            load_plan<Shape, Scheduler, Epilogue, kPair == 1 && half_tiles_allowed<Epilogue>()>(p, tile, acquired_expert);
        bool loaded = false;
        if constexpr (kSavedTile) {
          if (p.saved_tile) {
            // A saved-tile pass goes into the staging area, which the consumers release once they are done
            // with the previous pass. The tile's first pass is issued halfway through its k-blocks: the
            // consumers are past the previous tile's epilogue once the ring has taken kStages of this
            // tile's k-blocks, and at the tile's start its 64 KiB would queue in front of the k-blocks that
            // refill the ring. A second pass (of the previous tile) is issued as soon as the consumers have
            // stored the first, after the ring has been refilled for this tile.
            const int first = min(max(Shape::kStages, plan.k_blocks / 2), plan.k_blocks);
            int done = 0;
            if (kSavedPasses > 1 && pending_row0 >= 0) {
              done = min(Shape::kStages, first);
              mainloop.load_tile(ps, plan, 0, done);
              load_saved(pending_row0, pending_n_tile, 1);
            }
            mainloop.load_tile(ps, plan, done, first);
            load_saved(tile.row0, tile.n_tile, 0);
            mainloop.load_tile(ps, plan, first, plan.k_blocks);
            pending_row0 = -1;
            if (kSavedPasses > 1 && saved_pass_exists<Epilogue, Shape::kBN>(p, tile.n_tile, 1)) {
              pending_row0 = tile.row0;
              pending_n_tile = tile.n_tile;
            }
            loaded = true;
          }
        }
        if (!loaded) mainloop.load_tile(ps, plan, 0, plan.k_blocks);
        t = next;
      }
      if (kSavedPasses > 1 && pending_row0 >= 0) load_saved(pending_row0, pending_n_tile, 1);
    }
  } else {
    setmaxnreg_inc<232>();
    const int cw = wg - 1;
    constexpr int kBN = Shape::kBN;
    const Staging<kBN> staging{smem + Layout::kStagingOffset + cw * Layout::kStagingBytes,
                               static_cast<int>(threadIdx.x % 128), static_cast<uint32_t>(1 + cw),
                               reinterpret_cast<float*>(smem + Layout::kScratchOffset + cw * Layout::kScratchBytes)};
    PipeState ps;
    uint32_t saved_phase = 0;
    for (int i = 0;; ++i) {
      const int t = order.take(i);
      if (t >= total) break;
      const WorkTile tile = own_rows(sched.tile(t));
      const bool half = kPair == 1 && half_tiles_allowed<Epilogue>() && p.half_tiles && tile.row_end - tile.row0 <= 64;
      float acc[kBN / 2];
      if (half) {
        // The first kBN/4 accumulators of the same registers hold the warpgroup's 64 x kBN/2 slice.
        float (&acc_half)[kBN / 4] = *reinterpret_cast<float(*)[kBN / 4]>(&acc[0]);
        mainloop.template mma_tile<kBN / 2, Scheduler::kUniformK>(p, ps, tile.k_blocks, 0, cw * kBN * 64, acc_half);
        if (!Scheduler::kUniformK && tile.k_blocks == 0) zero_registers(acc_half);
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, kBN, true);
        const int d_col0 = tile.n_tile * (kBN / 2);  // GLU output columns of the tile
        const Staging<kBN / 2> half_staging{staging.buf, staging.tid, staging.barrier_id, staging.scratch};
        Epilogue::template apply<kBN / 2>(acc_half, p, tile, half_columns(cols, cw, kBN / 128),
                                          d_col0 + cw * (kBN / 4), tile.row0, half_staging);
      } else {
        mainloop.template mma_tile<kBN, Scheduler::kUniformK>(p, ps, tile.k_blocks, cw * 8192, 0, acc);
        if (!Scheduler::kUniformK && tile.k_blocks == 0) zero_registers(acc);
        // Column maps are derived after the mainloop so that nothing but the accumulators lives across it.
        const ColumnMap cols = Epilogue::b_columns(p, tile.n_tile, kBN, false);
        const int64_t row0 = static_cast<int64_t>(tile.row0) + 64 * cw;
        bool saved_done = false;
        if constexpr (kSavedTile) {
          // Saved tiles are waited for and released here only: their epilogues run without half tiles
          // (kHalfTiles = false).
          if (p.saved_tile) {
#pragma unroll 1
            for (int pass = 0; pass < kSavedPasses && saved_pass_exists<Epilogue, kBN>(p, tile.n_tile, pass);
                 ++pass) {
              mbar_wait(saved_full, saved_phase);
              Epilogue::template apply_saved<kBN>(acc, p, tile, pass, row0, staging);
              staging.release(saved_empty);
              saved_phase ^= 1;
              shift_registers<saved_pass_cols<Epilogue>() / 2>(acc);
            }
            saved_done = true;
          }
        }
        if (!saved_done) Epilogue::template apply<kBN>(acc, p, tile, cols, tile.n_tile * (kBN / 2), row0, staging);
      }
    }
    staging.drain();
  }
  pair_sync<kPair>();
}

}  // namespace moegemm::sm90
