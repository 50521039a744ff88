// Tile scheduler over experts (m-grouped): which (expert, m-tile, n-tile) a persistent CTA computes next.
//
// Every CTA derives the same table from the (E,) device offsets at kernel start: clamped expert row
// ranges and the exclusive prefix sum of each expert's tile count. Tiles never write across experts: an
// expert's tiles start at its own first row (or, with a row alignment, at that row rounded down, the rows
// before it masked in the epilogue) and its last tile is bounded by its end. Offsets are clamped,
// end_g = min(M, max(0, offsets[0..g])), which equals the running clamp of each end into
// [previous end, M], so garbage offsets cannot address rows outside [0, M).
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "sm90/params.cuh"

namespace moegemm::sm90 {

/// One output tile as a scheduler hands it out.
struct WorkTile {
  int expert;
  int row0;       // first row of the tile (A's rows it loads)
  int row_first;  // the rows the tile may write: [max(row0, row_first), min(row0 + BM, row_end)); row_first
                  // exceeds row0 only in an expert's first tile under a row alignment (M-major A)
  int row_end;
  int n_tile;
  int k_blocks;  // 64-wide k-blocks to accumulate (0: the tile is zero); -1 for m-grouped tiles, which all
                 // run KernelParams::k_blocks
  int m_index;   // global m-tile number (expert-major): the slot of the tile's per-column partial sums
};

template <int kThreads, int kMaxExperts>
struct ExpertTileScheduler {
  static constexpr int kItems = (kMaxExperts + kThreads - 1) / kThreads;
  static constexpr int kGroupM = 8;  // m-tiles per L2 group: a wave shares B panels and A rows
  static constexpr bool kUniformK = true;  // every tile runs all k-blocks
  using Scan = cub::BlockScan<int, kThreads>;

  struct Storage {
    int row_start[kMaxExperts + 1];   // row_start[g] = end of expert g-1; row_start[E] = end of last expert
    int tile_start[kMaxExperts + 1];  // exclusive prefix sum of tiles; tile_start[E] = total tiles
    typename Scan::TempStorage scan;
  };

  Storage& s;
  int num_experts;
  int n_tiles;
  int block_m;
  int row_mask;  // ~(row alignment - 1): an expert's first tile starts at (first row & row_mask)

  /// Builds the table; every thread of the CTA must call it (it ends with __syncthreads).
  /// offsets == nullptr means one group of M rows (dense ops). `row_align` (a power of two) rounds each
  /// expert's first tile row down to a multiple of it.
  __device__ ExpertTileScheduler(Storage& storage, const int* offsets, int E, int M, int n_tiles_per_expert,
                                 int bm, int row_align = 1)
      : s(storage), num_experts(E), n_tiles(n_tiles_per_expert), block_m(bm), row_mask(-row_align) {
    int ends[kItems];
    const int base = threadIdx.x * kItems;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int g = base + i;
      ends[i] = g < E ? (offsets ? __ldg(offsets + g) : M) : INT32_MIN;
    }
    int prefix_max[kItems];
    Scan(s.scan).ExclusiveScan(ends, prefix_max, 0, cuda::maximum<int>{});
    __syncthreads();
    int tiles[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int start = min(M, prefix_max[i]);
      const int end = min(M, max(prefix_max[i], ends[i]));
      const int g = base + i;
      // (rows - 1) / bm + 1: rows + bm - 1 would wrap for an expert of more than 2^31 - bm rows
      tiles[i] = g < E && end > start ? ((end - (start & row_mask) - 1) / bm + 1) * n_tiles : 0;
      if (g < E) s.row_start[g] = start;
      if (g == E - 1) s.row_start[E] = end;
    }
    int tile_prefix[kItems];
    int total;
    Scan(s.scan).ExclusiveSum(tiles, tile_prefix, total);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int g = base + i;
      if (g < E) s.tile_start[g] = tile_prefix[i];
    }
    if (threadIdx.x == 0) s.tile_start[E] = total;
    __syncthreads();
  }

  /// The kernel's table: tiles of 128 rows over the expert's rows, every one over all K.
  __device__ ExpertTileScheduler(Storage& storage, const KernelParams& p)
      : ExpertTileScheduler(storage, p.offsets, p.num_experts, p.m, p.n_tiles, 128, p.tile_row_align) {}

  __device__ int total_tiles() const { return s.tile_start[num_experts]; }

  /// Tile t (0 <= t < total_tiles()): the expert by binary search over tile_start, then an L2-friendly
  /// order inside the expert: groups of kGroupM m-tiles sweep all n-tiles, m fastest.
  __device__ WorkTile tile(int t) const {
    int lo = 0, hi = num_experts;  // invariant: tile_start[lo] <= t < tile_start[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (s.tile_start[mid] <= t) lo = mid; else hi = mid;
    }
    const int g = lo;
    const int local = t - s.tile_start[g];
    const int row_first = s.row_start[g];
    const int row_begin = row_first & row_mask;  // g has tiles, so it has rows
    const int row_end = s.row_start[g + 1];
    const int m_tiles = (row_end - row_begin - 1) / block_m + 1;
    const int group_span = kGroupM * n_tiles;
    const int group = local / group_span;
    const int m_first = group * kGroupM;
    const int group_m = min(kGroupM, m_tiles - m_first);
    const int within = local - group * group_span;
    WorkTile tl;
    tl.expert = g;
    const int m_local = m_first + within % group_m;
    tl.row0 = row_begin + m_local * block_m;
    tl.row_first = row_first;
    tl.row_end = row_end;
    tl.n_tile = within / group_m;
    tl.k_blocks = -1;  // uniform: every tile runs KernelParams::k_blocks (kUniformK)
    tl.m_index = s.tile_start[g] / n_tiles + m_local;
    return tl;
  }
};

}  // namespace moegemm::sm90
