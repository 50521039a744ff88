// Kernel parameters shared by the host launcher, the mainloop and the epilogues.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moegemm::sm90 {

enum class OutType : uint8_t { bf16, f16, f32 };
enum class ActKind : uint8_t { swiglu, geglu, swiglu_clamped };
enum class PairKind : uint8_t { halves, interleaved32, interleaved32_up_first };

/// One row-major output matrix (row stride `ld` in elements); ptr == nullptr means "not requested".
struct OutMatrix {
  void* ptr = nullptr;
  int64_t ld = 0;
  OutType type = OutType::bf16;
};

/// The reductions of the backward epilogues (docs/ops.md §7). Per-tile partials go to the workspace and a
/// finish kernel sums them in a fixed order, so results are bitwise reproducible.
struct Reductions {
  float* dprob = nullptr;           // (M,) f32 row sums, written directly when there is one column slot
  float* dprob_partials = nullptr;  // else [slot][M] partial row sums (slot: n-tile, or dGLU 128-column pass)
  float* dbias_partials = nullptr;  // [m_index * 2 + warpgroup][cols] partial column sums
  float* amax = nullptr;            // max |value| per output kind, by integer atomicMax (exact, order-free)
};

struct KernelParams {
  CUtensorMap tma_a;  // A K-major (M, K): dims {K, M}, box {64, 128}; M-major: per-expert maps instead
  CUtensorMap tma_b;  // B nk: dims {K, N, E}, box {64, 64, 1}; kn: dims {N, K, E}, box {64, 64, 1}
  CUtensorMap tma_d;  // D (M, cols): dims {cols, M}, box {128 B of columns, 64}, 128B swizzle (stores)
  CUtensorMap tma_c;  // C likewise, when requested; dGLU: the saved pre-activation (loads, when saved_tile)
  const CUtensorMap* a_maps;  // per-expert A maps of the k-grouped kernel (in the workspace); unused otherwise
  const CUtensorMap* b_maps;  // per-expert B maps (pointer-mode weights or ragged K) or nullptr
  const int* offsets;  // (E,) cumulative expert ends; nullptr = one group of M rows
  int num_experts;
  int m;  // rows of A (ragged K: output rows per expert)
  int n;  // B columns per expert (pre-activation columns for GLU)
  int k;  // contraction length (ragged K: total rows the offsets index)
  int n_tiles;   // tiles along N per expert
  int k_blocks;  // ceil(K / 64)
  bool half_tiles;  // an expert's last <= 64 rows run as a half tile (both warpgroups, half the columns each)
  // m-grouped: an expert's first tile starts at its first row rounded down to a multiple of this (a power of
  // two); 8 for M-major A, whose TMA boxes start at 16-byte multiples along M (the rows before the expert's
  // are loaded and computed, not written)
  int tile_row_align = 1;
  int* tile_counter;  // zeroed device counter of the dynamic tile order (tile_order.cuh), or nullptr: static
  const float* alpha;  // (E,) or nullptr -> alpha_scalar
  float alpha_scalar;
  const float* prob;   // (M,) or nullptr -> 1
  const void* bias;    // (E, N) or nullptr
  bool bias_f32;       // else bf16
  OutMatrix d;
  OutMatrix c;
  OutMatrix preact;      // saved pre-activation read by the backward epilogues
  const float* beta;     // (E,) scale of preact, or nullptr -> 1
  bool saved_tile;       // dGLU: the producer TMA-loads each tile's preact columns (tma_c) into the staging area
  Reductions red;
  const int64_t* w_ptrs;  // weight gradient: per-expert output addresses, or nullptr -> d is (E * m, n)
  bool accumulate;        // weight gradient: add into the existing output
  ActKind act;
  PairKind pairing;
  float limit;
  float act_alpha;
  float linear_offset;
  // swiglu_clamped with a 16-bit C: pre-activations in [crossing_lo, crossing_hi] (-x for the lower bound)
  // would round across the limit; they become crossing_to (clamp_crossing.hpp). lo > hi otherwise.
  float crossing_lo, crossing_hi, crossing_to;
};

/// Whether the weight gradient's dense output, (E * m, n), is addressed by TMA: its coordinates are 32-bit, so
/// past 2^31 - 1 rows the epilogue takes its 64-bit bounds-checked stores and launch_wgrad encodes no map.
__host__ __device__ inline bool dense_rows_fit_tma(const KernelParams& p) {
  return static_cast<int64_t>(p.num_experts) * p.m <= INT32_MAX;
}

}  // namespace moegemm::sm90
