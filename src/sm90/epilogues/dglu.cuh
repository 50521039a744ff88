// Backward of the gated linear unit (docs/ops.md §3), fused into the dgrad GEMM's epilogue. The GEMM gives
// dH (M, I); per element, with (gate, up) = beta * C at the paired columns and h = act(gate, up):
//   d_gate = alpha dH prob dact/dgate,  d_up = alpha dH prob dact/dup   (written in C's column layout),
//   dprob[r] = sum_i h alpha dH,  dbias = per-expert column sums of dC,  amax = [max|d_gate|, max|d_up|].
// The epilogue works on 128 dH columns at a time (kTileN), i.e. 256 dC columns in 4 "virtual" 64-column
// segments. With 16-bit preact and dC the segments arrive in shared memory (run_saved): a tile of 256 dH
// columns takes two such passes, the producer loading the second pass's preact once the first has been
// stored. Otherwise (f32 preact or dC; tiles of 128 dH columns) preact is read from global memory and dC
// staged in passes (run_global):
//  - halves: [gate n0..n0+127 | up I+n0..I+n0+127];
//  - interleaved32 / _up_first: the contiguous dC columns 2 n0 .. 2 n0 + 255.
#pragma once

#include "sm90/epilogues/glu.cuh"
#include "sm90/epilogues/linear.cuh"
#include "sm90/epilogues/reduce.cuh"

namespace moegemm::sm90 {

/// h and its partial derivatives; the formulas of docs/ops.md §2-3 (gradient inclusive at the clamp boundary).
struct GluGrad {
  float h, d_gate, d_up;
  // Whether the gradient passes each clamp (swiglu_clamped; always for the other activations): where it does
  // not, dC is 0 whatever dH is (a product with the zero derivative would be NaN for an infinite dH).
  bool gate_passes = true, up_passes = true;
};

template <ActKind kAct>
__device__ __forceinline__ GluGrad glu_grad(const KernelParams& p, float gate, float up) {
  GluGrad v;
  if constexpr (kAct == ActKind::swiglu) {
    const float s = sigmoid_fast(gate);
    v.h = gate * s * up;
    v.d_gate = up * s * (1.f + gate * (1.f - s));
    v.d_up = gate * s;
  } else if constexpr (kAct == ActKind::geglu) {
    const float k = 0.7978845608028654f;
    const float t = tanh_fast(k * (gate + 0.044715f * gate * gate * gate));
    const float gelu = 0.5f * gate * (1.f + t);
    v.h = gelu * up;
    v.d_gate = up * (0.5f * (1.f + t) + 0.5f * gate * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * gate * gate));
    v.d_up = gelu;
  } else {
    const float g = min_nan(gate, p.limit);
    const float u = clamp_keep_nan(up, -p.limit, p.limit);
    const float s = sigmoid_fast(p.act_alpha * g);
    v.h = (u + p.linear_offset) * (g * s);  // the reference's order (glu.cuh)
    v.gate_passes = gate <= p.limit;
    v.up_passes = up >= -p.limit && up <= p.limit;
    v.d_gate = (u + p.linear_offset) * (s + p.act_alpha * ((g * s) * (1.f - s)));
    v.d_up = g * s;
  }
  return v;
}

/// Activation and pairing are template parameters, as in GluEpilogue: one variant's code per kernel.
template <ActKind kAct, PairKind kPair>
struct DgluEpilogue {
  static constexpr int kTileN = 128;  // dH columns per epilogue pass (run_global: per tile, BN = 128)
  static constexpr int kScratchBytes = ColumnSums<2 * kTileN>::kBytes;  // dbias column sums
  static constexpr int kBatch = 4;  // chunks whose C loads are in flight together (run_global)
  // With 16-bit preact and dC (p.saved_tile) the producer loads the 256 preact columns of each pass into the
  // staging area, and the epilogue overwrites them in place with dC (same columns, same layout).
  static constexpr int kSavedTileCols = 2 * kTileN;
  static constexpr int kSavedPassCols = kTileN;  // accumulator (dH) columns one saved-tile pass covers
  static constexpr bool kHalfTiles = false;  // row sums per warpgroup need whole tiles
  // Whether run_saved has a second copy of its loop for whole passes. Not for the clamped SwiGLU: its clamps
  // leave too few registers for it.
  static constexpr bool kWholePassPath = kAct != ActKind::swiglu_clamped;

  /// dH columns of B sub-box j: contiguous, limited by I.
  __device__ static ColumnMap b_columns(const KernelParams& p, int n_tile, int bn, bool half) {
    return LinearEpilogue::b_columns(p, n_tile, bn, half);
  }

  /// Virtual staging column of the gate (or up) partner of dH chunk i (8 columns).
  template <int kBN>
  __device__ static constexpr int virtual_column(int i, bool up) {
    if constexpr (kPair == PairKind::halves) return (up ? kBN : 0) + 8 * i;
    const int gate_first = 64 * (i / 4) + 8 * (i % 4);
    const bool second = kPair == PairKind::interleaved32 ? up : !up;
    return gate_first + (second ? 32 : 0);
  }

  /// dC (and preact) columns of the tile's 4 virtual 64-column segments, for the tile whose first dH column
  /// is n0: halves [gate 2 x 64 | up 2 x 64], interleaved contiguous.
  __device__ static ColumnMap dc_columns(const KernelParams& p, int n0) {
    const int inter = p.n;
    ColumnMap m;
#pragma unroll
    for (int seg = 0; seg < 4; ++seg) {
      m.base[seg] = kPair == PairKind::halves ? (seg >= 2 ? inter : 0) + n0 + 64 * (seg & 1) : 2 * n0 + 64 * seg;
      m.limit[seg] = kPair == PairKind::halves && seg < 2 ? inter : 2 * inter;
    }
    return m;
  }

  /// The columns the producer loads for the saved-tile pass whose first dH column is n0 (p.saved_tile).
  __device__ static ColumnMap saved_columns(const KernelParams& p, int n0) { return dc_columns(p, n0); }

  /// The reductions of the 128 dH columns from n0 once their values are done: dbias partials, dprob row
  /// sums (slot n0 / kTileN), amax.
  __device__ static void finish(const KernelParams& p, const WorkTile& tile, int n0, const ColumnMap& dmap,
                                const ColumnSums<2 * kTileN>& sums, int64_t row0, int rows_valid, int ra, int q,
                                float (&row_sum)[2], float amax_gate, float amax_up) {
    if (p.red.dbias_partials) {
      sums.finish(p, tile, row0, 2 * p.n, [&](int v) {
        const int col = pick(dmap.base, v >> 6) + (v & 63);
        return col < pick(dmap.limit, v >> 6) ? col : -1;
      });
    }
    if (p.red.dprob || p.red.dprob_partials) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float total = quad_sum(row_sum[h]);
        if (q == 0 && ra + 8 * h < rows_valid) write_row_sum(p, n0 / kTileN, row0 + ra + 8 * h, total);
      }
    }
    if (p.red.amax) {
      warp_amax(p.red.amax, amax_gate);
      warp_amax(p.red.amax + 1, amax_up);
    }
  }

  /// What both paths derive first for a tile: the warpgroup's valid rows, alpha and beta of the expert, the
  /// thread's row and quad, its rows' prob, the dC column map and whether a TMA store may write the slice.
  struct Setup {
    int rows_valid;
    float alpha, beta;
    int ra, q;
    float2 pr;
    ColumnMap dmap;
    bool use_tma;
  };
  template <int kBN>
  __device__ static Setup setup(const KernelParams& p, const WorkTile& tile, int n0, int64_t row0,
                                const Staging<kBN>& st) {
    Setup v;
    v.rows_valid = rows_in_warpgroup(row0, tile.row_end);
    v.alpha = p.alpha ? __ldg(p.alpha + tile.expert) : p.alpha_scalar;
    v.beta = p.beta ? __ldg(p.beta + tile.expert) : 1.f;
    v.ra = st.row_a();
    v.q = st.quad();
    v.pr = row_probs(p, row0 + v.ra, tile.row_end);
    v.dmap = dc_columns(p, n0);
    v.use_tma = v.rows_valid == 64 && segments_fit(v.dmap, 2 * p.n);
    return v;
  }

  /// One tile from the preact tile in the staging area (p.saved_tile, which the kernel has waited for):
  /// every thread reads the (gate, up) pairs of its own fragment positions and overwrites them with
  /// (d_gate, d_up), then the 64 x 256 dC slice is stored in one go.
  /// kPre / kD: the 16-bit types of preact and dC, as template arguments so that the per-element loop has no
  /// type switch.
  template <OutType kPre, OutType kD, int kBN, int kRegs>
  __device__ static void run_saved(const float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile, int n0,
                                   int64_t row0, const Staging<kBN>& st) {
    // The thread's shared-memory addresses derive from its index. Made opaque here, they are computed per
    // tile instead of being hoisted out of the tile loop, where they would hold registers the 256-column
    // tile's accumulators need.
    int tid = st.tid;
    asm volatile("" : "+r"(tid));
    const Staging<kBN> pst{st.buf, tid, st.barrier_id, st.scratch};
    const Staging<2 * kBN> tile_buf{st.buf, tid, st.barrier_id, st.scratch};
    const int inter = p.n;
    const auto [rows_valid, alpha, beta, ra, q, pr, dmap, use_tma] = setup(p, tile, n0, row0, pst);
    const ColumnSums<2 * kBN> sums{st.scratch, tid, st.barrier_id};
    if (p.red.dbias_partials) sums.begin();

    float row_sum[2] = {0.f, 0.f};
    float amax_gate = 0.f, amax_up = 0.f;
    const uint32_t fragment = tile_buf.fragment_base();
    // kWhole: every row of the slice and every column of the pass lie inside the expert and N, and beta = 1
    // (most passes). The per-element bounds selects and the beta products then drop out, the values being
    // the same. Otherwise elements out of bounds give zeros and add nothing.
    // A chunk's preact pairs are read one chunk ahead, before the previous chunk's dC is written over its
    // own pairs: the compiler cannot tell the swizzled addresses apart, so a read placed after those writes
    // waits for them, and each chunk's shared-memory latency and arithmetic would run back to back.
    auto read_chunk = [&](int i, float2 (&pre)[4]) {
      const int vg = virtual_column<kBN>(i, false), vu = virtual_column<kBN>(i, true);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        pre[h] = tile_buf.template read_pair16<kPre>(fragment_pair_offset(fragment, vg, h));
        pre[2 + h] = tile_buf.template read_pair16<kPre>(fragment_pair_offset(fragment, vu, h));
      }
    };
    // kReduce: the per-chunk amax and dbias code, branched on per chunk. Without it the loop is one basic block
    // and the compiler interleaves consecutive chunks.
    auto chunks = [&]<bool kWhole, bool kReduce>() {
      float2 pre[2][4];  // [chunk parity][gate h0, gate h1, up h0, up h1]
      read_chunk(0, pre[0]);
#pragma unroll
      for (int i = 0; i < kBN / 8; ++i) {
        const int vg = virtual_column<kBN>(i, false), vu = virtual_column<kBN>(i, true);
        const bool col_ok = kWhole || n0 + 8 * i + 2 * q < inter;
        if (i + 1 < kBN / 8) read_chunk(i + 1, pre[(i + 1) & 1]);
        float dg[4], du[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool ok = kWhole || (col_ok && ra + 8 * h < rows_valid);
          const float scale = alpha * (h ? pr.y : pr.x);  // dC = acc * alpha * prob * dact
          const float2 g = pre[i & 1][h], u = pre[i & 1][2 + h];
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            const float a = acc[4 * i + 2 * h + x];
            const float gate = x ? g.y : g.x, up = x ? u.y : u.x;
            const GluGrad v = kWhole ? glu_grad<kAct>(p, gate, up) : glu_grad<kAct>(p, beta * gate, beta * up);
            dg[2 * h + x] = ok && v.gate_passes ? a * scale * v.d_gate : 0.f;
            du[2 * h + x] = ok && v.up_passes ? a * scale * v.d_up : 0.f;
            row_sum[h] += ok ? v.h * a : 0.f;  // times alpha below
          }
          tile_buf.template write_pair16<kD>(fragment_pair_offset(fragment, vg, h), dg[2 * h], dg[2 * h + 1]);
          tile_buf.template write_pair16<kD>(fragment_pair_offset(fragment, vu, h), du[2 * h], du[2 * h + 1]);
        }
        if (kReduce && p.red.amax) {  // amax is for FP8 scaling
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            amax_gate = abs_max(amax_gate, dg[e]);
            amax_up = abs_max(amax_up, du[e]);
          }
        }
        if (kReduce && p.red.dbias_partials) {
          sums.put(vg, 0, dg[0] + dg[2]);
          sums.put(vg, 1, dg[1] + dg[3]);
          sums.put(vu, 0, du[0] + du[2]);
          sums.put(vu, 1, du[1] + du[3]);
        }
      }
    };
    const bool whole = kWholePassPath && rows_valid == 64 && n0 + kBN <= inter && beta == 1.f;
    if (whole && !p.red.amax && !p.red.dbias_partials) chunks.template operator()<true, false>();
    else if (whole) chunks.template operator()<true, true>();
    else chunks.template operator()<false, true>();
    tile_buf.store(p.d, &p.tma_d, dmap, 0, 2 * kBN, row0, rows_valid, use_tma);
    row_sum[0] *= alpha;
    row_sum[1] *= alpha;
    finish(p, tile, n0, dmap, sums, row0, rows_valid, ra, q, row_sum, amax_gate, amax_up);
  }

  /// One tile from preact in global memory (f32 preact or dC), pass by pass: a pass computes (d_gate, d_up)
  /// of the dH chunks whose dC columns it stages (kPassCols virtual columns: 128 for 16-bit dC, 64 for f32),
  /// recomputing them per pass so that only dH lives in registers. Each element's dprob term and amax are
  /// counted in the pass that stages its gate (amax of d_up: its up).
  template <int kBN, int kPassCols, int kRegs>
  __device__ static void run_global(const float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile, int n0,
                                    int64_t row0, const Staging<kBN>& st) {
    static_assert(kBN == kTileN, "without a saved tile, dGLU tiles are 128 dH columns");
    const int inter = p.n;
    const auto [rows_valid, alpha, beta, ra, q, pr, dmap, use_tma] = setup(p, tile, n0, row0, st);
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
          const int vg = virtual_column<kBN>(i, false);
          const int vu = virtual_column<kBN>(i, true);
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
          const int vg = virtual_column<kBN>(i, false);
          const int vu = virtual_column<kBN>(i, true);
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
              const GluGrad v = glu_grad<kAct>(p, beta * (x ? gh.y : gh.x), beta * (x ? uh.y : uh.x));
              dg[2 * h + x] = ok && v.gate_passes ? dh * prob * v.d_gate : 0.f;
              du[2 * h + x] = ok && v.up_passes ? dh * prob * v.d_up : 0.f;
              if (stage_gate) row_sum[h] += ok ? v.h * dh : 0.f;
            }
          }
          if (stage_gate) {
            st.write_pair(ra, vg - begin + 2 * q, p.d.type, dg[0], dg[1]);
            st.write_pair(ra + 8, vg - begin + 2 * q, p.d.type, dg[2], dg[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax_gate = abs_max(amax_gate, dg[e]);
            if (p.red.dbias_partials) {
              sums.put(vg, 0, dg[0] + dg[2]);
              sums.put(vg, 1, dg[1] + dg[3]);
            }
          }
          if (stage_up) {
            st.write_pair(ra, vu - begin + 2 * q, p.d.type, du[0], du[1]);
            st.write_pair(ra + 8, vu - begin + 2 * q, p.d.type, du[2], du[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax_up = abs_max(amax_up, du[e]);
            if (p.red.dbias_partials) {
              sums.put(vu, 0, du[0] + du[2]);
              sums.put(vu, 1, du[1] + du[3]);
            }
          }
        }
      }
      st.store(p.d, &p.tma_d, dmap, begin, kPassCols, row0, rows_valid, use_tma);
    }

    finish(p, tile, n0, dmap, sums, row0, rows_valid, ra, q, row_sum, amax_gate, amax_up);
  }

  /// Saved-tile pass `pass` of a tile of kBN dH columns (p.saved_tile: 16-bit preact and dC, which the kernel
  /// has waited for): the pass's 128 dH columns are the first kTileN / 2 registers of `acc` (the kernel moves
  /// the next pass's registers down between passes).
  template <int kBN, int kRegs>
  __device__ static void apply_saved(const float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                                     int pass, int64_t row0, const Staging<kBN>& st) {
    static_assert(kBN % kTileN == 0 && kRegs == kBN / 2, "whole passes of a 64 x kBN accumulator slice");
    const float(&part)[kTileN / 2] = *reinterpret_cast<const float(*)[kTileN / 2]>(&acc[0]);
    const Staging<kTileN> pass_st{st.buf, st.tid, st.barrier_id, st.scratch};
    const int n0 = tile.n_tile * kBN + pass * kTileN;
    constexpr OutType bf16 = OutType::bf16, f16 = OutType::f16;
    const bool pre_f16 = p.preact.type == f16, d_f16 = p.d.type == f16;
    if (!pre_f16 && !d_f16) run_saved<bf16, bf16, kTileN>(part, p, tile, n0, row0, pass_st);
    else if (pre_f16 && d_f16) run_saved<f16, f16, kTileN>(part, p, tile, n0, row0, pass_st);
    else if (pre_f16) run_saved<f16, bf16, kTileN>(part, p, tile, n0, row0, pass_st);
    else run_saved<bf16, f16, kTileN>(part, p, tile, n0, row0, pass_st);
  }

  /// Without a saved tile (f32 preact or dC): tiles of 128 dH columns, preact read from global memory.
  template <int kBN, int kRegs>
  __device__ static void apply(float (&acc)[kRegs], const KernelParams& p, const WorkTile& tile,
                               const ColumnMap& cmap, int /*d_col0*/, int64_t row0, const Staging<kBN>& st) {
    if constexpr (kBN != kTileN) {
      __trap();  // never launched: without a saved tile the launcher runs dGLU with BN = 128, no half tiles
    } else if (p.d.type == OutType::f32) {
      run_global<kBN, Staging<kBN>::kRowBytes / 4>(acc, p, tile, cmap.base[0], row0, st);
    } else {
      run_global<kBN, Staging<kBN>::kRowBytes / 2>(acc, p, tile, cmap.base[0], row0, st);
    }
  }
};

}  // namespace moegemm::sm90
