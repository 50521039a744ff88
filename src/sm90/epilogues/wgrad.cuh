// Weight-gradient epilogue (docs/ops.md §5): the tile of W_g = X_g^T dY_g (rows of W = the GEMM's M) goes
// to expert g's output: dense W viewed as (E * m, n), or the expert's own buffer (w_ptrs). With
// `accumulate` the existing values are added first, and an expert with no rows is left untouched; without
// it such an expert's tiles hold zeros (no k-blocks) and are written like any other.
#pragma once

#include "sm90/epilogues/linear.cuh"

namespace moegemm::sm90 {

/// kWideStagingCols > 0: the kernel's staging area is that many 16-bit columns wide, twice the tile, so an
/// f32 tile is staged and stored in one pass (its TMA store then overlaps the next tile's mainloop rather
/// than holding back a second pass).
template <int kWideStagingCols = 0>
struct WgradEpilogue {
  static constexpr int kStagingCols = kWideStagingCols;

  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    return LinearEpilogue::b_columns(p, n_tile, bn, half);
  }

  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    if (p.accumulate && tile.k_blocks == 0) return;  // both warpgroups skip the same tile
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    OutMatrix out = p.d;
    int64_t out_row0 = static_cast<int64_t>(tile.expert) * p.m + row0;
    bool use_tma = rows_valid == 64 && dense_rows_fit_tma(p);
    if (p.w_ptrs) {
      out.ptr = reinterpret_cast<void*>(__ldg(p.w_ptrs + tile.expert));
      out_row0 = row0;
      use_tma = false;
    }
    if (p.accumulate) {
      const int ra = st.row_a(), q = st.quad();
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        const int col = cmap.base[i / 8] + (8 * i) % 64 + 2 * q;
        if (col >= cmap.limit[i / 8]) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (ra + 8 * h >= rows_valid) continue;
          const float2 w = load_pair(out, out_row0 + ra + 8 * h, col);
          acc[4 * i + 2 * h] += w.x;
          acc[4 * i + 2 * h + 1] += w.y;
        }
      }
    }
    if constexpr (kWideStagingCols > kBN) {
      if (out.type == OutType::f32) {
        const Staging<kWideStagingCols> wide{st.buf, st.tid, st.barrier_id, st.scratch};
        wide.store_tile(acc, out, &p.tma_d, cmap, out_row0, rows_valid, use_tma);
        return;
      }
    }
    st.store_tile(acc, out, &p.tma_d, cmap, out_row0, rows_valid, use_tma);
  }
};

}  // namespace moegemm::sm90
