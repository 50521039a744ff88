// Linear epilogue (docs/ops.md §1): C = alpha*acc + bias, D = prob * C.
#pragma once

#include "sm90/epilogues/common.cuh"

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

  /// `acc` is this warpgroup's 64 x kBN slice; `cmap` its columns; rows [row0, row0 + 64).
  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, int expert, const ColumnMap& cmap,
                               int /*d_col0*/, int64_t row0, int row_end, const Staging<kBN>& st) {
    const int rows_valid = rows_in_warpgroup(row0, row_end);
    const bool use_tma = rows_valid == 64;  // columns are clipped by the tensor width alone
    apply_alpha_bias<kBN>(acc, p, expert, cmap, st.quad());
    if (p.c.ptr) st.store_tile(acc, p.c, &p.tma_c, cmap, row0, rows_valid, use_tma);
    if (p.prob) {
      const float2 pr = row_probs(p, row0 + st.row_a(), row_end);
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        acc[4 * i + 0] *= pr.x;
        acc[4 * i + 1] *= pr.x;
        acc[4 * i + 2] *= pr.y;
        acc[4 * i + 3] *= pr.y;
      }
    }
    st.store_tile(acc, p.d, &p.tma_d, cmap, row0, rows_valid, use_tma);
  }
};

}  // namespace moegemm::sm90
