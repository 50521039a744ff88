// The TMA + wgmma mainloop: one producer thread fills a ring of shared-memory stages (A 128x64 and B
// BNx64 tiles, 128B swizzle) guarded by full/empty mbarriers; two consumer warpgroups each multiply
// 64 rows of A by the whole B tile with wgmma (bf16 in, f32 accumulate).
#pragma once

#include <cuda/ptx>

#include <cstdint>
#include <type_traits>

#include "sm90/params.cuh"
#include "sm90/ptx.cuh"

namespace moegemm::sm90 {

enum class Major : uint8_t { k, mn };  // operand storage: K contiguous, or M/N contiguous

/// A (BM x BK) and B (BN x BK) tiles of one stage. A K-major: one 128x64 box (rows x k); A M-major (the
/// weight gradient's X^T): two 64x64 boxes (k rows of 64 M-columns). B K-major ((E,N,K) storage) or
/// N-major ((E,K,N) storage): BN/64 boxes of 64x64.
template <int kBN_, Major kBMajor_, Major kAMajor_ = Major::k, int kStages_ = (kBN_ == 256 ? 3 : 5)>
struct TileShape {
  static constexpr int kBM = 128;  // two consumer warpgroups x 64 rows
  static constexpr int kBN = kBN_;
  static constexpr int kBK = 64;   // 128 bytes of bf16: one swizzle atom row
  static constexpr Major kBMajor = kBMajor_;
  static constexpr Major kAMajor = kAMajor_;
  static constexpr int kSubBoxes = kBN / 64;  // B is loaded as 64x64 boxes (8 KiB each)
  static constexpr int kABytes = kBM * kBK * 2;
  static constexpr int kBBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Stages that fit next to the epilogue staging (2 x 64 rows) and the scheduler table in 227 KiB (fewer
  // where an epilogue's staging area is wider, see SharedLayout).
  static constexpr int kStages = kStages_;
};

/// What the producer loads for one tile.
struct LoadPlan {
  const void* a_map;  // K-major: 2-D {K, M}; M-major: 3-D {M, K, 1}
  int a_row;          // first A row (M coordinate) of the tile
  const void* b_map;  // 3-D {K, N, E} (K-major) or {N, K, E} (N-major)
  int b_expert;       // expert coordinate in b_map (0 for per-expert maps)
  int b_col[4];       // B column (N coordinate) of each 64-column sub-box
  int k_blocks;       // 64-wide k-blocks of the tile (0: the accumulators are zero)
};

/// Position in the stage ring: stage index and the parity of its current phase.
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  template <int kStages>
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  /// Moves past n positions of the ring (the k-blocks of a tile another warpgroup consumes).
  template <int kStages>
  __device__ void skip(int n) {
    const int to = stage + n;
    phase ^= static_cast<uint32_t>(to / kStages) & 1u;
    stage = to % kStages;
  }
};

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

/// Arrives on the mbarrier at the same shared-memory offset as `bar` in CTA `rank` of the cluster (mapa:
/// cuda::ptx has no wrapper). Release at CTA scope, the instruction's default: with .release.cluster (what
/// cuda::ptx's remote arrive emits) every k-block waited on the fence, and the pair kernel ran 30% (128 x 256
/// tiles) to 60% (128 x 128) slower than the single-CTA one; the peer's wgmma reads of the stage have
/// retired (wgmma.wait_group) before the arrival either way.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

/// kPair = 2: the CTA is one of a cluster pair that computes two m-tiles of one expert and n-tile (rows
/// 128 * rank on), so both read the same B tile. Each CTA's producer loads half of B's sub-boxes and
/// multicasts them into both CTAs' stages; a stage is refilled once the consumers of both CTAs have
/// released it (the empty barriers take the peer's arrivals too).
template <class Shape, int kPair = 1>
struct Mainloop {
  static_assert(kPair == 1 || kPair == 2, "single CTAs or cluster pairs");
  uint8_t* a;  // [kStages][kABytes], each 1024-byte aligned
  uint8_t* b;  // [kStages][kBBytes]
  uint64_t* full;
  uint64_t* empty;
  uint32_t rank = 0;  // the CTA's rank in its pair

  /// One thread initialises the ring's barriers: full takes the producer's arrive.expect_tx, empty one
  /// arrival from each of `consumers` warpgroups that read the stage, in each CTA of the pair.
  __device__ void init_barriers(uint32_t consumers) const {
    for (int s = 0; s < Shape::kStages; ++s) {
      cuda::ptx::mbarrier_init(&full[s], 1);
      cuda::ptx::mbarrier_init(&empty[s], consumers * kPair);
    }
  }

  /// Consumer warpgroup: releases a stage to the producer(s) that refill it.
  __device__ void release_stage(int stage) const {
    cuda::ptx::mbarrier_arrive(&empty[stage]);
    if constexpr (kPair == 2) mbar_arrive_cluster(&empty[stage], rank ^ 1);
  }

  /// Producer: loads k-blocks [kb_begin, kb_end) of one tile. K coordinates start at 0 in every map:
  /// ragged-K operands use per-expert maps whose K extent ends at the expert's last row, so TMA zero-fills
  /// past it.
  __device__ void load_tile(PipeState& ps, const LoadPlan& plan, int kb_begin, int kb_end) {
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      mbar_wait(&empty[ps.stage], ps.phase ^ 1);
      cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                           &full[ps.stage], Shape::kStageBytes);
      const int k0 = kb * Shape::kBK;
      uint8_t* a_stage = a + ps.stage * Shape::kABytes;
      if constexpr (Shape::kAMajor == Major::k) {
        const int32_t a_coord[2] = {k0, plan.a_row};
        cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, a_stage, plan.a_map,
                                        a_coord, &full[ps.stage]);
      } else {
#pragma unroll
        for (int j = 0; j < Shape::kBM / 64; ++j) {
          const int32_t a_coord[3] = {plan.a_row + 64 * j, k0, 0};
          cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, a_stage + j * 8192,
                                          plan.a_map, a_coord, &full[ps.stage]);
        }
      }
      uint8_t* b_stage = b + ps.stage * Shape::kBBytes;
      constexpr int kOwnBoxes = Shape::kSubBoxes / kPair;
#pragma unroll
      for (int i = 0; i < kOwnBoxes; ++i) {
        // The CTA's own sub-boxes: the first half for rank 0, the second for rank 1 (selected rather than
        // indexed by the rank, which would put the plan in local memory).
        const int j = (kPair == 2 && rank) ? kOwnBoxes + i : i;
        const int col = (kPair == 2 && rank) ? plan.b_col[kOwnBoxes + i] : plan.b_col[i];
        int32_t b_coord[3];
        if constexpr (Shape::kBMajor == Major::k) {
          b_coord[0] = k0; b_coord[1] = col; b_coord[2] = plan.b_expert;
        } else {
          b_coord[0] = col; b_coord[1] = k0; b_coord[2] = plan.b_expert;
        }
        if constexpr (kPair == 2) {
          cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, b_stage + j * 8192,
                                          plan.b_map, b_coord, &full[ps.stage], static_cast<uint16_t>(0b11));
        } else {
          cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, b_stage + j * 8192,
                                          plan.b_map, b_coord, &full[ps.stage]);
        }
      }
      ps.advance<Shape::kStages>();
    }
  }

  /// One k-block of one m64 x kN accumulator: A (64 rows at a_stage) x B (kN columns at b_stage), four k16
  /// steps; `accumulate` = false starts the accumulator from zero.
  template <int kN>
  __device__ static void mma_k_block(const uint8_t* a_stage, const uint8_t* b_stage, bool accumulate,
                                     float (&acc)[kN / 2]) {
#pragma unroll
    for (int kk = 0; kk < Shape::kBK / 16; ++kk) {
      // K-major: +32 B per k16 (SBO 1024 between 8-row groups). MN-major: +2048 B per k16 (16 rows of
      // 128 B), LBO 8192 between 64-column boxes (hopper-verified-facts §1-2).
      uint64_t da;
      if constexpr (Shape::kAMajor == Major::k) {
        da = make_smem_desc(a_stage + kk * 32, 16, 1024);
      } else {
        da = make_smem_desc(a_stage + kk * 2048, 8192, 1024);
      }
      uint64_t db;
      if constexpr (Shape::kBMajor == Major::k) {
        db = make_smem_desc(b_stage + kk * 32, 16, 1024);
      } else {
        db = make_smem_desc(b_stage + kk * 2048, 8192, 1024);
      }
      const int scale_d = (accumulate || kk > 0) ? 1 : 0;
      wgmma_m64k16<kN, Shape::kAMajor == Major::k ? 0 : 1, Shape::kBMajor == Major::k ? 0 : 1>(acc, da, db, scale_d);
    }
  }

  /// Consumer warpgroup: each accumulator (64 x kN) = A[64 rows] x B[kN columns at b_offset] over all
  /// k-blocks of one tile, the i-th accumulator's rows at a_offset + 64 i (8192 bytes per 64 rows in both A
  /// layouts). A full tile of the cooperative kernel gives each warpgroup one accumulator, its own 64 rows
  /// and all BN columns (a_offset = 64 rows x wg, b_offset = 0, kN = BN); a half tile (an expert's last
  /// <= 64 rows) gives both warpgroups the same rows and half of the columns each (a_offset = 0,
  /// b_offset = BN/2 columns x wg). A ping-pong warpgroup takes all 128 rows as two accumulators that share
  /// each B k16 step.
  /// Keeps one wgmma batch in flight and releases each stage as soon as its batch has retired (one arrival
  /// per warpgroup). With no k-blocks the accumulators are left as they were (the caller zeroes them).
  /// kUniformK: every tile runs p.k_blocks, read from the kernel parameters where needed rather than held
  /// in a register (which the 64x256 tile cannot spare); else the tile's own `tile_k_blocks`.
  template <int kN, bool kUniformK, class... Acc>
  __device__ void mma_tile(const KernelParams& p, PipeState& ps, int tile_k_blocks, int a_offset, int b_offset,
                           Acc&... acc) {
    static_assert(sizeof...(Acc) >= 1 && (std::is_same_v<Acc, float[kN / 2]> && ...), "m64 x kN f32 accumulators");
    const bool releaser = (threadIdx.x % 128) == 0;
    int prev_stage = -1;
    for (int kb = 0; kb < (kUniformK ? p.k_blocks : tile_k_blocks); ++kb) {
      mbar_wait(&full[ps.stage], ps.phase);
      const uint8_t* a_stage = a + ps.stage * Shape::kABytes + a_offset;
      const uint8_t* b_stage = b + ps.stage * Shape::kBBytes + b_offset;
      wgmma_fence();
      (fence_registers(acc), ...);
      int rows = 0;
      ((mma_k_block<kN>(a_stage + rows, b_stage, kb > 0, acc), rows += 8192), ...);
      wgmma_commit();
      (fence_registers(acc), ...);
      wgmma_wait<1>();
      if (prev_stage >= 0 && releaser) release_stage(prev_stage);
      prev_stage = ps.stage;
      ps.advance<Shape::kStages>();
    }
    wgmma_wait<0>();
    (fence_registers(acc), ...);
    if (prev_stage >= 0 && releaser) release_stage(prev_stage);
  }
};

}  // namespace moegemm::sm90
