// Squared-ReLU forward epilogue (docs/ops.md §4): C = alpha*acc + bias, D = prob * relu(C)^2.
#pragma once

#include "sm90/epilogues/linear.cuh"

namespace moegemm::sm90 {

struct SreluEpilogue {
  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    return LinearEpilogue::b_columns(p, n_tile, bn, half);
  }

  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    const bool use_tma = rows_valid == 64;
    apply_alpha_bias<kBN>(acc, p, tile.expert, cmap, st.quad());
    if (p.c.ptr) st.store_tile(acc, p.c, &p.tma_c, cmap, row0, rows_valid, use_tma);
    const float2 pr = row_probs(p, row0 + st.row_a(), tile.row_end);
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float s = relu(acc[4 * i + x]);
        acc[4 * i + x] = (x < 2 ? pr.x : pr.y) * s * s;
      }
    }
    st.store_tile(acc, p.d, &p.tma_d, cmap, row0, rows_valid, use_tma);
  }
};

}  // namespace moegemm::sm90
