// Pieces every epilogue shares: per-expert alpha, per-column bias, per-row prob, reads of a saved matrix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sm90/epilogues/store.cuh"
#include "sm90/params.cuh"
#include "sm90/ptx.cuh"
#include "sm90/scheduler.cuh"

namespace moegemm::sm90 {

/// G = alpha[g] * acc + bias[g, col] for every register, in place (docs/ops.md §1: bias before prob).
template <int kBN, int kRegs>
__device__ __forceinline__ void apply_alpha_bias(float (&acc)[kRegs], const KernelParams& p, int expert,
                                                 const ColumnMap& cmap, int quad) {
  if (!p.alpha && !p.bias && p.alpha_scalar == 1.f) return;  // the plain GEMM: nothing to do
  const float alpha = p.alpha ? __ldg(p.alpha + expert) : p.alpha_scalar;
  const int64_t bias_row = static_cast<int64_t>(expert) * p.n;
#pragma unroll
  for (int i = 0; i < kBN / 8; ++i) {
    const int seg = i / 8;  // 64-column segment, known at compile time
    const int gcol = cmap.base[seg] + ((8 * i) & 63) + 2 * quad;
    float b0 = 0.f, b1 = 0.f;
    if (p.bias && gcol < cmap.limit[seg]) {
      if (p.bias_f32) {
        const float* bias = static_cast<const float*>(p.bias) + bias_row + gcol;
        b0 = __ldg(bias);
        b1 = __ldg(bias + 1);
      } else {
        const __nv_bfloat16* bias = static_cast<const __nv_bfloat16*>(p.bias) + bias_row + gcol;
        b0 = __bfloat162float(bias[0]);
        b1 = __bfloat162float(bias[1]);
      }
    }
    acc[4 * i + 0] = fmaf(acc[4 * i + 0], alpha, b0);
    acc[4 * i + 1] = fmaf(acc[4 * i + 1], alpha, b1);
    acc[4 * i + 2] = fmaf(acc[4 * i + 2], alpha, b0);
    acc[4 * i + 3] = fmaf(acc[4 * i + 3], alpha, b1);
  }
}

/// max(x, 0) that keeps NaN, as torch.relu and jax.nn.relu do (fmaxf(NaN, 0) would give 0).
__device__ __forceinline__ float relu(float x) { return x < 0.f ? 0.f : x; }

/// x clamped into [lo, hi] (finite bounds), keeping NaN as the reference's std::clamp and torch.clamp /
/// jnp.clip do (fminf and fmaxf would return a bound for a NaN x); min_nan (ptx.cuh) is the one-sided clamp.
__device__ __forceinline__ float clamp_keep_nan(float x, float lo, float hi) { return min_nan(max_nan(x, lo), hi); }

/// max(m, |v|) for an amax that keeps a NaN once one is seen, as the reference's abs_max and torch.amax do
/// (fmaxf would drop it). warp_amax then folds the bits of |m|, under which every NaN orders above +inf.
__device__ __forceinline__ float abs_max(float m, float v) { return max_nan(m, fabsf(v)); }

/// Rows of a warpgroup's 64-row slice that belong to the expert (0..64).
__device__ __forceinline__ int rows_in_warpgroup(int64_t row0, int row_end) {
  const int64_t rows = static_cast<int64_t>(row_end) - row0;
  return rows <= 0 ? 0 : (rows >= 64 ? 64 : static_cast<int>(rows));
}

/// prob of the thread's two rows (1 where there is no prob or the row is outside the expert).
__device__ __forceinline__ float2 row_probs(const KernelParams& p, int64_t row_a, int row_end) {
  float2 pr = make_float2(1.f, 1.f);
  if (p.prob) {
    if (row_a < row_end) pr.x = __ldg(p.prob + row_a);
    if (row_a + 8 < row_end) pr.y = __ldg(p.prob + row_a + 8);
  }
  return pr;
}

/// Two adjacent elements of a row-major f32/bf16/f16 matrix, as floats. Plain (coherent) loads: the
/// compiler may not keep them across a barrier, so re-reading a value costs a load, not registers.
__device__ __forceinline__ float2 load_pair(const OutMatrix& m, int64_t row, int col) {
  const int64_t idx = row * m.ld + col;
  if (m.type == OutType::f32) return *reinterpret_cast<const float2*>(static_cast<const float*>(m.ptr) + idx);
  if (m.type == OutType::bf16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(m.ptr) + idx));
  }
  return __half22float2(*reinterpret_cast<const __half2*>(static_cast<const __half*>(m.ptr) + idx));
}

}  // namespace moegemm::sm90
