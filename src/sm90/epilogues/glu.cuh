// Gated-linear-unit epilogue (docs/ops.md §2): C = alpha*acc + bias (2I columns), D = prob * act(gate, up).
//
// The producer loads, for each tile, B rows of the gate and the up columns that pair up, so every thread
// holds a gate value and its up partner in its own registers (same row, same fragment column):
//  - halves: the tile's first BN/2 columns are gate [n0, n0+BN/2), the last BN/2 the matching up columns;
//  - interleaved32 (gate even) / interleaved32_up_first (up even): BN contiguous columns, blocks of 32.
#pragma once

#include "sm90/epilogues/common.cuh"

namespace moegemm::sm90 {

// Fast-math forms (ex2 and rcp on the SFU, a few ulp): IEEE division and tanhf expand to multi-instruction
// sequences with slow paths that made up much of the epilogue; bf16 outputs keep 8 bits of mantissa.
// e^x is ex2 with flush-to-zero: __expf's ex2 without .ftz adds a range check and two rescaling multiplies
// per call for results below 2^-126, which only ever meet 1 + e^x here.
__device__ __forceinline__ float sigmoid_fast(float x) {
  return __fdividef(1.f, 1.f + exp2_approx_ftz(-1.4426950408889634f * x));
}
/// tanh(x) = 1 - 2 / (e^2x + 1): saturates to +-1 through e^2x = inf or 0; absolute error ~1e-7 near 0.
__device__ __forceinline__ float tanh_fast(float x) {
  return 1.f - __fdividef(2.f, exp2_approx_ftz(2.8853900817779268f * x) + 1.f);
}

/// act(gate, up) without prob; formulas of docs/ops.md §2.
template <ActKind kAct>
__device__ __forceinline__ float glu_activation(const KernelParams& p, float gate, float up) {
  if constexpr (kAct == ActKind::swiglu) {
    return gate * sigmoid_fast(gate) * up;
  } else if constexpr (kAct == ActKind::geglu) {
    const float inner = 0.7978845608028654f * (gate + 0.044715f * gate * gate * gate);
    return 0.5f * gate * (1.f + tanh_fast(inner)) * up;
  } else {
    const float g = min_nan(gate, p.limit);
    const float u = clamp_keep_nan(up, -p.limit, p.limit);
    // g * s first, as the reference: (u + offset) * g can overflow to inf where s is 0 (NaN for h = 0).
    return (u + p.linear_offset) * (g * sigmoid_fast(p.act_alpha * g));
  }
}

/// The activation and the gate/up pairing are template parameters: a kernel holds the code of one variant
/// only (with run-time switches the unrolled epilogue of every variant shared one kernel, and its
/// instruction fetches, not its arithmetic, set the epilogue's time).
template <ActKind kAct, PairKind kPair>
struct GluEpilogue {
  /// Pre-activation columns of B sub-box j of n-tile `n_tile` (also C's column map). With halves, a full
  /// tile loads [gate..., up...]; a half tile loads [gate 64, up 64, gate 64, up 64] so that each
  /// warpgroup's half holds gate columns and their up partners.
  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    ColumnMap m;
    const int inter = p.n / 2;
    if constexpr (kPair == PairKind::halves) {
      const int half_boxes = bn / 128;
      const int n0 = n_tile * (bn / 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool up = half ? (j & 1) : j >= half_boxes;
        const int gate_box = half ? (j >> 1) : (up ? j - half_boxes : j);
        m.base[j] = (up ? inter : 0) + n0 + 64 * gate_box;
        m.limit[j] = up ? p.n : inter;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        m.base[j] = n_tile * bn + 64 * j;
        m.limit[j] = p.n;
      }
    }
    return m;
  }

  /// Gate chunk i (8 columns) -> its up partner chunk and its first D column; constexpr per pairing so
  /// that the accumulator array is only ever indexed with compile-time constants.
  template <int kBN>
  __device__ static constexpr bool is_gate_chunk(int i) {
    if constexpr (kPair == PairKind::halves) return i < kBN / 16;
    else if constexpr (kPair == PairKind::interleaved32) return ((i >> 2) & 1) == 0;
    else return ((i >> 2) & 1) == 1;
  }
  template <int kBN>
  __device__ static constexpr int partner_chunk(int i) {
    if constexpr (kPair == PairKind::halves) return i + kBN / 16;
    else if constexpr (kPair == PairKind::interleaved32) return i + 4;
    else return i - 4;
  }
  template <int kBN>
  __device__ static constexpr int d_column(int i) {
    if constexpr (kPair == PairKind::halves) return 8 * i;
    else return 32 * (i >> 3) + 8 * (i & 3);
  }

  /// Stages D = prob * act(gate, up) of every gate chunk at its D column.
  template <int kBN, int kRegs>
  __device__ static void stage_d(const float (&acc)[kRegs], const KernelParams& p, float2 pr,
                                 const Staging<kBN>& st) {
    const int ra = st.row_a();
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) {
      if (!is_gate_chunk<kBN>(i)) continue;
      const int u = partner_chunk<kBN>(i);
      const int dcol = d_column<kBN>(i) + 2 * st.quad();
      const float d0 = glu_activation<kAct>(p, acc[4 * i + 0], acc[4 * u + 0]) * pr.x;
      const float d1 = glu_activation<kAct>(p, acc[4 * i + 1], acc[4 * u + 1]) * pr.x;
      const float d2 = glu_activation<kAct>(p, acc[4 * i + 2], acc[4 * u + 2]) * pr.y;
      const float d3 = glu_activation<kAct>(p, acc[4 * i + 3], acc[4 * u + 3]) * pr.y;
      st.write_pair(ra, dcol, p.d.type, d0, d1);
      st.write_pair(ra + 8, dcol, p.d.type, d2, d3);
    }
  }

  /// stage_d for 16-bit D: gate chunks come in even-aligned runs whose partners and D columns are
  /// consecutive too, so chunks i and i + 1 go out in one stmatrix.
  template <OutType kType, int kBN, int kRegs>
  __device__ static void stage_d_16bit(const float (&acc)[kRegs], const KernelParams& p, float2 pr,
                                       const Staging<kBN>& st) {
    const auto a = st.chunk_addresses();
#pragma unroll
    for (int i = 0; i < kBN / 8; i += 2) {
      if (!is_gate_chunk<kBN>(i)) continue;
      static_assert(kBN % 32 == 0, "gate runs are even-aligned");
      const int u = partner_chunk<kBN>(i);
      uint32_t packed[4];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float prob = h ? pr.y : pr.x;
          const float d0 = glu_activation<kAct>(p, acc[4 * (i + c) + 2 * h], acc[4 * (u + c) + 2 * h]) * prob;
          const float d1 = glu_activation<kAct>(p, acc[4 * (i + c) + 2 * h + 1], acc[4 * (u + c) + 2 * h + 1]) * prob;
          packed[2 * c + h] = Staging<kBN>::template pack<kType>(d0, d1);
        }
      }
      Staging<kBN>::put_chunks(a, d_column<kBN>(i) / 8, packed[0], packed[1], packed[2], packed[3]);
    }
  }

  /// swiglu_clamped with a 16-bit C: a pre-activation whose rounding would cross a clamp bound (gate: limit;
  /// up: +-limit) becomes the 16-bit value next to that rounding on its own side (the launcher's
  /// clamp_crossing interval, empty for f32 C), so that C keeps every clamp decision of the forward and the
  /// dGLU of C cuts off the same gradients (docs/ops.md §2). D is computed from the same values.
  template <int kBN, int kRegs>
  __device__ static void keep_clamp_sides(float (&acc)[kRegs], const KernelParams& p) {
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float& x = acc[4 * i + r];
        if (is_gate_chunk<kBN>(i)) {
          if (x >= p.crossing_lo && x <= p.crossing_hi) x = p.crossing_to;
        } else {
          const float mag = fabsf(x);
          if (mag >= p.crossing_lo && mag <= p.crossing_hi) x = copysignf(p.crossing_to, x);
        }
      }
    }
  }

  /// `acc` is this warpgroup's 64 x kBN slice of pre-activation columns `cmap` (gate/up pairs inside it);
  /// its D columns start at `d_col0`; rows [row0, row0 + 64).
  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int d_col0, int64_t row0, const Staging<kBN>& st) {
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    apply_alpha_bias<kBN>(acc, p, tile.expert, cmap, st.quad());
    if constexpr (kAct == ActKind::swiglu_clamped) {
      if (p.c.ptr) keep_clamp_sides<kBN>(acc, p);
    }
    // C's gate segments end at I: a TMA store may only be used where no segment crosses that limit.
    if (p.c.ptr) st.store_tile(acc, p.c, &p.tma_c, cmap, row0, rows_valid, rows_valid == 64 && segments_fit(cmap, p.n));

    const float2 pr = row_probs(p, row0 + st.row_a(), tile.row_end);
    st.acquire();
    if (p.d.type == OutType::bf16) stage_d_16bit<OutType::bf16>(acc, p, pr, st);
    else if (p.d.type == OutType::f16) stage_d_16bit<OutType::f16>(acc, p, pr, st);
    else stage_d<kBN>(acc, p, pr, st);
    ColumnMap dmap;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      dmap.base[j] = d_col0 + 64 * j;
      dmap.limit[j] = p.n / 2;
    }
    st.store(p.d, &p.tma_d, dmap, 0, kBN / 2, row0, rows_valid, rows_valid == 64);
  }
};

}  // namespace moegemm::sm90
