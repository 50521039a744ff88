// Backward of the gated linear unit (docs/ops.md §3), fused into the dgrad GEMM's epilogue. The GEMM gives
// dH (M, I); per element, with (gate, up) = beta * C at the paired columns and h = act(gate, up):
//   d_gate = alpha dH prob dact/dgate,  d_up = alpha dH prob dact/dup   (written in C's column layout),
//   dprob[r] = sum_i h alpha dH,  dbias = per-expert column sums of dC,  amax = [max|d_gate|, max|d_up|].
// Tiles are 128 dH columns (kBN = 128), i.e. 256 dC columns, staged as 4 "virtual" 64-column segments
// through the staging buffer in passes (the values are recomputed per pass, so only dH stays in registers):
//  - halves: [gate n0..n0+127 | up I+n0..I+n0+127];
//  - interleaved32 / _up_first: the contiguous dC columns 2 n0 .. 2 n0 + 255.
#pragma once

#include "sm90/epilogues/glu.cuh"
#include "sm90/epilogues/linear.cuh"
#include "sm90/epilogues/reduce.cuh"

namespace moegemm::sm90 {

/// h and its partial derivatives; the formulas of docs/ops.md §2-3 (torch.clamp's boundary convention).
struct GluGrad {
  float h, d_gate, d_up;
};

__device__ __forceinline__ GluGrad glu_grad(const KernelParams& p, float gate, float up) {
  GluGrad v;
  switch (p.act) {
    case ActKind::swiglu: {
      const float s = sigmoid_fast(gate);
      v.h = gate * s * up;
      v.d_gate = up * s * (1.f + gate * (1.f - s));
      v.d_up = gate * s;
      break;
    }
    case ActKind::geglu: {
      const float k = 0.7978845608028654f;
      const float t = tanhf(k * (gate + 0.044715f * gate * gate * gate));
      const float gelu = 0.5f * gate * (1.f + t);
      v.h = gelu * up;
      v.d_gate = up * (0.5f * (1.f + t) + 0.5f * gate * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * gate * gate));
      v.d_up = gelu;
      break;
    }
    default: {
      const float g = fminf(gate, p.limit);
      const float u = fminf(fmaxf(up, -p.limit), p.limit);
      const float s = sigmoid_fast(p.act_alpha * g);
      v.h = (u + p.linear_offset) * g * s;
      v.d_gate = gate <= p.limit ? (u + p.linear_offset) * s * (1.f + p.act_alpha * g * (1.f - s)) : 0.f;
      v.d_up = (up >= -p.limit && up <= p.limit) ? g * s : 0.f;
    }
  }
  return v;
}

struct DgluEpilogue {
  static constexpr int kTileN = 128;  // dH columns per tile (the launcher picks BN = 128)
  static constexpr int kScratchBytes = ColumnSums<2 * kTileN>::kBytes;  // dbias column sums
  static constexpr int kBatch = 4;  // chunks whose C loads are in flight together

  /// dH columns of B sub-box j: contiguous, limited by I.
  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    return LinearEpilogue::b_columns(p, n_tile, bn, half);
  }

  /// Virtual staging column of the gate (or up) partner of dH chunk i (8 columns).
  template <int kBN, PairKind kPair>
  __device__ static constexpr int virtual_column(int i, bool up) {
    if constexpr (kPair == PairKind::halves) return (up ? kBN : 0) + 8 * i;
    const int gate_first = 64 * (i / 4) + 8 * (i % 4);
    const bool second = kPair == PairKind::interleaved32 ? up : !up;
    return gate_first + (second ? 32 : 0);
  }

  /// One tile, pass by pass: a pass computes (d_gate, d_up) of the dH chunks whose dC columns it stages
  /// (kPassCols virtual columns: 128 for 16-bit dC, 64 for f32), so only dH lives in registers. Each
  /// element's dprob term and amax are counted in the pass that stages its gate (amax of d_up: its up).
  template <int kBN, PairKind kPair, int kPassCols, int kRegs>
  __device__ static void run(const float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile, int n0,
                             int64_t row0, const Staging<kBN>& st) {
    static_assert(kBN == kTileN, "dGLU tiles are 128 dH columns");
    const int inter = p.n;
    const int rows_valid = rows_in_warpgroup(row0, tile.row_end);
    const float alpha = p.alpha ? __ldg(p.alpha + tile.expert) : p.alpha_scalar;
    const float beta = p.beta ? __ldg(p.beta + tile.expert) : 1.f;
    const int ra = st.row_a(), q = st.quad();
    const float2 pr = row_probs(p, row0 + ra, tile.row_end);
    // dC columns of virtual segment `seg`: halves [gate 2 x 64 | up 2 x 64], interleaved contiguous.
    auto dc_base = [&](int seg) {
      return kPair == PairKind::halves ? (seg >= 2 ? inter : 0) + n0 + 64 * (seg & 1) : 2 * n0 + 64 * seg;
    };
    auto dc_limit = [&](int seg) { return kPair == PairKind::halves && seg < 2 ? inter : 2 * inter; };
    ColumnMap dmap;
#pragma unroll
    for (int seg = 0; seg < 4; ++seg) {
      dmap.base[seg] = dc_base(seg);
      dmap.limit[seg] = dc_limit(seg);
    }
    const bool use_tma = rows_valid == 64 && segments_fit(dmap, 2 * inter);
    const ColumnSums<2 * kBN> sums{st.scratch, st.tid, st.barrier_id};
    if (p.red.dbias_partials) sums.begin();

    float row_sum[2] = {0.f, 0.f};
    float amax_gate = 0.f, amax_up = 0.f;
#pragma unroll
    for (int begin = 0; begin < 2 * kBN; begin += kPassCols) {
      st.acquire();
      // Batches of kBatch chunks: all their C loads are issued before any is used, so a batch costs one
      // memory latency rather than one per load.
#pragma unroll
      for (int i0 = 0; i0 < kBN / 8; i0 += kBatch) {
        float2 g[kBatch][2], u[kBatch][2];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int i = i0 + b;
          const int vg = virtual_column<kBN, kPair>(i, false);
          const int vu = virtual_column<kBN, kPair>(i, true);
          const bool in_pass = (vg >= begin && vg < begin + kPassCols) || (vu >= begin && vu < begin + kPassCols);
          const bool col_ok = n0 + 8 * i + 2 * q < inter;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            g[b][h] = u[b][h] = make_float2(0.f, 0.f);
            if (in_pass && col_ok && ra + 8 * h < rows_valid) {  // segment indices are compile-time
              g[b][h] = load_pair(p.preact, row0 + ra + 8 * h, dmap.base[vg / 64] + vg % 64 + 2 * q);
              u[b][h] = load_pair(p.preact, row0 + ra + 8 * h, dmap.base[vu / 64] + vu % 64 + 2 * q);
            }
          }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int i = i0 + b;
          const int vg = virtual_column<kBN, kPair>(i, false);
          const int vu = virtual_column<kBN, kPair>(i, true);
          const bool stage_gate = vg >= begin && vg < begin + kPassCols;
          const bool stage_up = vu >= begin && vu < begin + kPassCols;
          if (!stage_gate && !stage_up) continue;
          const bool col_ok = n0 + 8 * i + 2 * q < inter;
          float dg[4], du[4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const bool ok = col_ok && ra + 8 * h < rows_valid;
            const float prob = h ? pr.y : pr.x;
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const float dh = alpha * acc[4 * i + 2 * h + x];
              const float2 gh = g[b][h], uh = u[b][h];
              const GluGrad v = glu_grad(p, beta * (x ? gh.y : gh.x), beta * (x ? uh.y : uh.x));
              dg[2 * h + x] = ok ? dh * prob * v.d_gate : 0.f;
              du[2 * h + x] = ok ? dh * prob * v.d_up : 0.f;
              if (stage_gate) row_sum[h] += ok ? v.h * dh : 0.f;
            }
          }
          if (stage_gate) {
            st.write_pair(ra, vg - begin + 2 * q, p.d.type, dg[0], dg[1]);
            st.write_pair(ra + 8, vg - begin + 2 * q, p.d.type, dg[2], dg[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax_gate = fmaxf(amax_gate, fabsf(dg[e]));
            if (p.red.dbias_partials) {
              sums.put(vg, 0, dg[0] + dg[2]);
              sums.put(vg, 1, dg[1] + dg[3]);
            }
          }
          if (stage_up) {
            st.write_pair(ra, vu - begin + 2 * q, p.d.type, du[0], du[1]);
            st.write_pair(ra + 8, vu - begin + 2 * q, p.d.type, du[2], du[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax_up = fmaxf(amax_up, fabsf(du[e]));
            if (p.red.dbias_partials) {
              sums.put(vu, 0, du[0] + du[2]);
              sums.put(vu, 1, du[1] + du[3]);
            }
          }
        }
      }
      st.store(p.d, &p.tma_d, dmap, begin, kPassCols, row0, rows_valid, use_tma);
    }

    if (p.red.dbias_partials) {
      sums.finish(p, tile, 2 * inter, [&](int v) {
        const int col = pick(dmap.base, v >> 6) + (v & 63);
        return col < pick(dmap.limit, v >> 6) ? col : -1;
      });
    }
    if (p.red.dprob || p.red.dprob_partials) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float total = quad_sum(row_sum[h]);
        if (q == 0 && ra + 8 * h < rows_valid) write_row_sum(p, tile.n_tile, row0 + ra + 8 * h, total);
      }
    }
    if (p.red.amax) {
      warp_amax(p.red.amax, amax_gate);
      warp_amax(p.red.amax + 1, amax_up);
    }
  }

  template <int kBN, PairKind kPair, int kRegs>
  __device__ static void run_any_output(const float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                                        int n0, int64_t row0, const Staging<kBN>& st) {
    if (p.d.type == OutType::f32) run<kBN, kPair, Staging<kBN>::kRowBytes / 4>(acc, p, tile, n0, row0, st);
    else run<kBN, kPair, Staging<kBN>::kRowBytes / 2>(acc, p, tile, n0, row0, st);
  }

  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    if constexpr (kBN != kTileN) {
      __trap();  // never launched: the launcher runs dGLU with BN = 128 and without half tiles
    } else if (p.pairing == PairKind::halves) {
      run_any_output<kBN, PairKind::halves>(acc, p, tile, cmap.base[0], row0, st);
    } else if (p.pairing == PairKind::interleaved32) {
      run_any_output<kBN, PairKind::interleaved32>(acc, p, tile, cmap.base[0], row0, st);
    } else {
      run_any_output<kBN, PairKind::interleaved32_up_first>(acc, p, tile, cmap.base[0], row0, st);
    }
  }
};

}  // namespace moegemm::sm90
