// Linear epilogue (docs/ops.md §1): C = alpha*acc + bias, D = prob * C; with an amax output (gemm_amax,
// §6) also max |C| over the addressed elements.
#pragma once

#include "sm90/epilogues/reduce.cuh"

namespace moegemm::sm90 {

struct LinearEpilogue {
  /// Output columns of B sub-box j (64 wide) of n-tile `n_tile`: contiguous (also in half tiles).
  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool /*half*/) {
    ColumnMap m;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      m.base[j] = n_tile * bn + 64 * j;
      m.limit[j] = p.n;
    }
    return m;
  }

  /// `acc` is this warpgroup's 64 x kBN slice; `cmap` its columns; rows [row0, row0 + 64), of which it writes
  /// those in [tile.row_first, tile.row_end).
  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    // Rows of the expert before this one in an aligned first tile (M-major A) are computed, not written.
    const int rows_first = rows_in_warpgroup(row0, tile.row_first);
    const bool use_tma = rows_valid == 64 && rows_first == 0;  // columns are clipped by the tensor width alone
    apply_alpha_bias<kBN>(acc, p, tile.expert, cmap, st.quad());
    if (p.c.ptr) st.store_tile(acc, p.c, &p.tma_c, cmap, row0, rows_valid, use_tma, rows_first);
    if (p.red.amax) {
      const int ra = st.row_a(), q = st.quad();
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        const bool col_ok = cmap.base[i / 8] + (8 * i) % 64 + 2 * q < cmap.limit[i / 8];
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int r = ra + 8 * (x >> 1);
          if (col_ok && r >= rows_first && r < rows_valid) m = abs_max(m, acc[4 * i + x]);
        }
      }
      warp_amax(p.red.amax, m);
    }
    if (p.prob) {
      const float2 pr = row_probs(p, row0 + st.row_a(), tile.row_end);
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        acc[4 * i + 0] *= pr.x;
        acc[4 * i + 1] *= pr.x;
        acc[4 * i + 2] *= pr.y;
        acc[4 * i + 3] *= pr.y;
      }
    }
    st.store_tile(acc, p.d, &p.tma_d, cmap, row0, rows_valid, use_tma, rows_first);
  }
};

}  // namespace moegemm::sm90
