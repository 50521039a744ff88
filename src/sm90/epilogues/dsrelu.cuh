// Backward of the squared ReLU (docs/ops.md §4), fused into the dgrad GEMM's epilogue. The GEMM gives dH;
// with c the saved pre-activation: dC = 2 relu(c) alpha dH prob, dprob[r] = sum_n relu(c)^2 alpha dH,
// dbias = per-expert column sums of dC, amax = max |dC|.
#pragma once

#include "sm90/epilogues/linear.cuh"
#include "sm90/epilogues/reduce.cuh"

namespace moegemm::sm90 {

struct DsreluEpilogue {
  static constexpr int kScratchBytes = ColumnSums<256>::kBytes;  // dbias column sums of the widest tile
  static constexpr bool kHalfTiles = false;  // row sums per warpgroup need whole tiles

  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    return LinearEpilogue::b_columns(p, n_tile, bn, half);
  }

  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    const float alpha = p.alpha ? __ldg(p.alpha + tile.expert) : p.alpha_scalar;
    const int ra = st.row_a(), q = st.quad();
    const float2 pr = row_probs(p, row0 + ra, tile.row_end);
    float row_sum[2] = {0.f, 0.f};
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) {
      const int col = cmap.base[i / 8] + (8 * i) % 64 + 2 * q;
      const bool col_ok = col < cmap.limit[i / 8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool ok = col_ok && ra + 8 * h < rows_valid;
        const float2 c = ok ? load_pair(p.preact, row0 + ra + 8 * h, col) : make_float2(0.f, 0.f);
        const float prob = h ? pr.y : pr.x;
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const int r = 4 * i + 2 * h + x;
          const float dh = alpha * acc[r];
          const float s = relu(x ? c.y : c.x);
          // 0 where c <= 0 whatever dH is (autodiff of relu(c)^2 in torch and JAX); a NaN c keeps its NaN.
          const float d = ok && s != 0.f ? 2.f * s * dh * prob : 0.f;
          row_sum[h] += ok ? s * s * dh : 0.f;
          acc[r] = d;
          amax = abs_max(amax, d);
        }
      }
    }
    if (p.red.dprob || p.red.dprob_partials) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float total = quad_sum(row_sum[h]);
        if (q == 0 && ra + 8 * h < rows_valid) write_row_sum(p, tile.n_tile, row0 + ra + 8 * h, total);
      }
    }
    if (p.red.amax) warp_amax(p.red.amax, amax);
    if (p.red.dbias_partials) {
      const ColumnSums<kBN> sums{st.scratch, st.tid, st.barrier_id};
      sums.begin();
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        sums.put(8 * i, 0, acc[4 * i] + acc[4 * i + 2]);
        sums.put(8 * i, 1, acc[4 * i + 1] + acc[4 * i + 3]);
      }
      sums.finish(p, tile, row0, p.n, [&](int v) {
        const int col = pick(cmap.base, v >> 6) + (v & 63);
        return col < pick(cmap.limit, v >> 6) ? col : -1;
      });
    }
    st.store_tile(acc, p.d, &p.tma_d, cmap, row0, rows_valid, rows_valid == 64);
  }
};

}  // namespace moegemm::sm90
